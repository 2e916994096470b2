"""Configurations compared where noise cancels: blocks of steps inside one generation, paired.

**Which steps count.** vLLM reads the batch-size → k table when it schedules a step, and drafts
at the end of the step for the next one: the tokens a step generates come from the drafts of the
step before. A step counts for k only when it and the ``lag`` steps before it were scheduled at
k (``lag`` 1; 2 under async scheduling, where the scheduler runs one step ahead). The steps right
after a switch mix two ks and count for neither (:class:`StepAttribution`).

**Pairing.** A *unit* runs every candidate once, a block of steps each, in a random order: a
cycle of a few hundred milliseconds inside one engine, or a round of each engine in turn when
the candidates live in two processes. Two candidates are compared over the units both ran: the
ratio of their tokens per second (generated tokens over the wall time of their counted steps,
start to start, so scheduling and Python count as a user feels them; each unit weighed by the
tokens generated in it), with a jackknife interval over units and Student's t (n − 1 df).
Drift of the machine slower than a unit hits both alike.

The offline race (``specobs tune``) and the online tuner (``SPECOBS_ONLINE_TUNER``) both decide on
:func:`ratio`; the race looks at it several times, so each look is taken at
:data:`LOOK_LEVEL`, which keeps the chance of any wrong elimination over all looks at 5%
(Bonferroni over :data:`LOOKS`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from specobs.analysis.intervals import jackknife_half_width, sample_variance, t_quantile

#: Rounds after which the race looks at its comparisons (from its minimum on).
LOOKS = (3, 4, 5, 6, 8, 10, 12, 15, 18, 22, 27, 33, 40, 50, 60, 75, 90, 110, 135, 165, 200)
#: The level of each look: 95% over every look together.
LOOK_LEVEL = 1 - 0.05 / len(LOOKS)
#: Two candidates whose ratio is established within this share of 1 are tied.
TIE = 0.02


@dataclass(frozen=True)
class Block:
    """One candidate's counted steps in one unit (a cycle of blocks, or a round of engines)."""

    unit: int
    candidate: int
    tokens: float
    seconds: float
    steps: int


class StepAttribution:
    """Whether a step counts for the k it was scheduled at (see the module docstring)."""

    def __init__(self, lag: int = 1) -> None:
        self.lag = lag
        self._recent: deque[Hashable] = deque(maxlen=lag + 1)

    def add(self, key: Hashable) -> bool:
        """Record a step scheduled under ``key``: True when it counts for ``key``."""
        self._recent.append(key)
        return len(self._recent) == self.lag + 1 and all(k == key for k in self._recent)

    def reset(self) -> None:
        """A new generation: its first steps (prefill) count for nothing."""
        self._recent.clear()


