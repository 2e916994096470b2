"""Confidence intervals as polars expressions (95% by default)."""

from __future__ import annotations

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
