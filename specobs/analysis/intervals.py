"""Confidence intervals as polars expressions (95% by default)."""

from __future__ import annotations

import math

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
