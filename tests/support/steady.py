"""Steady-state step rows and decode throughput by batch size, written out by hand from the
documented rule (specobs/analysis/cost.py ``steady_state``), so tests can check specobs's
measured speedups against a computation of their own."""

from __future__ import annotations

import polars as pl

from specobs.analysis.cost import COARSE_OUTLIER_FACTOR, MIN_STEPS_TO_JUDGE, OUTLIER_FACTOR


def settled(rows: pl.DataFrame) -> pl.DataFrame:
    """One engine's step rows without unsettled steps, by the documented rule, by hand.

    A step is unsettled when it took over OUTLIER_FACTOR × the median step of its configuration
    (k, batch size, tokens scheduled); in a configuration of fewer than MIN_STEPS_TO_JUDGE
    steps, when it took over COARSE_OUTLIER_FACTOR × the median time per scheduled token of the
    engine's steps at its k (decode and prompt apart) and over OUTLIER_FACTOR × their median
    step. The start-up steps are far over it; so are the pauses of a busy 2-core machine (one
    step of 27 ms among steps of 1.7 ms at batch 4 adds 6% to that batch size's time), which
    a coarser reference (20× the engine's median) kept: it measured the machine's noise.
    """
    step = pl.col("step_seconds")
    decode = pl.col("num_scheduled_tokens") <= pl.col("batch_size") + pl.col("num_draft_tokens").fill_null(0)
    per_token = step / pl.col("num_scheduled_tokens").clip(lower_bound=1)
    config = ["num_spec_tokens", "batch_size", "num_scheduled_tokens"]
    coarse = [pl.col("num_spec_tokens"), decode]
    fine_slow = step > OUTLIER_FACTOR * step.median().over(config)
    coarse_slow = (
        (pl.len().over(coarse) >= MIN_STEPS_TO_JUDGE)
        & (per_token > COARSE_OUTLIER_FACTOR * per_token.median().over(coarse))
        & (step > OUTLIER_FACTOR * step.median().over(coarse))
    )
    unsettled = pl.when(pl.len().over(config) >= MIN_STEPS_TO_JUDGE).then(fine_slow).otherwise(coarse_slow)
    return rows.filter(step.is_not_null()).filter(~unsettled)


def tokens_per_second(rows: pl.DataFrame) -> dict[int, float]:
    """Decode tokens/s of step time per batch size (by hand), at batch sizes 1 and 4."""
    decode = rows.filter(
        (pl.col("num_scheduled_tokens") <= pl.col("batch_size") + pl.col("num_draft_tokens"))
        & pl.col("batch_size").is_in([1, 4])
    )
    sums = decode.group_by("batch_size").agg(pl.col("num_generated_tokens").sum(), pl.col("step_seconds").sum())
    return {r["batch_size"]: r["num_generated_tokens"] / r["step_seconds"] for r in sums.iter_rows(named=True)}


def measured_speedup(spec: pl.DataFrame, plain: pl.DataFrame, batch_size: int) -> float:
    """The speedup of ``spec``'s step rows over ``plain``'s at one batch size, by hand."""
    return tokens_per_second(settled(spec))[batch_size] / tokens_per_second(settled(plain))[batch_size]


__all__ = ["measured_speedup", "settled", "tokens_per_second"]
