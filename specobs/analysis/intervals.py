"""Confidence intervals as polars expressions (95% by default)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

Z95 = 1.959963984540054


def wilson(successes: pl.Expr, trials: pl.Expr, z: float = Z95) -> tuple[pl.Expr, pl.Expr]:
    """Wilson score interval for a proportion; null when there are no trials.

    Unlike the normal approximation it stays inside [0, 1] and behaves at p = 0 or 1,
    which per-position acceptance rates often are for the last positions.
    """
    n = trials.cast(pl.Float64)
    p = successes.cast(pl.Float64) / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)).sqrt()) / denom
    valid = n > 0
    return (
        pl.when(valid).then((centre - half).clip(0.0, 1.0)),
        pl.when(valid).then((centre + half).clip(0.0, 1.0)),
    )


def wilson_bounds(successes: float, trials: float, z: float = Z95) -> tuple[float, float]:
    """:func:`wilson` for one proportion, as plain floats ((0, 1) when there are no trials)."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(max(p * (1 - p) / trials + z * z / (4 * trials * trials), 0.0)) / denom
    return max(centre - half, 0.0), min(centre + half, 1.0)


#: Student's t, two-sided 95%, for 1-30 degrees of freedom (beyond: the Cornish-Fisher expansion).
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom (inf below 1)."""
    if df < 1:
        return math.inf
    if df <= len(_T95):
        return _T95[df - 1]
    return Z95 + (Z95**3 + Z95) / (4 * df)


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the t interval of a mean from a few repeated measurements (rounds);
    one value gives (v, -inf, inf), none gives NaNs."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = math.fsum(values) / n
    if n == 1:
        return mean, -math.inf, math.inf
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t95(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half
