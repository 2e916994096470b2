"""Run metadata (read back, shown, compared) and the config-integrity findings built on it."""

from __future__ import annotations

import json
import subprocess

import pytest
from support.event_files import metadata, step, write
from support.helpers import run_cli
from support.paths import ROOT

from specobs import analyze, load
from specobs.analysis.integrity import integrity, schedule_lookup
from specobs.records import RunMetadata
from specobs.render import document
from specobs.schema import METADATA_KEY


def cli(*args: str) -> subprocess.CompletedProcess:
    result = run_cli(*args)
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(), result.stderr.decode())


def test_schedule_lookup_is_vllms_dense_table():
    # gaps and the tail carry the previous range's k; every k is capped at the maximum
    assert schedule_lookup([(1, 2, 3), (5, 6, 1)], 8, 4) == [0, 3, 3, 3, 3, 1, 1, 1, 1]
    assert schedule_lookup([(1, 4, 6), (5, 8, 2)], 8, 3) == [0, 3, 3, 3, 3, 2, 2, 2, 2]


def test_metadata_is_read_back_shown_in_the_report_and_bad_lines_are_named(tmp_path):
    good = metadata(environment={"VLLM_ROCM_USE_AITER": "1"}, schedule=[[1, 2, 3], [3, 8, 1]])
    lines = [json.dumps(good), json.dumps({**good, "engine": "zero"}), "{not json", json.dumps({METADATA_KEY: 9})]
    folder = write(tmp_path / "run", [step(i, 1, 3, 3, 2) for i in range(5)])
    (folder / "specobs-r-meta-p1-0001.jsonl").write_text("\n".join(lines) + "\n")
    ingested = load([str(folder)])
    (record,) = ingested.metadata
    assert (record.attention_backend, record.device_arch, record.schedule) == (
        "ROCM_ATTN",
        "gfx942",
        ((1, 2, 3), (3, 8, 1)),
    )
    assert record.environment == {"VLLM_ROCM_USE_AITER": "1"}
    why = {s.line: s.why for s in ingested.skipped}
    assert why == {2: "engine is not a non-negative integer", 3: "not valid JSON",
                   4: "specobs_metadata is not 1 (an unknown metadata format)"}  # fmt: skip
    report = analyze(ingested)
    assert report.to_dict()["run_metadata"][0]["attention_backend"] == "ROCM_ATTN"
    assert report.summary.num_drafts == 5  # the metadata file adds no windows
    out = cli("report", str(folder), "--format", "markdown")
    assert out.returncode == 0, out.stderr
    assert "Engines (run metadata)" in out.stdout and "ROCM_ATTN" in out.stdout and "gfx942" in out.stdout
    assert "schedule 1–2: 3, 3–8: 1" in out.stdout and "VLLM_ROCM_USE_AITER=1" in out.stdout
    assert "skipped" in out.stdout.lower() or "Skipped" in out.stdout


