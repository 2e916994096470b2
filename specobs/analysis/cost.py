"""Where step time goes: draft, verify and whole-step time per group and batch-size bucket.

Inputs are windows whose timing columns are sums over ``num_timed_steps`` steps (capture
rows are one step each; V0 stage-time lines are one step each). Means are sums over sums:
a bucket with many steps weighs more, as it should.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from specobs.analysis.acceptance import with_group_columns


def timing_by_batch(windows: pl.LazyFrame | pl.DataFrame, keys: Sequence[str] = ()) -> pl.DataFrame:
    """Per group and batch bucket: timed steps, mean draft/verify/step/other seconds, draft share of
    step time, cost ratio, rejected-draft share, and generated tokens per second of step time
    (null where not measured).

    ``cost_ratio`` is draft seconds per drafted token over verify seconds per step (the same
    definition as the exporter's ``specobs_cost_ratio`` gauge and the recording rule).
    ``rejected_draft_share`` is the share of step time spent drafting tokens the target then
    rejected: draft time × (1 − accepted / drafted tokens) over step time, i.e. draft time is
    attributed to tokens evenly — exact for autoregressive drafters, an upper bound for
    parallel ones whose later positions cost nothing extra.
    """
    keys = [k for k in keys if k != "batch_bucket"]
    lazy = with_group_columns(windows.lazy()).filter(pl.col("num_timed_steps").fill_null(0) > 0)
    steps = pl.col("num_timed_steps")
    both = pl.col("num_generated_tokens").is_not_null() & pl.col("step_seconds").is_not_null()
    out = (
        lazy.group_by([*keys, "batch_bucket"])
        .agg(
            timed_steps=steps.sum(),
            batch_min=pl.col("batch_size").min(),
            draft_steps=pl.when(pl.col("draft_seconds").is_not_null()).then(steps).sum(),
            draft_total=pl.col("draft_seconds").sum(),
            verify_steps=pl.when(pl.col("verify_seconds").is_not_null()).then(steps).sum(),
            verify_total=pl.col("verify_seconds").sum(),
            step_steps=pl.when(pl.col("step_seconds").is_not_null()).then(steps).sum(),
            step_total=pl.col("step_seconds").sum(),
            generated=pl.when(both).then(pl.col("num_generated_tokens")).sum(),
            generated_time=pl.when(both).then(pl.col("step_seconds")).sum(),
            drafts=pl.col("num_drafts").sum(),
            # Draft tokens and acceptance only where the draft time is known, so the ratios match.
            timed_draft_tokens=pl.when(pl.col("draft_seconds").is_not_null()).then(pl.col("num_draft_tokens")).sum(),
            timed_accepted=pl.when(pl.col("draft_seconds").is_not_null()).then(pl.col("num_accepted_tokens")).sum(),
        )
        .with_columns(
            mean_draft_seconds=pl.when(pl.col("draft_steps") > 0).then(pl.col("draft_total") / pl.col("draft_steps")),
            mean_verify_seconds=pl.when(pl.col("verify_steps") > 0).then(
                pl.col("verify_total") / pl.col("verify_steps")
            ),
            mean_step_seconds=pl.when(pl.col("step_steps") > 0).then(pl.col("step_total") / pl.col("step_steps")),
            generated_tokens_per_second=pl.when(pl.col("generated_time") > 0).then(
                pl.col("generated") / pl.col("generated_time")
            ),
        )
        .with_columns(
            # What is neither drafting nor verifying: scheduling, sampling, bookkeeping.
            mean_other_seconds=(
                pl.col("mean_step_seconds") - pl.col("mean_draft_seconds").fill_null(0) - pl.col("mean_verify_seconds")
            ).clip(lower_bound=0),
            draft_share=pl.when(pl.col("mean_step_seconds") > 0).then(
                pl.col("mean_draft_seconds").fill_null(0) / pl.col("mean_step_seconds")
            ),
            cost_ratio=pl.when((pl.col("timed_draft_tokens") > 0) & (pl.col("verify_total") > 0)).then(
                (pl.col("draft_total") / pl.col("timed_draft_tokens")) / pl.col("mean_verify_seconds")
            ),
            rejected_draft_share=pl.when((pl.col("timed_draft_tokens") > 0) & (pl.col("step_total") > 0)).then(
                pl.col("draft_total")
                * (1 - pl.col("timed_accepted") / pl.col("timed_draft_tokens"))
                / pl.col("step_total")
            ),
        )
        .sort([*keys, "batch_min"], nulls_last=True)
        .select(
            *keys,
            "batch_bucket",
            "timed_steps",
            "mean_draft_seconds",
            "mean_verify_seconds",
            "mean_step_seconds",
            "mean_other_seconds",
            "draft_share",
            "cost_ratio",
            "rejected_draft_share",
            "generated_tokens_per_second",
        )
        .collect()
    )
    return out
