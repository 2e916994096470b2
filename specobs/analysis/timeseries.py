"""Acceptance over time and detection of step changes (regressions).

Method (binary segmentation on a drafts-weighted ratio):
for a series of windows with accepted ``a_j`` and drafts ``d_j``, every split point t with at
least ``min_size`` windows on each side is scored by the two-sample z statistic of the
acceptance length before and after it,

    z = (L_after − L_before) / sqrt(se_before² + se_after²),

where each side's standard error is the ratio-estimator one over its windows. The best split
is kept when |z| ≥ ``z_threshold`` and the relative change is at least ``min_change``; both
halves are then searched again. Simple, explainable, and quiet on stationary noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

#: Above this many windows, the series is bucketed in time to at most this many points.
MAX_POINTS = 2000


def acceptance_over_time(
    windows: pl.LazyFrame | pl.DataFrame, keys: Sequence[str] = (), max_points: int = MAX_POINTS
) -> pl.DataFrame:
    """Acceptance length per window with known counts, in time order, per group.

    Step-level inputs (millions of rows) are summed into equal time buckets first, at most
    ``max_points`` over the whole span, so change detection sees intervals, not steps (a chart
    asks for fewer, wider buckets).
    Columns: ``keys``, ``end_ts``, ``num_drafts``, ``num_accepted_tokens``, ``mean_acceptance_length``.
    """
    known = (
        windows.lazy()
        .filter(
            pl.col("num_drafts").is_not_null()
            & (pl.col("num_drafts") > 0)
            & pl.col("num_accepted_tokens").is_not_null()
        )
        .select(*keys, "end_ts", "source_line", "num_drafts", "num_accepted_tokens")
    )
    size = known.select(n=pl.len(), lo=pl.col("end_ts").min(), hi=pl.col("end_ts").max()).collect().row(0, named=True)
    if size["n"] > max_points and size["lo"] is not None and size["hi"] > size["lo"]:
        width = (size["hi"] - size["lo"]) / max_points
        known = (
            known.group_by([*keys, ((pl.col("end_ts") - size["lo"]) // width).alias("_bucket")])
            .agg(
                pl.col("end_ts").max(),
                pl.col("source_line").min(),
                pl.col("num_drafts").sum(),
                pl.col("num_accepted_tokens").sum(),
            )
            .drop("_bucket")
        )
    return (
        known.with_columns(mean_acceptance_length=1 + pl.col("num_accepted_tokens") / pl.col("num_drafts"))
        .sort([*keys, "end_ts", "source_line"], nulls_last=True)
        .collect()
    )


@dataclass(frozen=True)
class ChangePoint:
    """A step change in acceptance length between two stretches of windows."""

    index: int  # first window (0-based, in series order) after the change
    ts: float | None
    before: float
    after: float
    z: float

    @property
    def kind(self) -> str:
        return "regression" if self.after < self.before else "improvement"


def _split_scores(accepted: pl.Series, drafts: pl.Series, min_size: int) -> pl.DataFrame:
    """z statistic and both sides' lengths for every split, from prefix sums (O(n))."""
    frame = pl.DataFrame({"a": accepted, "d": drafts}).with_columns(
        ad=pl.col("a") * pl.col("d"), aa=pl.col("a") ** 2, dd=pl.col("d") ** 2
    )
    n = frame.height
    sums = frame.select([pl.col(c).cum_sum().alias(c) for c in ("a", "d", "ad", "aa", "dd")])
    totals = frame.sum()

    def side(prefix: dict[str, pl.Expr], count: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
        ratio = prefix["a"] / prefix["d"]
        resid = prefix["aa"] - 2 * ratio * prefix["ad"] + ratio * ratio * prefix["dd"]
        mean_d = prefix["d"] / count
        var = (resid.clip(lower_bound=0) / (count * (count - 1) * mean_d * mean_d)).clip(lower_bound=1e-12)
        return 1 + ratio, var

    # Row t holds the split "windows [0, t] | [t+1, n)"; the change index is t + 1.
    before = {c: pl.col(c) for c in ("a", "d", "ad", "aa", "dd")}
    after = {c: pl.lit(totals[c][0]) - pl.col(c) for c in ("a", "d", "ad", "aa", "dd")}
    count_before = pl.int_range(1, n + 1, dtype=pl.Int64).cast(pl.Float64)
    count_after = pl.lit(float(n)) - count_before
    len_b, var_b = side(before, count_before)
    len_a, var_a = side(after, count_after)
    return (
        sums.select(
            index=pl.int_range(1, n + 1, dtype=pl.Int64),
            before=len_b,
            after=len_a,
            z=(len_a - len_b) / (var_b + var_a).sqrt(),
        )
        .filter((pl.col("index") >= min_size) & (pl.col("index") <= n - min_size))
        .filter(pl.col("z").is_finite())
    )


def change_points(
    series: pl.DataFrame,
    *,
    min_size: int = 5,
    z_threshold: float = 4.0,
    min_change: float = 0.05,
) -> list[ChangePoint]:
    """Step changes in ``series`` (a frame from :func:`acceptance_over_time`, one group)."""
    accepted = series["num_accepted_tokens"].cast(pl.Float64)
    drafts = series["num_drafts"].cast(pl.Float64)
    times = series["end_ts"].to_list()
    found: list[ChangePoint] = []

    def search(lo: int, hi: int) -> None:
        if hi - lo < 2 * min_size:
            return
        scores = _split_scores(accepted[lo:hi], drafts[lo:hi], min_size)
        if scores.is_empty():
            return
        best = scores.row(int(scores["z"].abs().arg_max()), named=True)
        if abs(best["z"]) < z_threshold or abs(best["after"] - best["before"]) < min_change * best["before"]:
            return
        index = lo + best["index"]
        found.append(ChangePoint(index, times[index], best["before"], best["after"], best["z"]))
        search(lo, index)
        search(index, hi)

    search(0, len(drafts))
    return sorted(found, key=lambda c: c.index)