def test_compare_names_a_different_attention_backend_before_anything_else(tmp_path):
    rows = [step(i, 4, 3, 3, 2) for i in range(40)]
    a = write(tmp_path / "a", rows, [metadata()])
    b = write(
        tmp_path / "b", rows, [metadata(attention_backend="ROCM_AITER_FA", environment={"VLLM_ROCM_USE_AITER": "1"})]
    )
    out = cli("compare", str(a), str(b), "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    setup = {d["field"]: (d["a"], d["b"]) for d in data["configuration"]["environment"]}
    assert setup == {"attention_backend": (["ROCM_ATTN"], ["ROCM_AITER_FA"]), "VLLM_ROCM_USE_AITER": (["unset"], ["1"])}
    assert data["verdict"].startswith("Attention backend differs: ROCM_ATTN vs ROCM_AITER_FA; VLLM_ROCM_USE_AITER ")
    assert data["configuration"]["changed"] and data["kind"] != "regression"
    same = cli("compare", str(a), str(a), "--format", "json")
    assert json.loads(same.stdout)["configuration"]["environment"] == []  # no difference invented


def test_without_metadata_the_row_labels_still_tell_the_setups_apart(tmp_path):
    a = write(tmp_path / "a", [step(i, 4, 3, 3, 2, graph_mode="eager") for i in range(20)])
    b = write(tmp_path / "b", [step(i, 4, 3, 3, 2, graph_mode="full_and_piecewise") for i in range(20)])
    data = json.loads(cli("compare", str(a), str(b), "--format", "json").stdout)
    assert [(d["field"], d["a"], d["b"]) for d in data["configuration"]["environment"]] == [
        ("graph_mode", ["eager"], ["full_and_piecewise"])
    ]
    assert data["verdict"].startswith("Graph mode differs: eager vs full_and_piecewise")


def test_an_ignored_schedule_is_found_and_an_obeyed_one_is_not(tmp_path):
    schedule = [[1, 2, 3], [3, 8, 1]]  # k=1 from batch 3 up
    ignored = [step(i, 1 + i % 8, 3 if i % 8 < 2 else 1, 3, 1) for i in range(80)]  # always drafts 3
    obeyed = [step(i, 1 + i % 8, 3 if i % 8 < 2 else 1, 3 if i % 8 < 2 else 1, 1) for i in range(80)]
    found = integrity(
        load([str(write(tmp_path / "x", ignored, [metadata(schedule=schedule)]))]).windows,
        [RunMetadata(**{k: v for k, v in metadata(schedule=schedule).items() if k != METADATA_KEY})],
    )
    (issue,) = [i for i in found if i.kind == "schedule_ignored"]
    # steps at batch 3..8 (k allowed 1): 60 of the 80, every one drafting 3 tokens
    assert (issue.affected, issue.checked, issue.observed, issue.corrected, issue.max_k) == (60, 60, 3.0, 1.0, 3)
    meta = [RunMetadata(**{k: v for k, v in metadata(schedule=schedule).items() if k != METADATA_KEY})]
    clean = integrity(load([str(write(tmp_path / "y", obeyed))]).windows, meta)
    assert [i.kind for i in clean if i.kind == "schedule_ignored"] == []
    text = " ".join(
        document(analyze(load([str(write(tmp_path / "z", ignored, [metadata(schedule=schedule)]))])))["findings"]
    )
    assert "schedule is being ignored" in text and "60 of 60 steps" in text


def test_accepted_tokens_past_the_end_synthetic_sampling_and_short_drafts_are_findings(tmp_path):
    rows = [step(i, 2, 4, 2, 1, num_accepted_tokens_past_end=1 if i % 5 == 0 else 0) for i in range(50)]
    folder = write(tmp_path / "r", rows, [metadata(rejection_sample_method="synthetic")])
    report = analyze(load([str(folder)]))
    kinds = {i.kind: i for i in report.integrity}
    past = kinds["accepted_past_end"]
    # 50 steps × 2 requests × 1 accepted = 100 accepted of 200 drafted; 10 of them past the end
    assert (past.affected, past.checked, past.observed, past.corrected) == (10, 100, 0.5, pytest.approx(0.45))
    short = kinds["short_drafts"]  # 2 tokens drafted where k=4 allowed 4
    assert (short.affected, short.checked, short.observed) == (200, 400, 0.5)
    assert "synthetic_rejection" in kinds
    findings = document(report)["findings"]
    # Integrity comes first: the known pitfall of the helper's metadata (EAGLE-3 on ROCM_ATTN on
    # gfx942), synthetic sampling, the tokens past the end.
    first = findings[:3]
    assert any(f.startswith("Rejection sampling is synthetic") for f in first)
    assert any(f.startswith("Known pitfall") and "issues/46596" in f for f in first)
    assert any("50.0% as counted, 45.0% without them" in f for f in findings)


DP_LOG = """\
(APIServer pid=7) INFO 11-30 04:48:47 [api_utils.py:286] non-default args: {'model': 'm', 'data_parallel_size': 2, \
'speculative_config': {'method': 'eagle3', 'model': 'd', 'num_speculative_tokens': 3, \
'num_speculative_tokens_per_batch_size': [[1, 4, 3], [5, 64, 1]]}}
(EngineCore_DP0 pid=9) INFO 11-30 04:49:01 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: \
model='m', speculative_config=SpeculativeConfig(method='eagle3', model='d', num_spec_tokens=3), dtype=torch.bfloat16, \
tensor_parallel_size=4, pipeline_parallel_size=1, data_parallel_size=2, enforce_eager=False, kv_cache_dtype=fp8, \
device_config=cuda, served_model_name=m, compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, \
'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}
(APIServer pid=7) INFO 11-30 04:53:28 [loggers.py:335] Engine 000: Avg prompt throughput: 34.2 tokens/s, Running: 1 reqs
(APIServer pid=7) INFO 11-30 04:53:28 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.65, \
Accepted: 124 tokens, Drafted: 225 tokens, Per-position acceptance rate: 0.813, 0.467, 0.373
"""


def test_log_start_up_lines_give_run_metadata_and_a_schedule_vllm_dropped(tmp_path):
    (bundled,) = load([str(ROOT / "examples/data/vllm-cpu-ngram-k3.log")]).metadata
    assert (bundled.vllm_version, bundled.method, bundled.num_speculative_tokens) == ("0.32.0", "ngram", 3)
    assert (bundled.dtype, bundled.graph_mode, bundled.data_parallel_size, bundled.platform) == (
        "float32",
        "eager",
        1,
        "cpu",
    )
    log = tmp_path / "server.log"
    log.write_text(DP_LOG)
    ingested = load([str(log)])
    (m,) = ingested.metadata
    assert m.schedule_configured == ((1, 4, 3), (5, 64, 1)) and m.schedule is None  # vLLM drops it with DP > 1
    assert (m.dtype, m.kv_cache_dtype, m.tensor_parallel_size, m.graph_mode) == (
        "bfloat16",
        "fp8",
        4,
        "full_and_piecewise",
    )
    report = analyze(ingested)
    (issue,) = [i for i in report.integrity if i.kind == "schedule_disabled"]
    assert (issue.affected, issue.max_k, issue.method) == (2, 3, "eagle3")
    assert document(report)["findings"][0].startswith("The batch-size schedule was configured")


def test_gpu_steps_timed_on_the_host_clock_are_named(tmp_path):
    rows = [step(i, 2, 3, 3, 2, timing_clock="device" if i % 4 else "host") for i in range(40)]
    report = analyze(load([str(write(tmp_path / "r", rows))]))
    (issue,) = [i for i in report.integrity if i.kind == "host_timed"]
    assert (issue.affected, issue.checked) == (10, 40)
    cpu = [step(i, 2, 3, 3, 2, platform="cpu", timing_clock="host") for i in range(40)]
    assert not [i for i in analyze(load([str(write(tmp_path / "c", cpu))])).integrity if i.kind == "host_timed"]


def test_metadata_rows_go_to_their_own_files_and_no_exporter_counts_them_as_steps(tmp_path):
    from prometheus_client import CollectorRegistry

    from specobs.capture.sinks import JsonlSink, MemorySink, ParquetSink
    from specobs.exporters.prometheus import PrometheusMetrics, PrometheusSink

    rows = [step(0, 2, 3, 3, 1), metadata(), step(1, 2, 3, 3, 2)]
    for sink in (JsonlSink(tmp_path / "j", "r"), ParquetSink(tmp_path / "p", "r")):
        sink.write(rows)
        sink.close()
    for folder in ("j", "p"):
        names = sorted(p.name for p in (tmp_path / folder).iterdir())
        assert sum("-meta-" in n for n in names) == 1, names
        ingested = load([str(tmp_path / folder)])
        assert ingested.windows.collect().height == 2 and len(ingested.metadata) == 1
    memory = MemorySink()
    memory.write(rows)
    assert (len(memory.rows), len(memory.metadata)) == (2, 1)
    metrics = PrometheusMetrics(CollectorRegistry())
    PrometheusSink(metrics).write(rows)
    drafts = metrics.registry.get_sample_value(
        "specobs_drafts_total", {"model_name": "m", "engine": "0", "method": "eagle3"}
    )
    steps = metrics.registry.get_sample_value(
        "specobs_steps_total", {"model_name": "m", "engine": "0", "method": "eagle3"}
    )
    assert (drafts, steps) == (4, 2)  # two steps of 2 drafts; the metadata record is no step


def test_a_release_without_a_hook_point_says_which_numbers_are_absent(tmp_path):
    from specobs.vllm.hookpoints import HOOK_POINTS, lost

    (propose,) = [p for p in HOOK_POINTS if p.method == "propose_draft_token_ids"]
    gone = lost([propose.where, "vllm.v1.core.sched.scheduler.Scheduler.schedule (signature changed)"])
    assert gone == ["draft_seconds", "step_seconds (no step start)"]
    meta = metadata(vllm_version="0.35.0", missing_hooks=gone, pipeline_parallel_size=2, timing_source="worker")
    bad = {**meta, "missing_hooks": "draft_seconds"}  # not a list: the record is skipped, named
    folder = write(tmp_path / "r", [step(i, 2, 3, 3, 2) for i in range(20)], [meta, bad])
    ingested = load([str(folder)])
    (m,) = ingested.metadata
    assert (m.missing_hooks, m.pipeline_parallel_size, m.timing_source) == (tuple(gone), 2, "worker")
    assert [s.why for s in ingested.skipped] == ["missing_hooks is not a list of strings"]
    report = analyze(ingested)
    (issue,) = [i for i in report.integrity if i.kind == "missing_hooks"]
    assert (issue.affected, issue.lost, issue.vllm_version) == (2, tuple(gone), "0.35.0")
    text = " ".join(document(report)["findings"])
    assert "vLLM 0.35.0 lacks 2 hook point(s)" in text and "draft_seconds; step_seconds (no step start)" in text
    # Nothing missing (every capture of a complete release): no finding.
    clean = write(tmp_path / "c", [step(i, 2, 3, 3, 2) for i in range(20)], [metadata(missing_hooks=[])])
    assert not [i for i in analyze(load([str(clean)])).integrity if i.kind == "missing_hooks"]
