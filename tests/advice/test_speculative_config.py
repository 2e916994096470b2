"""The ``--speculative-config`` specobs prints is the drafter that ran: every speculative field
the input's run metadata shows is in it (only k and the schedule are the recommendation's); a
config the input cannot complete names what is missing and is not printed as ready to paste;
the installed vLLM's declared fields check it (the full build is tests/test_vllm_speculative_config.py).
"""

from __future__ import annotations

import dataclasses
import enum
import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.event_files import metadata, step, write
from support.helpers import run_cli
from support.paths import ROOT
from support.speculative_config import shown_in_log

import specobs
from specobs.advice import config_line as speculative
from specobs.advice.recommend import recommend
from specobs.records import RunMetadata
from specobs.vllm import spec_config as vllm_speculative

DATA = ROOT / "examples" / "data"
LOGS = sorted(DATA.glob("*.log"))
SCRAPES = sorted(DATA.glob("*.metrics.txt"))
#: Set by the recommendation, not carried over from what ran.
RECOMMENDED = {"num_speculative_tokens", "num_speculative_tokens_per_batch_size"}
needs_vllm_source = pytest.mark.skipif(vllm_speculative.installed() is None, reason="needs vLLM installed")


def recommended(*paths: Path, **options) -> tuple[specobs.Recommended, list[RunMetadata]]:
    data = specobs.load([str(p) for p in paths])
    rec = recommend(data.windows, bootstrap=0, metadata=data.metadata, **options)
    assert rec is not None
    return rec.recommended, data.metadata


def ran_configs(*paths: Path, **options) -> dict[str | None, specobs.SpeedupBand]:
    """Method → its band, whose config is what ran: a log or scrape alone has no timing, so it
    prints no recommendation but the config that ran, completed from the run metadata."""
    data = specobs.load([str(p) for p in paths])
    rec = recommend(data.windows, bootstrap=0, metadata=data.metadata, **options)
    assert rec is not None and rec.recommended.basis == "not measured"
    return {band.method: band for band in rec.bands}


def cli_json(*args: str) -> dict:
    result = run_cli(*args, "--format", "json", "--bootstrap", "0")
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


@pytest.mark.slow
def test_the_three_bundled_logs_print_the_drafter_that_ran():
    printed = {}
    for name in ("ngram", "draft", "eagle"):
        (band,) = cli_json("recommend", str(DATA / f"vllm-cpu-{name}-k3.log"))["bands"]
        assert band["missing_fields"] == []
        printed[name] = json.loads(band["speculative_config"])
        assert printed[name]["num_speculative_tokens"] == 3  # as it ran
    assert {k: printed["ngram"].get(k) for k in ("method", "prompt_lookup_min", "prompt_lookup_max")} == {
        "method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 3,
    }  # fmt: skip
    assert "model" not in printed["ngram"]
    assert (printed["draft"]["method"], printed["draft"]["model"]) == ("draft_model", "draft")
    # EAGLE's draft folder is named like its method: it is still the draft model vLLM needs.
    assert (printed["eagle"]["method"], printed["eagle"]["model"]) == ("eagle", "eagle")


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_every_field_a_bundled_log_shows_is_in_the_printed_config(log):
    bands = ran_configs(log)
    for method, band in bands.items():
        config = json.loads(band.speculative_config)
        shown = [s for s in shown_in_log(log) if s.get("method") == method]
        assert shown, "the log shows the config of every method it ran"
        for settings in shown:
            for key, value in settings.items():
                if key not in RECOMMENDED:
                    assert config[key] == value, key
        assert band.missing_fields == ()


