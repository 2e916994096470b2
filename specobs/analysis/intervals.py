"""Confidence intervals (95% by default): the one home of the interval estimators.

Wilson (proportions), Student's t quantiles, the t interval of a mean (:func:`mean_interval`),
the sample variance (of the values, or of running sums: :func:`variance_from_sums`), the ratio
estimator's residual and variance from sums (:func:`ratio_residual`, :func:`ratio_variance`),
Welch–Satterthwaite degrees of freedom (:func:`welch_df`, and :func:`welch_term` /
:func:`satterthwaite` for sums kept as polars expressions), the ratio of geometric means
(:func:`geometric_ratio`) and the jackknife (:func:`jackknife_half_width`). Elsewhere these are
called, never written out again (``tests/project/test_formula_homes.py``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING, TypeVar

import polars as pl

if TYPE_CHECKING:
    import numpy as np

Z95 = 1.959963984540054

T = TypeVar("T", float, pl.Expr)
#: A number or (for the vectorised change search's prefix sums) a numpy array.
A = TypeVar("A", float, "np.ndarray")


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


def _cornish_fisher(z: float, nu: int) -> float:
    """Student's t quantile from the normal one ``z``: the Cornish–Fisher expansion in 1/nu."""
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return float(z + sum(term / nu ** (i + 1) for i, term in enumerate(terms)))


def t95(df: float) -> float:
    """Student's t 97.5% quantile (the two-sided 95% interval's); df rounded down (conservative),
    Cornish–Fisher from df = 4 (within 0.001 of the exact value), exact values below."""
    exact = {1: 12.706204736, 2: 4.302652730, 3: 3.182446305}
    if not math.isfinite(df):
        return Z95
    nu = max(1, math.floor(df))
    if nu in exact:
        return exact[nu]
    return _cornish_fisher(Z95, nu)


def t_quantile(df: float, level: float = 0.95) -> float:
    """Student's t quantile of a two-sided ``level`` interval (``t95`` at 0.95): exact for 1 and 2
    degrees of freedom, Cornish–Fisher above (within 1.5% from df = 4 at levels up to 99.9%; 4% low
    at df = 3 and 99.9%)."""
    if level == 0.95:
        return t95(df)
    p = 1 - (1 - level) / 2
    z = NormalDist().inv_cdf(p)
    if not math.isfinite(df):
        return z
    nu = max(1, math.floor(df))
    if nu == 1:
        return math.tan(math.pi * (p - 0.5))
    if nu == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    return _cornish_fisher(z, nu)


def sample_variance(values: Sequence[float], mean: float | None = None) -> float:
    """The sample variance ``Σ (x − mean)² / (n − 1)`` (``mean`` computed when not given; NaN
    with fewer than two values)."""
    n = len(values)
    if n < 2:
        return math.nan
    if mean is None:
        mean = math.fsum(values) / n
    return math.fsum((x - mean) ** 2 for x in values) / (n - 1)


def variance_from_sums(n: float, total: float, sum_sq: float) -> float:
    """The sample variance from a count, a sum and a sum of squares (running totals kept instead
    of the values): ``(Σx² − n·x̄²) / (n − 1)``, clipped at 0 (the subtraction can round below
    it); NaN with fewer than two values.

    >>> variance_from_sums(3, 6.0, 14.0)
    1.0
    """
    if n < 2:
        return math.nan
    mean = total / n
    return max((sum_sq - n * mean * mean) / (n - 1), 0.0)


def ratio_residual(sum_aa: A, sum_ad: A, sum_dd: A, ratio: A) -> A:
    """The ratio estimator's residual sum of squares ``Σ (a − r·d)²`` from sums kept per window:
    ``Σa² − 2·r·Σad + r²·Σd²`` (numbers, or numpy arrays of prefix sums)."""
    residual: A = sum_aa - 2 * ratio * sum_ad + ratio * ratio * sum_dd
    return residual


def ratio_variance(residual: T, n: T, mean_denominator: T) -> T:
    """Variance of a ratio estimator ``Σa / Σd`` over ``n`` windows from its residual sum of
    squares ``Σ (a − r·d)²`` (:func:`ratio_residual`): ``residual / (n (n − 1) d̄²)``."""
    return residual / (n * (n - 1) * mean_denominator * mean_denominator)


def mean_and_standard_error(values: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error of the mean ``sd / √n``); NaN for what fewer values cannot give."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = math.fsum(values) / n
    return mean, math.sqrt(sample_variance(values, mean)) / math.sqrt(n) if n > 1 else math.nan


def welch_term(variance: T, df: T) -> T:
    """One part's term of the Welch–Satterthwaite denominator: ``variance² / df``."""
    return variance * variance / df


def satterthwaite(variance: T, terms: T) -> T:
    """Welch–Satterthwaite degrees of freedom of a sum of variances ``variance`` whose
    :func:`welch_term` sum to ``terms``: ``(Σ v)² / Σ (v² / df)``."""
    return variance * variance / terms


def welch_df(parts: Iterable[tuple[float, float]]) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum of independent variances, from
    ``(variance, degrees of freedom)`` per part: ``(Σ v)² / Σ (v² / df)`` (a part of zero
    variance adds nothing; infinite when the sum is zero).

    >>> round(welch_df([(1.0, 9), (1.0, 9)]), 6)
    18.0
    """
    parts = list(parts)
    total = sum(v for v, _ in parts)
    if not total:
        return math.inf
    return satterthwaite(total, sum(welch_term(v, df) if v else 0.0 for v, df in parts))


def jackknife_half_width(leave_one_out: Sequence[float], level: float = 0.95) -> float:
    """Half width of the jackknife interval from the ``n`` leave-one-out estimates:
    ``t(n − 1) · √((n − 1)/n · Σ (θ₋ᵢ − θ̄)²)``."""
    n = len(leave_one_out)
    mean = math.fsum(leave_one_out) / n
    return t_quantile(n - 1, level) * math.sqrt((n - 1) / n * math.fsum((x - mean) ** 2 for x in leave_one_out))


def log_stats(values: Sequence[float]) -> tuple[float, float, int]:
    """Mean and sample variance of the logs of the positive ``values``, and how many there are
    (NaN variance with fewer than two)."""
    logs = [math.log(v) for v in values if v > 0]
    n = len(logs)
    mean = math.fsum(logs) / n if n else math.nan
    return mean, sample_variance(logs, mean), n


def geometric_ratio(
    b: Sequence[float], a: Sequence[float], *, conservative: bool = False
) -> tuple[float | None, float | None, float | None]:
    """(ratio, low, high): B/A of geometric means with Welch's 95% interval on the logs;
    Welch–Satterthwaite degrees of freedom, or the smaller side's n − 1 when ``conservative``.
    No interval with fewer than two values a side; no ratio without values."""
    mb, vb, nb = log_stats(b)
    ma, va, na = log_stats(a)
    if not nb or not na:
        return None, None, None
    diff = mb - ma
    if nb < 2 or na < 2:
        return math.exp(diff), None, None
    sb, sa = vb / nb, va / na
    se = math.sqrt(sb + sa)
    if conservative:
        df: float = min(nb, na) - 1
    else:
        df = welch_df([(sb, nb - 1), (sa, na - 1)])
    half = t95(df) * se
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the t interval of a mean from a few repeated measurements (rounds);
    one value gives (v, -inf, inf), none gives NaNs."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = math.fsum(values) / n
    if n == 1:
        return mean, -math.inf, math.inf
    half = t95(n - 1) * math.sqrt(sample_variance(values, mean)) / math.sqrt(n)
    return mean, mean - half, mean + half