@dataclass(frozen=True)
class Ratio:
    """a / b in tokens per second over the units both ran, with its interval."""

    estimate: float
    low: float
    high: float
    units: int
    level: float

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to the estimate (inf when not known)."""
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.estimate <= 0:
            return math.inf
        return (self.high - self.low) / (2 * self.estimate)

    def widened(self, log_systematic: float) -> Ratio:
        """The interval with a systematic error (on the log scale) added in quadrature to its
        half-width: the bias between two engine processes, which pairing cannot remove."""
        if log_systematic == 0 or not (self.low > 0 and math.isfinite(self.high)):
            return self
        centre = math.log(self.estimate)
        half = math.hypot(max(centre - math.log(self.low), math.log(self.high) - centre), log_systematic)
        return Ratio(self.estimate, _exp(centre - half), _exp(centre + half), self.units, self.level)


def systematic(bias: Ratio) -> float:
    """How far two engine processes may differ beyond what pairing removes, on the log scale:
    the measured bias less its own measurement noise (method of moments), so a bias that is
    noise alone adds nothing and a real one adds its size."""
    if bias.estimate <= 0 or not math.isfinite(bias.estimate):
        return 0.0
    centre = math.log(bias.estimate)
    if bias.units < 2 or not (bias.low > 0 and math.isfinite(bias.high)):
        return abs(centre)
    se = (math.log(bias.high) - math.log(bias.low)) / (2 * t_quantile(bias.units - 1, bias.level))
    return math.sqrt(max(centre * centre - se * se, 0.0))


def _exp(x: float) -> float:
    return math.exp(x) if x < 700 else math.inf


def rate(blocks: Iterable[Block]) -> float:
    """Generated tokens per second over ``blocks`` (NaN without time)."""
    tokens = seconds = 0.0
    for b in blocks:
        tokens += b.tokens
        seconds += b.seconds
    return tokens / seconds if seconds > 0 else math.nan


def _per_unit(blocks: Iterable[Block]) -> dict[int, tuple[float, float]]:
    out: dict[int, tuple[float, float]] = {}
    for b in blocks:
        t, s = out.get(b.unit, (0.0, 0.0))
        out[b.unit] = (t + b.tokens, s + b.seconds)
    return out


def ratio(a: Sequence[Block], b: Sequence[Block], level: float = 0.95, *, by_unit: bool = False) -> Ratio:
    """``a`` over ``b`` in tokens per second over their common units, with a jackknife interval.

    Pooled: Σ t_a / Σ s_a over Σ t_b / Σ s_b, for units of the same work (one batch size, or
    whole generations). ``by_unit``: each unit's seconds per token, weighed by the tokens both
    generated in it, Σ w·(s_b/t_b) / Σ w·(s_a/t_a) with w = t_a + t_b — for blocks inside a
    generation whose batch shrinks (the mixed workload): within a unit both ran the same batch,
    so a k that generates more tokens per step gets no more weight at the batch sizes where
    everyone is fast."""
    ua, ub = _per_unit(a), _per_unit(b)
    units = [u for u in ua if u in ub and ua[u][1] > 0 and ub[u][1] > 0 and ua[u][0] > 0 and ub[u][0] > 0]
    n = len(units)
    if n == 0:
        return Ratio(math.nan, 0.0, math.inf, 0, level)
    if by_unit:  # weighted seconds per token of b (num) and of a (den)
        num = {u: (ua[u][0] + ub[u][0]) * ub[u][1] / ub[u][0] for u in units}
        den = {u: (ua[u][0] + ub[u][0]) * ua[u][1] / ua[u][0] for u in units}
    else:  # tokens per second pooled: (Σ t_a / Σ s_a) / (Σ t_b / Σ s_b) = (Σ t_a · Σ s_b) / (Σ s_a · Σ t_b)
        num, den = {}, {}
    sums = [math.fsum(side[u][i] for u in units) for side, i in ((ua, 0), (ua, 1), (ub, 0), (ub, 1))]
    total_num = math.fsum(num.values())
    total_den = math.fsum(den.values())

    def log_ratio(drop: int | None) -> float:
        """θ, or (``drop``) θ without that unit (sums of the others afresh when rounding would
        leave nothing)."""
        if by_unit:
            rest_num = total_num - (num[drop] if drop is not None else 0.0)
            rest_den = total_den - (den[drop] if drop is not None else 0.0)
            if rest_num <= 0 or rest_den <= 0:
                rest_num = math.fsum(v for x, v in num.items() if x != drop)
                rest_den = math.fsum(v for x, v in den.items() if x != drop)
            return math.log(rest_num / rest_den)
        rest = sums
        if drop is not None:
            rest = [sums[0] - ua[drop][0], sums[1] - ua[drop][1], sums[2] - ub[drop][0], sums[3] - ub[drop][1]]
            if min(rest) <= 0:
                others = [u for u in units if u != drop]
                rest = [math.fsum(side[u][i] for u in others) for side, i in ((ua, 0), (ua, 1), (ub, 0), (ub, 1))]
        return math.log(rest[0] / rest[1]) - math.log(rest[2] / rest[3])

    theta = log_ratio(None)
    if n < 2:
        return Ratio(math.exp(theta), 0.0, math.inf, n, level)

    def leave_out(u: int) -> float:
        return log_ratio(u)

    half = jackknife_half_width([leave_out(u) for u in units], level)
    return Ratio(math.exp(theta), _exp(theta - half), _exp(theta + half), n, level)


def rate_interval(blocks: Sequence[Block], level: float = 0.95) -> tuple[float, float, float]:
    """(tokens/s, low, high) of one candidate, with a jackknife interval over its units."""
    units = _per_unit(blocks)
    units = {u: ts for u, ts in units.items() if ts[1] > 0 and ts[0] > 0}
    n = len(units)
    if n == 0:
        return math.nan, math.nan, math.nan
    tokens = sum(t for t, _ in units.values())
    seconds = sum(s for _, s in units.values())
    estimate = tokens / seconds
    if n < 2:
        return estimate, 0.0, math.inf
    half = jackknife_half_width([math.log((tokens - t) / (seconds - s)) for t, s in units.values()], level)
    return estimate, estimate * _exp(-half), estimate * _exp(half)


def spread(blocks: Sequence[Block]) -> float:
    """Relative standard deviation of one candidate's tokens/s from unit to unit."""
    values = [t / s for t, s in _per_unit(blocks).values() if s > 0]
    if len(values) < 2:
        return math.nan
    mean = math.fsum(values) / len(values)
    return math.sqrt(sample_variance(values, mean)) / mean


__all__ = [
    "LOOKS",
    "LOOK_LEVEL",
    "TIE",
    "Block",
    "Ratio",
    "StepAttribution",
    "rate",
    "rate_interval",
    "ratio",
    "systematic",
]