def _metadata_records(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*-meta-*")):
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        out += [json.loads(line) for line in text.splitlines() if line.strip()]
    return out


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-llama-eagle3", "tiny-gemma4"])
def test_the_bundled_method_recordings_print_the_draft_their_metadata_records(model):
    folder = DATA / "vllm-cpu-methods"
    r, _ = recommended(folder, model=model)
    assert r.method is not None
    config = json.loads(r.speculative_config)
    records = [m for m in _metadata_records(folder) if m["model"] == model and m["method"] == r.method]
    assert records and {m["draft_model"] for m in records} == {config["model"]}
    for m in records:  # recorded before run metadata held the settings: none shown, none invented
        assert m.get("speculative_config") is None
    assert set(config) <= {"method", "model", *RECOMMENDED}
    assert r.missing_fields == ()


def test_a_capture_without_settings_leaves_ngram_incomplete(tmp_path):
    # The bundled sweep's event files without their run-metadata records: ngram's lookup bounds are not there.
    for path in (DATA / "vllm-cpu-sweep").glob("*.jsonl"):
        if path.name.startswith("specobs-"):
            (tmp_path / path.name).write_bytes(path.read_bytes())
    r, meta = recommended(tmp_path)
    assert meta == [] and r.method == "ngram"
    assert r.missing_fields == ("prompt_lookup_min", "prompt_lookup_max") and not r.ready
    assert set(json.loads(r.speculative_config)) <= {"method", *RECOMMENDED}


@pytest.mark.parametrize(
    ("scrape", "method", "missing"),
    [
        ("vllm-cpu-ngram-k3.metrics.txt", "ngram", ("prompt_lookup_min", "prompt_lookup_max")),
        ("vllm-cpu-draft-k3.metrics.txt", "draft_model", ("model",)),
        ("vllm-cpu-eagle-k3.metrics.txt", "eagle", ("model",)),
    ],
)
def test_a_scrape_shows_no_config_so_the_config_names_what_to_add(scrape, method, missing):
    data = specobs.load([str(DATA / scrape)])
    assert data.metadata == []
    (unnamed,) = ran_configs(DATA / scrape).values()
    assert unnamed.speculative_config is None  # no method: no config at all
    band = ran_configs(DATA / scrape, method=method)[method]
    assert band.missing_fields == missing
    assert json.loads(band.speculative_config)["method"] == method


@pytest.mark.slow
def test_an_incomplete_config_is_printed_as_such_and_a_ready_one_as_a_flag():
    scrape = str(DATA / "vllm-cpu-draft-k3.metrics.txt")
    rich = run_cli("recommend", scrape, "--method", "draft_model", "--bootstrap", "0").stdout.decode()
    markdown = run_cli("recommend", scrape, "--method", "draft_model", "--bootstrap", "0", "-f", "markdown")
    for text in (rich, markdown.stdout.decode()):
        assert "As it ran (incomplete: the input does not show model): " in text
        assert "--speculative-config '" not in text
        assert '{"method": "draft_model", "num_speculative_tokens": 3}' in text
    log = str(DATA / "vllm-cpu-eagle-k3.log")
    (band,) = cli_json("recommend", log)["bands"]
    text = run_cli("recommend", log, "--bootstrap", "0").stdout.decode()
    assert f"As it ran, to measure: --speculative-config '{band['speculative_config']}'" in text
    assert "incomplete" not in text


@pytest.mark.slow
def test_report_and_recommend_commands_pass_the_run_metadata():
    log = str(DATA / "vllm-cpu-ngram-k3.log")
    report = run_cli("report", log, "--format", "json")
    assert report.returncode == 0
    config = json.loads(json.loads(report.stdout)["recommendation"]["bands"][0]["speculative_config"])
    assert (config["prompt_lookup_min"], config["prompt_lookup_max"]) == (2, 3)


@pytest.mark.slow
def test_settings_from_a_capture_folder_are_carried_into_the_config(tmp_path):
    # Two eagle3 engines that ran with the same draft parallelism and quantization, and different
    # draft_sample_method: the agreed settings are carried, the disputed one is missing.
    shown = {"method": "eagle3", "model": "d", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1,
             "quantization": "fp8"}  # fmt: skip
    rows = [step(i, 1 + i % 4, 3, 3, 2, draft_model="d") for i in range(400)]
    meta = [
        metadata(draft_model="d", speculative_config=shown, model_path="/models/m"),
        metadata(engine=1, draft_model="d", speculative_config={**shown, "draft_sample_method": "probabilistic"}),
    ]
    folder = write(tmp_path / "run", rows, meta)
    r, records = recommended(folder, margin=0.0)
    assert [m.speculative_config["quantization"] for m in records] == ["fp8", "fp8"]
    assert r.method == "eagle3"
    config = json.loads(r.speculative_config)
    assert (config["model"], config["draft_tensor_parallel_size"], config["quantization"]) == ("d", 1, "fp8")
    assert "draft_sample_method" not in config
    assert r.missing_fields == ("draft_sample_method",)
    assert r.differing == {"draft_sample_method": ('"probabilistic"', "unset")}
    text = run_cli("recommend", str(folder), "--bootstrap", "0", "--margin", "0").stdout.decode()
    assert 'add draft_sample_method (the input\'s engines of this method ran with "probabilistic" and unset)' in text


def meta(**fields) -> RunMetadata:
    return RunMetadata(**{"model": "m", "method": "ngram", **fields})


def test_the_config_takes_only_the_engines_of_its_method_and_target():
    records = [
        meta(speculative_config={"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}),
        meta(model="other", speculative_config={"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 1}),
        meta(method="draft_model", draft_model="d", speculative_config={"method": "draft_model", "model": "d"}),
    ]
    ran = speculative.ran(records, "ngram", {"model": "m", "draft_model": None})
    assert ran.engines == 1 and ran.settings["prompt_lookup_max"] == 4
    config = speculative.config_for("ngram", "ngram", 5, [(1, 4, 5), (5, 8, 0)], ran)
    assert config.settings == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2,
                               "prompt_lookup_max": 4, "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 8, 0]]}  # fmt: skip
    assert config.missing == ()


def test_a_config_shown_without_lookup_bounds_ran_vllms_defaults_and_is_complete():
    ran = speculative.ran([meta(speculative_config={"method": "ngram", "num_speculative_tokens": 3})], "ngram", {})
    config = speculative.config_for("ngram", None, 4, None, ran)
    assert config.settings == {"method": "ngram", "num_speculative_tokens": 4} and config.missing == ()
    unseen = speculative.ran([meta()], "ngram", {})  # a start-up line alone: the settings are not shown
    assert speculative.config_for("ngram", None, 4, None, unseen).missing == ("prompt_lookup_min", "prompt_lookup_max")


def test_the_draft_model_comes_from_the_labels_or_the_metadata_and_mtp_needs_none():
    ran = speculative.ran([meta(method="eagle", draft_model="/d/eagle")], "eagle", {"draft_model": None})
    assert speculative.config_for("eagle", None, 2, None, ran).settings["model"] == "/d/eagle"
    assert speculative.config_for("eagle3", None, 2, None).missing == ("model",)
    assert speculative.config_for("mtp", None, 2, None).missing == ()  # vLLM takes the target's MTP layers


@needs_vllm_source
def test_the_installed_vllms_declared_fields_check_names_types_choices_and_bounds():
    installed = vllm_speculative.installed()
    assert installed is not None and installed.version
    fields = installed.fields
    good = {"method": "eagle3", "model": "d", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1,
            "num_speculative_tokens_per_batch_size": [[1, 4, 3]], "rejection_sample_method": "standard"}  # fmt: skip
    assert vllm_speculative.check_fields(good, fields) == []
    bad = {"method": "eagle9", "num_speculative_tokens": 0, "prompt_lookup_min": "2", "speculative_model": "d",
           "enforce_eager": 1, "tensor_parallel_size": 2}  # fmt: skip
    problems = vllm_speculative.check_fields(bad, fields)
    assert sorted(p.split(":")[0] for p in problems) == sorted(bad)
    assert "num_speculative_tokens: 0 must be > 0" in problems


@needs_vllm_source
def test_a_config_vllm_refuses_is_not_ready(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no model folder "target" here
    band = ran_configs(DATA / "vllm-cpu-ngram-k3.log")["ngram"]
    check = band.config_check
    assert check is not None and check.problems == () and check.fields_checked and not check.built
    # The target as the engine named it, relative to where it ran: not a folder from here.
    assert check.target_path == "target" and check.folders_not_found == ("target",) and not band.missing_fields
    r = specobs.Recommended("ngram", None, 3, None, 1.5, None, band.speculative_config, "plain engine")
    assert dataclasses.replace(r, config_check=check).ready
    bad = speculative.Config({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 0}, (), {})
    check = speculative.check(bad, speculative.Ran())
    assert check is not None and check.problems == ("prompt_lookup_min: 0 must be >= 1",) and not check.built
    refused = dataclasses.replace(r, config_check=check)
    assert not refused.ready
    from specobs.render.sentences import config_warning

    assert config_warning(refused) == (
        f"Not ready to paste: vLLM {check.vllm_version} (installed here) refuses it: prompt_lookup_min: 0 must be >= 1."
    )


def test_no_check_config_leaves_the_check_out():
    (band,) = cli_json("recommend", str(DATA / "vllm-cpu-eagle-k3.log"), "--no-check-config")["bands"]
    assert band["config_check"] is None and band["missing_fields"] == []


class Backend(enum.Enum):
    FLASH_ATTN = 1


@dataclasses.dataclass
class FakeSpeculativeConfig:
    """The shape of vLLM's ``SpeculativeConfig`` after start-up (the real one: the vllm tier)."""

    method: str | None = None
    model: str | None = None
    num_speculative_tokens: int | None = None
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    draft_tensor_parallel_size: int | None = None
    attention_backend: Backend | None = None
    rejection_sample_method: str = "standard"
    parallel_drafting: bool = False
    target_model_config: object = None
    num_speculative_tokens_per_batch_size: list | None = None


def test_the_capture_records_every_setting_but_vllms_placeholders():
    eagle = FakeSpeculativeConfig("eagle", "eagle", 3, 0, 0, 1, Backend.FLASH_ATTN, target_model_config=object(),
                                  num_speculative_tokens_per_batch_size=[(1, 4, 3)])  # fmt: skip
    assert vllm_speculative.settings(eagle) == {
        "method": "eagle", "model": "eagle", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1,
        "attention_backend": "FLASH_ATTN", "num_speculative_tokens_per_batch_size": [[1, 4, 3]],
    }  # fmt: skip
    ngram = FakeSpeculativeConfig("ngram", "ngram", 3, 2, 3, rejection_sample_method="block")
    assert vllm_speculative.settings(ngram) == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
                                                "prompt_lookup_max": 3, "rejection_sample_method": "block"}  # fmt: skip
    assert vllm_speculative.settings(None) is None


def test_capture_labels_keep_a_draft_named_like_its_method(monkeypatch):
    from specobs.vllm import hooks

    monkeypatch.setattr(hooks, "platform_labels", lambda: {"platform": "cpu", "device": None})  # no torch import
    labels_from_config = hooks.labels_from_config

    def config(method: str, draft: str) -> SimpleNamespace:
        return SimpleNamespace(
            model_config=SimpleNamespace(served_model_name=["m"], model="/models/m"),
            speculative_config=SimpleNamespace(method=method, model=draft),
            parallel_config=SimpleNamespace(data_parallel_rank=0),
        )

    assert labels_from_config(config("eagle", "eagle"))["draft_model"] == "eagle"
    assert labels_from_config(config("ngram", "ngram"))["draft_model"] is None
    assert labels_from_config(config("mtp", "m"))["draft_model"] is None  # vLLM's target itself


def test_settings_in_a_metadata_file_are_read_back_and_a_bad_one_is_named(tmp_path):
    good = metadata(speculative_config={"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 3})
    bad = metadata(engine=1)
    bad["speculative_config"] = "prompt_lookup_min=2"
    folder = write(tmp_path / "r", [step(i, 2, 3, 2, 1) for i in range(5)], [good, bad])
    data = specobs.load([str(folder)])
    assert [m.speculative_config for m in data.metadata] == [good["speculative_config"]]
    (skipped,) = data.skipped
    assert skipped.line == 2 and skipped.why.startswith("speculative_config is not an object")


def test_a_log_shows_the_servers_speculative_config_as_a_dict_or_as_its_json_text(tmp_path):
    start = (
        "(EngineCore_DP0 pid=9) INFO 11-30 04:49:01 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='/m/target', speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3), "
        "served_model_name=m\n"
        "(APIServer pid=7) INFO 11-30 04:53:28 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.65, "
        "Accepted: 124 tokens, Drafted: 225 tokens, Per-position acceptance rate: 0.813, 0.467, 0.373\n"
    )
    args = "(APIServer pid=7) INFO 11-30 04:48:47 [api_utils.py:286] non-default args: {'model': '/m/target', "
    shown = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
    as_dict = tmp_path / "dict.log"
    as_dict.write_text(args + f"'speculative_config': {shown!r}}}\n" + start)
    as_text = tmp_path / "text.log"
    as_text.write_text(args + f"'speculative_config': {json.dumps(shown)!r}}}\n" + start)
    alone = tmp_path / "alone.log"
    alone.write_text(start)
    for path, expected in ((as_dict, shown), (as_text, shown), (alone, None)):
        (m,) = specobs.load([str(path)]).metadata
        assert (m.model_path, m.method, m.draft_model, m.speculative_config) == ("/m/target", "ngram", None, expected)


@pytest.mark.slow
def test_a_draft_model_only_the_metadata_names_is_the_recommendations_too(tmp_path):
    rows = [step(i, 1 + i % 4, 3, 3, 2) for i in range(400)]  # rows without a draft_model label
    folder = write(tmp_path / "run", rows, [metadata(draft_model="/d/eagle3", speculative_config={"method": "eagle3"})])
    r, _ = recommended(folder, margin=0.0)
    assert r.method == "eagle3" and r.draft_model == "/d/eagle3"
    assert json.loads(r.speculative_config)["model"] == "/d/eagle3" and r.missing_fields == ()
