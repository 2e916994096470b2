"""The closed loop behind ``specobs tune``: race every k in one engine, choose, apply, verify.

The engine side is a :class:`Bench` (``specobs.loops.vllm_bench`` runs real vLLM engines; tests
may pass any object with the same methods). This module only decides what to run and what the
numbers say (:mod:`specobs.advice.paired` says how two candidates are compared):

1. **Race.** At each batch size the candidates are the plain engine and the speculative engine
   at every k from 0 (drafting switched off by the schedule) to the largest. A round runs, at
   every undecided batch size in a shuffled order, one *stretch* of each engine: the
   speculative engine generates at that batch size while the k switches every few steps
   between the candidates still in the race, in cycles of a random order, so drift hits every
   k alike and ks are compared cycle by cycle; the plain engine generates the same work, first
   or second in alternate rounds, and is compared with each k round by round, its interval
   widened by the bias measured between the two engine processes. From ``min_rounds`` on, at
   each of :data:`~specobs.advice.paired.LOOKS`, a candidate is dropped when it is slower than
   the leader beyond noise (its ratio's interval, at the per-look level, lies below 1). A batch
   size is decided when every other candidate is dropped or tied with the leader (the interval
   within ±2%); racing stops when every batch size is decided, at ``max_rounds``, or when the
   next round would not fit the race's share of the budget. Undecided batch sizes take the
   measured leader, and say so.
2. **Choose.** Measured batch sizes get the speculative engine's fastest k there. Power-of-two
   buckets between measured batch sizes take the choice of their measured neighbours when both
   agree, else the model fitted on the captured steps of every measured k
   (:func:`specobs.advice.recommend.recommend`) picks between the neighbours' choices. When the
   plain engine is predicted at least as fast as the schedule on the verification workload, the
   answer is no speculative config at all.
3. **Verify.** On the mixed-batch workload (requests of staggered lengths, so the batch shrinks
   from the largest size to 1), in rounds of single generations in a random order: the plain
   engine's and the chosen configuration's whole generations (paired by round: short rounds,
   since drift between the engines' stretches is what limits that comparison), and one where
   the chosen schedule and the best static k switch block by block. Rounds repeat until both
   gains' 95% intervals are within :data:`HALF_WIDTH` (relative) or the budget ends.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from specobs import buckets
from specobs.advice.paired import (
    LOOK_LEVEL,
    LOOKS,
    TIE,
    Block,
    Ratio,
    rate,
    rate_interval,
    ratio,
    spread,
    systematic,
)
from specobs.advice.recommend import recommend
from specobs.analysis.intervals import Z95
from specobs.loops.parallel import ONE_DEVICE, Parallel
from specobs.records import RECOMMEND_DEFAULTS, TuneBucket, TuneMeasurement, TuneNoise, TuneResult, TuneVerification

PLAIN = "plain"
SPECULATIVE = "speculative"
#: A second plain engine process, run only to measure how far two processes doing the same work
#: differ (the bias pairing cannot remove from plain-vs-speculative comparisons).
SECOND_PLAIN = "plain-b"
CALIBRATION_ROUNDS = 3
#: Share of the budget the race may use; the rest is kept for the verification.
RACE_SHARE = 0.7
MIN_ROUNDS = 3
#: A cap that only stops a race whose candidates stay tied; the budget normally ends it first.
MAX_ROUNDS = 200
VERIFY_MIN_ROUNDS = 3
VERIFY_MAX_ROUNDS = 200
#: The verification runs until both gains' 95% intervals are this narrow (relative half-width).
HALF_WIDTH = 0.05
#: The schedule must beat plain decoding by this share (predicted) to be recommended at all.
MARGIN = RECOMMEND_DEFAULTS.margin
COMPARISON = "steps interleaved: k switched every few steps inside one generation, paired by cycle"
#: The basis of every bucket when the answer must be one k: vLLM drops a batch-size schedule at
#: data parallel > 1 (ranks could pick different k and deadlock), so the best static k is all a
#: data-parallel deployment can use.
STATIC_ONLY = "best static k"

Schedule = tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class Config:
    """One way to run the workload: the plain engine, or the speculative engine with a schedule."""

    engine: str
    schedule: Schedule = ()

    @classmethod
    def static(cls, k: int, largest_batch: int) -> Config:
        return cls(SPECULATIVE, ((1, largest_batch, k),))

    @property
    def k(self) -> int:
        """The k of a single-range schedule (0 for the plain engine)."""
        return self.schedule[0][2] if self.schedule else 0


class Bench(Protocol):
    """What the loop needs from the engines."""

    def stretch(
        self,
        engine: str,
        schedules: Sequence[Schedule],
        batch_size: int | None,
        round_index: int,
        seed: int,
        seconds: float | None = None,
    ) -> list[Block]:
        """Generate in ``engine`` for at least ``seconds`` (None: the bench's round length; 0: one
        generation), at ``batch_size`` requests at once (None: the mixed workload), switching
        between ``schedules`` every few steps in cycles of a random order (a plain engine gets
        one empty schedule). Returns each block's counted steps: ``unit`` is the cycle,
        ``candidate`` the index into ``schedules``."""

    def steps(self) -> Any:
        """The captured windows so far (a polars frame), or None when nothing was captured."""


@dataclass
class _Arm:
    """One candidate at one batch size during the race."""

    config: Config
    batch_size: int
    cycles: list[Block] = field(default_factory=list)  # unit = cycle (unique over the race)
    rounds: list[Block] = field(default_factory=list)  # unit = round: the sum of its blocks
    eliminated: bool = False

    @property
    def rate(self) -> float:
        return rate(self.rounds)


def _sum_block(unit: int, blocks: Sequence[Block]) -> Block:
    return Block(unit, 0, sum(b.tokens for b in blocks), sum(b.seconds for b in blocks), sum(b.steps for b in blocks))


@dataclass
class Race:
    """The state of the race at every batch size (see the module docstring)."""

    arms: dict[int, list[_Arm]]
    min_rounds: int = MIN_ROUNDS
    rounds: int = 0
    decided: dict[int, bool] = field(default_factory=dict)
    #: |log| of the bias between the engine processes, added to plain-vs-speculative intervals.
    log_bias: float = 0.0
    _cycles: int = 0

    def alive(self, batch_size: int) -> list[_Arm]:
        return [a for a in self.arms[batch_size] if not a.eliminated]

    def reference(self, batch_size: int) -> _Arm | None:
        """The arm every other one is scored against: the speculative k still in the race that
        was measured in the most cycles (so it ran beside every other candidate)."""
        arms = [a for a in self.alive(batch_size) if a.rounds]
        speculative = [a for a in arms if a.config.engine == SPECULATIVE] or arms
        return max(speculative, key=lambda a: (len(a.cycles), len(a.rounds)), default=None)

    def score(self, arm: _Arm) -> float:
        """``arm``'s tokens/s over the reference's, paired: arms measured at different times (one
        dropped early, one raced to the end) compare only where they ran side by side."""
        ref = self.reference(arm.batch_size)
        if ref is None or not arm.rounds:
            return math.nan
        return 1.0 if arm is ref else self.compare(arm, ref, 0.95).estimate

    def relative_rate(self, arm: _Arm) -> float:
        """``arm``'s tokens/s as if measured beside the reference all along (what choosing uses)."""
        ref = self.reference(arm.batch_size)
        return ref.rate * self.score(arm) if ref is not None and arm.rounds else math.nan

    def leader(self, batch_size: int) -> _Arm:
        measured = [a for a in self.alive(batch_size) if a.rounds]
        if not measured:
            return self.alive(batch_size)[0]
        return max(measured, key=lambda a: s if math.isfinite(s := self.score(a)) else -math.inf)

    def plan(self) -> dict[int, list[_Arm]]:
        return {b: self.alive(b) for b in self.arms if not self.decided.get(b)}

    def compare(self, arm: _Arm, other: _Arm, level: float = LOOK_LEVEL) -> Ratio:
        """``arm`` over ``other``: cycle by cycle inside the speculative engine, else round by
        round across the engines, widened by the engines' bias."""
        if arm.config.engine == other.config.engine == SPECULATIVE:
            return ratio(arm.cycles, other.cycles, level)
        return ratio(arm.rounds, other.rounds, level).widened(self.log_bias)

    def record(self, arms: Sequence[_Arm], blocks: Sequence[Block], round_index: int) -> None:
        """A stretch's blocks, cycle numbers made unique over the race."""
        offset = self._cycles
        for i, arm in enumerate(arms):
            mine = [b for b in blocks if b.candidate == i]
            arm.cycles += [Block(offset + b.unit, 0, b.tokens, b.seconds, b.steps) for b in mine]
            if mine:
                arm.rounds.append(_sum_block(round_index, mine))
        self._cycles = offset + 1 + max((b.unit for b in blocks), default=0)

    def update(self) -> None:
        """At a look: drop the candidates slower than the leader beyond noise; mark decided
        batch sizes (every other candidate dropped or tied within :data:`TIE`)."""
        if self.rounds < self.min_rounds or self.rounds not in LOOKS:
            return
        for b in self.arms:
            if self.decided.get(b):
                continue
            leader = self.leader(b)
            decided = True
            for arm in self.alive(b):
                if arm is leader:
                    continue
                r = self.compare(arm, leader)
                if r.high < 1:
                    arm.eliminated = True
                elif not (r.low > 1 - TIE and r.high < 1 + TIE):
                    decided = False
            self.decided[b] = decided


def race(
    bench: Bench,
    batch_sizes: Sequence[int],
    ks: Sequence[int],
    *,
    deadline: float,
    rng: random.Random,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = MAX_ROUNDS,
    on_round: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    engine_bias: Callable[[Race], float] | None = None,
) -> Race:
    """Step 1: race the plain engine and every k at every batch size until decided or out of
    time. ``engine_bias`` gives |log bias| between the engines from the race so far (before
    each look); without it plain comparisons are not widened."""
    largest = max(batch_sizes)
    configs = [Config(PLAIN), *(Config.static(k, largest) for k in ks)]
    state = Race({b: [_Arm(c, b) for c in configs] for b in batch_sizes}, min_rounds)
    last_round = 0.0
    while state.rounds < max_rounds:
        plan = state.plan()
        if not plan:
            break
        if state.rounds >= min_rounds and clock() + last_round > deadline:
            break
        started = clock()
        order = list(plan)
        rng.shuffle(order)
        for b in order:
            speculative = [a for a in plan[b] if a.config.engine == SPECULATIVE]
            plain = [a for a in plan[b] if a.config.engine == PLAIN]
            # The plain engine first in alternate rounds: an order effect cancels over two rounds.
            engines = [plain, speculative] if (state.rounds + b) % 2 == 0 else [speculative, plain]
            for arms in engines:
                if not arms:
                    continue
                blocks = bench.stretch(
                    arms[0].config.engine, [a.config.schedule for a in arms], b, state.rounds, rng.randrange(2**31)
                )
                state.record(arms, blocks, state.rounds)
        state.rounds += 1
        last_round = clock() - started
        if engine_bias is not None:
            state.log_bias = engine_bias(state)
        state.update()
        if on_round is not None:
            on_round(state.rounds)
    return state


# --- choosing -------------------------------------------------------------------------------------


def _best_speculative(state: Race, batch_size: int) -> _Arm:
    """The speculative engine's measured leader at a batch size (among the ks still in the race):
    decided or not, never a k the race measured slower."""
    arms = [a for a in state.arms[batch_size] if a.config.engine == SPECULATIVE and a.rounds]
    alive = [a for a in arms if not a.eliminated] or arms
    return max(alive, key=state.score)


def _plain(state: Race, batch_size: int) -> _Arm:
    return next(a for a in state.arms[batch_size] if a.config.engine == PLAIN)


Chooser = Callable[[int, int, Sequence[int]], int | None]


def choose_buckets(state: Race, largest: int, model: Chooser | None) -> list[TuneBucket]:
    """Step 2: a k per power-of-two bucket: measured where a measured batch size falls in the
    bucket, else the neighbours' common choice, else ``model(low, high, (k_below, k_above))``."""
    measured = sorted(state.arms)
    best = {b: _best_speculative(state, b) for b in measured}
    out = []
    for low, high in buckets.spans(largest):
        inside = [b for b in measured if low <= b <= high]
        if inside:
            b = inside[0]
            arm = best[b]
            out.append(TuneBucket(low, high, arm.config.k, "measured", b, arm.rate, state.decided.get(b, False)))
            continue
        below = [b for b in measured if b < low]
        above = [b for b in measured if b > high]
        if not below or not above:  # outside the measured range: the nearest measured batch size
            b = below[-1] if below else above[0]
            out.append(TuneBucket(low, high, best[b].config.k, "nearest measured", b, None, False))
            continue
        lo, hi = below[-1], above[0]
        k_lo, k_hi = best[lo].config.k, best[hi].config.k
        if k_lo == k_hi:
            out.append(TuneBucket(low, high, k_lo, "measured either side", None, None, True))
            continue
        chosen = model(low, high, (k_lo, k_hi)) if model is not None else None
        if chosen is None:  # no model: the neighbour nearer on a log scale
            near = lo if math.log(low * high) / 2 - math.log(lo) <= math.log(hi) - math.log(low * high) / 2 else hi
            out.append(TuneBucket(low, high, best[near].config.k, "nearest measured", near, None, False))
        else:
            out.append(TuneBucket(low, high, chosen, "model", None, None, False))
    return out


def _plain_bucket(state: Race, bucket: TuneBucket) -> TuneBucket:
    """A bucket of the "no speculation" answer: the plain engine, measured or not."""
    b = bucket.measured_batch_size
    tps = _plain(state, b).rate if bucket.basis == "measured" and b is not None else None
    return TuneBucket(bucket.batch_size_min, bucket.batch_size_max, 0, "plain engine", b, tps, bucket.decided)


def merged(buckets: Sequence[TuneBucket]) -> Schedule:
    """The buckets as vLLM's ``num_speculative_tokens_per_batch_size``, equal neighbours merged."""
    rows: list[list[int]] = []
    for b in buckets:
        if rows and rows[-1][2] == b.num_speculative_tokens:
            rows[-1][1] = b.batch_size_max
        else:
            rows.append([b.batch_size_min, b.batch_size_max, b.num_speculative_tokens])
    return tuple((lo, hi, k) for lo, hi, k in rows)


def _interpolated(points: dict[int, float], batch: int) -> float:
    """tokens/s at ``batch`` from measured batch sizes: linear in log batch and log tokens/s,
    held flat beyond the measured range."""
    xs = sorted(points)
    logs = np.log([points[x] for x in xs])
    return float(np.exp(np.interp(math.log(batch), np.log(xs), logs)))


def workload_time(tps_at: Callable[[int], float], largest: int) -> float:
    """Predicted seconds per token of the verification workload, where every batch size from
    ``largest`` down to 1 holds for about the same number of steps (staggered request lengths):
    tokens at batch b are ∝ b."""
    sizes = range(1, largest + 1)
    return sum(b / tps_at(b) for b in sizes) / sum(sizes)


def _config_tps(state: Race, config: Config) -> Callable[[int], float]:
    """Measured tokens/s of a configuration at any batch size (schedules: each bucket's k)."""
    curves: dict[int, dict[int, float]] = {}
    for b, arms in state.arms.items():
        for arm in arms:
            if arm.rounds:
                key = -1 if arm.config.engine == PLAIN else arm.config.k
                curves.setdefault(key, {})[b] = state.relative_rate(arm)

    def at(batch: int) -> float:
        key = -1
        if config.engine != PLAIN:
            key = next((k for lo, hi, k in config.schedule if lo <= batch <= hi), config.schedule[-1][2])
        if key not in curves:  # a k never measured: the nearest measured one
            key = min((k for k in curves if k >= 0), key=lambda k: abs(k - key))
        return _interpolated(curves[key], batch)

    return at


def best_static(state: Race, ks: Sequence[int], largest: int) -> int:
    """The single k (≥ 1) with the shortest predicted verification workload."""
    return min(ks, key=lambda k: workload_time(_config_tps(state, Config.static(k, largest)), largest))


@dataclass(frozen=True)
class Decision:
    """What step 2 chose: the configuration to run, its schedule and buckets, the best static k."""

    chosen: Config
    schedule: Schedule
    buckets: list[TuneBucket]
    static: Config


def decide(
    state: Race,
    ks: Sequence[int],
    largest: int,
    chooser: Chooser | None,
    *,
    margin: float = MARGIN,
    static_only: bool = False,
) -> Decision:
    """Step 2 in full: buckets, the merged schedule, and plain decoding when the schedule is not
    predicted to beat the plain engine by ``margin`` on the verification workload.
    ``static_only``: one k for every batch size, the best static k (:data:`STATIC_ONLY`)."""
    static = Config.static(best_static(state, [k for k in ks if k >= 1], largest), largest)
    if static_only:
        spans = buckets.spans(largest)
        picked = [TuneBucket(low, high, static.k, STATIC_ONLY, None, None, False) for low, high in spans]
    else:
        picked = choose_buckets(state, largest, chooser)
    schedule = merged(picked)
    chosen = Config(SPECULATIVE, schedule)
    plain_time = workload_time(_config_tps(state, Config(PLAIN)), largest)
    chosen_time = workload_time(_config_tps(state, chosen), largest)
    if chosen_time * (1 + margin) > plain_time or max(k for _, _, k in schedule) == 0:
        return Decision(Config(PLAIN), ((1, largest, 0),), [_plain_bucket(state, b) for b in picked], static)
    return Decision(chosen, schedule, picked, static)


# --- verifying ------------------------------------------------------------------------------------


def _gain(r: Ratio) -> tuple[float, float, float]:
    return math.expm1(math.log(r.estimate)), r.low - 1, r.high - 1


def verify(
    bench: Bench,
    chosen: Config,
    static: Config,
    *,
    deadline: float,
    rng: random.Random,
    workload: str,
    log_bias: float = 0.0,
    min_rounds: int = VERIFY_MIN_ROUNDS,
    max_rounds: int = VERIFY_MAX_ROUNDS,
    half_width: float = HALF_WIDTH,
    on_round: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> TuneVerification:
    """Step 3 on the mixed workload, in rounds of single generations in a random order: the
    plain engine's; the chosen configuration's on its own (the gain over plain: whole
    generations paired by round, widened by ``log_bias``); and one where the chosen schedule and
    the best static k switch every few steps (the gain over the best static k, paired by
    cycle). Until both 95% intervals are within ``half_width`` or out of time. A configuration
    identical to another (the schedule is the best static k, or plain decoding was chosen) runs
    once and its gain over the other is 0 by construction."""
    plain_chosen = chosen.engine == PLAIN
    main = static if plain_chosen else chosen  # the speculative configuration run whole
    interleave = not plain_chosen and {k for *_, k in chosen.schedule} != {static.k}
    blocks: dict[str, list[Block]] = {"schedule": [], "static": []}
    whole: dict[str, list[Block]] = {"speculative": [], "plain": []}
    cycles = 0
    last_round = 0.0
    n = 0

    def gains() -> tuple[Ratio | None, Ratio | None]:
        """(schedule vs best static, schedule vs plain); None: the same configuration."""
        versus_plain = ratio(whole["speculative"], whole["plain"]).widened(log_bias)
        if plain_chosen:
            return Ratio(1 / versus_plain.estimate, 1 / versus_plain.high, 1 / versus_plain.low,
                         versus_plain.units, versus_plain.level), None  # fmt: skip
        return (ratio(blocks["schedule"], blocks["static"], by_unit=True) if interleave else None), versus_plain

    while n < max_rounds:
        if n >= min_rounds:
            done = [g.half_width <= half_width for g in gains() if g is not None]
            if all(done) or clock() + last_round > deadline:
                break
        started = clock()
        jobs = ["plain", "speculative", *(["interleaved"] if interleave else [])]
        rng.shuffle(jobs)
        for job in jobs:
            seed = rng.randrange(2**31)
            if job == "interleaved":
                got = bench.stretch(SPECULATIVE, [chosen.schedule, static.schedule], None, n, seed, 0.0)
                for i, name in enumerate(("schedule", "static")):
                    blocks[name] += [Block(cycles + b.unit, 0, b.tokens, b.seconds, b.steps) for b in got
                                     if b.candidate == i]  # fmt: skip
                cycles += 1 + max((b.unit for b in got), default=0)
            else:
                engine, schedule = (PLAIN, ()) if job == "plain" else (SPECULATIVE, main.schedule)
                whole[job].append(_sum_block(n, bench.stretch(engine, [schedule], None, n, seed, 0.0)))
        n += 1
        last_round = clock() - started
        if on_round is not None:
            on_round(n)
    vs_static, vs_plain = gains()
    zero = (0.0, 0.0, 0.0)
    g_static = _gain(vs_static) if vs_static is not None else zero
    g_plain = _gain(vs_plain) if vs_plain is not None else zero
    target_met = all(g.half_width <= half_width for g in (vs_static, vs_plain) if g is not None)
    speculative_rate = rate(whole["speculative"])
    plain_rate = rate(whole["plain"])
    static_rate = speculative_rate if not interleave else speculative_rate / (1 + g_static[0])
    return TuneVerification(
        rounds=n,
        workload=workload,
        schedule_tokens_per_second=plain_rate if plain_chosen else speculative_rate,
        best_static_num_speculative_tokens=static.k,
        best_static_tokens_per_second=static_rate,
        plain_tokens_per_second=plain_rate,
        gain_vs_best_static=g_static[0],
        gain_vs_best_static_low=g_static[1],
        gain_vs_best_static_high=g_static[2],
        gain_vs_plain=g_plain[0],
        gain_vs_plain_low=g_plain[1],
        gain_vs_plain_high=g_plain[2],
        cycles=cycles,
        half_width_target=half_width,
        target_met=target_met,
    )


# --- the engines' bias ----------------------------------------------------------------------------


def k0_tax(windows: Any) -> float | None:
    """Share of a k=0 step's time the speculative engine still spends drafting, from the captured
    steps (None when nothing was captured at k=0)."""
    if windows is None:
        return None
    import polars as pl

    rows = (
        windows.lazy()
        .filter(
            (pl.col("num_spec_tokens") == 0)
            & pl.col("method").is_not_null()
            & pl.col("draft_seconds").is_not_null()
            & pl.col("step_seconds").is_not_null()
        )
        .select(draft=pl.col("draft_seconds").sum(), step=pl.col("step_seconds").sum())
        .collect()
    )
    draft, step = rows.row(0)
    return float(draft / step) if step and step > 0 else None


def process_bias(bench: Bench, batch_sizes: Sequence[int], rng: random.Random) -> Ratio | None:
    """The plain engine over a second plain engine process doing the same work, in
    :data:`CALIBRATION_ROUNDS` rounds at every batch size, first and second in turn; the second
    process is then released. None when the bench has no second process."""
    if not getattr(bench, "second_plain", False):
        return None
    blocks: dict[str, list[Block]] = {PLAIN: [], SECOND_PLAIN: []}
    for r in range(CALIBRATION_ROUNDS):
        order = list(batch_sizes)
        rng.shuffle(order)
        for i, b in enumerate(order):
            engines = [PLAIN, SECOND_PLAIN] if (r + i) % 2 == 0 else [SECOND_PLAIN, PLAIN]
            for engine in engines:
                got = bench.stretch(engine, [()], b, r, rng.randrange(2**31))
                blocks[engine].append(_sum_block(r * 1000 + b, got))
    release = getattr(bench, "release", None)
    if release is not None:
        release(SECOND_PLAIN)
    return ratio(blocks[PLAIN], blocks[SECOND_PLAIN])


def engine_bias(state: Race, tax: float | None) -> Ratio | None:
    """The plain engine over the speculative engine at k=0 less its drafting (``tax``), pooled
    over batch sizes by round: 1 when the two processes run the same work at the same speed and
    the speculative engine costs nothing at k=0 beyond drafting. Used as the engines' bias only
    when no second plain process measured it (an upper bound: it holds the speculative engine's
    own k=0 overhead too)."""
    plain: list[Block] = []
    k0: list[Block] = []
    for b, arms in state.arms.items():
        p = next((a for a in arms if a.config.engine == PLAIN), None)
        z = next((a for a in arms if a.config.engine == SPECULATIVE and a.config.k == 0), None)
        if p is None or z is None:
            continue
        shared = {x.unit for x in p.rounds} & {x.unit for x in z.rounds}
        # Unit = (round, batch size): each batch size's pair of stretches is one comparison.
        plain += [Block(x.unit * 1000 + b, 0, x.tokens, x.seconds, x.steps) for x in p.rounds if x.unit in shared]
        k0 += [Block(x.unit * 1000 + b, 0, x.tokens, x.seconds, x.steps) for x in z.rounds if x.unit in shared]
    if not plain:
        return None
    r = ratio(plain, k0)
    keep = 1 - (tax or 0.0)  # k0 without its drafting runs 1 / keep times as fast
    return Ratio(r.estimate * keep, r.low * keep, r.high * keep, r.units, r.level)


# --- the whole loop -------------------------------------------------------------------------------


def measurements(state: Race) -> list[TuneMeasurement]:
    out = []
    for b in sorted(state.arms):
        leader = state.leader(b)
        for arm in state.arms[b]:
            if not arm.rounds:
                continue
            speculative = arm.config.engine == SPECULATIVE
            _, low, high = rate_interval(arm.cycles if speculative else arm.rounds)
            vs = None if arm is leader else state.compare(arm, leader)
            out.append(
                TuneMeasurement(
                    batch_size=b,
                    num_speculative_tokens=arm.config.k,
                    tokens_per_second=arm.rate,
                    low=low,
                    high=high,
                    rounds=len(arm.rounds),
                    engine=arm.config.engine,
                    eliminated=arm.eliminated,
                    leader=arm is leader,
                    steps=sum(x.steps for x in arm.rounds),
                    units=len({x.unit for x in (arm.cycles if speculative else arm.rounds)}),
                    vs_leader=None if vs is None else vs.estimate,
                    vs_leader_low=None if vs is None else vs.low,
                    vs_leader_high=None if vs is None or not math.isfinite(vs.high) else vs.high,
                )
            )
    return out


def round_to_round(state: Race, speculative_cycles: bool = False) -> float:
    """Median relative standard deviation of a candidate's rounds (or, ``speculative_cycles``,
    of a speculative k's cycles): the noise each comparison fought."""
    spreads = []
    for arms in state.arms.values():
        for arm in arms:
            if speculative_cycles and arm.config.engine != SPECULATIVE:
                continue
            value = spread(arm.cycles if speculative_cycles else arm.rounds)
            if math.isfinite(value):
                spreads.append(value)
    return float(np.median(spreads)) if spreads else math.nan


def speculative_config(base: dict[str, Any], schedule: Schedule) -> str | None:
    """The ready ``--speculative-config``: the user's, with k and the schedule (None: plain)."""
    if not schedule or max(k for _, _, k in schedule) == 0:
        return None
    config = dict(base)
    config["num_speculative_tokens"] = max(k for _, _, k in schedule)
    if len(schedule) > 1:
        config["num_speculative_tokens_per_batch_size"] = [list(row) for row in schedule]
    else:
        config.pop("num_speculative_tokens_per_batch_size", None)
    return json.dumps(config)


def model_chooser(windows: Any, method: str | None, largest: int) -> Chooser | None:
    """The fitted model's pick between two k for a bucket without measurements (see module doc)."""

    if windows is None:
        return None
    rec = recommend(windows, max_k=None, bootstrap=0, method=method)
    if rec is None:
        return None
    estimates = {
        (p.batch_size_min, min(p.batch_size_max, largest), p.num_speculative_tokens): p.estimate
        for p in rec.predicted
        if p.method == method
    }

    def choose(low: int, high: int, ks: Sequence[int]) -> int | None:
        scored = [(estimates.get((low, high, k), 1.0 if k == 0 else None), k) for k in ks]
        known = [(v, k) for v, k in scored if v is not None]
        return max(known)[1] if known else None

    return choose


def tune(
    bench: Bench,
    *,
    method: str | None,
    base_config: dict[str, Any],
    batch_sizes: Sequence[int],
    max_k: int,
    budget_s: float,
    seed: int = 0,
    margin: float = MARGIN,
    workload: str = "",
    on_progress: Callable[[str, int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    started_s: float = 0.0,
    static_only: bool = False,
    parallel: Parallel = ONE_DEVICE,
) -> TuneResult:
    """Race, choose, verify (module docstring); ``started_s`` is the engines' start-up time.
    ``static_only``: the answer is one k for every batch size (data parallel > 1), still
    verified against plain decoding. ``parallel``: the shape the bench's engines ran at (recorded)."""
    rng = random.Random(seed)
    begin = clock()
    largest = max(batch_sizes)
    ks = list(range(0, max_k + 1))

    def progress(phase: str) -> Callable[[int], None]:
        return lambda n: on_progress(phase, n) if on_progress else None

    # How far two processes doing the same work differ: measured on two plain processes when the
    # bench has a second one, else bounded by the plain engine against k=0 less its drafting.
    # Its spread beyond noise (σ), at 95% (× 1.96), widens every plain-vs-speculative interval.
    processes = process_bias(bench, sorted(batch_sizes), rng)
    taxes: list[float | None] = [None]

    def bias(state: Race) -> float:
        """|log bias| to carry (see above), the k=0 tax read from the captured steps at looks."""
        if processes is not None:
            return Z95 * systematic(processes)
        if state.rounds in LOOKS:
            taxes[0] = k0_tax(bench.steps())
        measured = engine_bias(state, taxes[0])
        return Z95 * systematic(measured) if measured is not None else 0.0

    state = race(
        bench, sorted(batch_sizes), ks, deadline=begin + RACE_SHARE * budget_s, rng=rng,
        on_round=progress("race"), clock=clock, engine_bias=bias,
    )  # fmt: skip
    raced = clock()
    windows = bench.steps()
    tax = k0_tax(windows)
    taxes[0] = tax
    measured_bias = processes if processes is not None else engine_bias(state, tax)
    log_bias = Z95 * systematic(measured_bias) if measured_bias is not None else 0.0
    state.log_bias = log_bias
    chooser = model_chooser(windows, method, largest)
    decision = decide(state, ks, largest, chooser, margin=margin, static_only=static_only)
    chosen, schedule, buckets, static = decision.chosen, decision.schedule, decision.buckets, decision.static
    fitted = clock()
    verification = verify(
        bench, chosen, static, deadline=begin + budget_s, rng=rng, workload=workload, log_bias=log_bias,
        on_round=progress("verify"), clock=clock,
    )  # fmt: skip
    done = clock()
    busy: dict[str, float] = getattr(bench, "busy_seconds", dict)()
    idle: dict[str, float] = getattr(bench, "idle_cpu_seconds", dict)()
    cycle_noise = round_to_round(state, speculative_cycles=True)
    return TuneResult(
        method=method,
        speculative_config=speculative_config(base_config, schedule) if chosen.engine != PLAIN else None,
        schedule=schedule,
        buckets=tuple(buckets),
        measurements=tuple(measurements(state)),
        verification=verification,
        noise=TuneNoise(
            round_to_round=round_to_round(state),
            rounds=state.rounds,
            idle_cpu_seconds=idle,
            busy_seconds=busy,
            cycle_to_cycle=cycle_noise if math.isfinite(cycle_noise) else None,
            comparison=COMPARISON,
            engine_bias_basis=None
            if measured_bias is None
            else "two plain engine processes, same work"
            if processes is not None
            else "plain engine vs the speculative engine at k=0 less its drafting (an upper bound)",
            engine_bias=None if measured_bias is None else measured_bias.estimate,
            engine_bias_low=None if measured_bias is None else measured_bias.low,
            engine_bias_high=None
            if measured_bias is None or not math.isfinite(measured_bias.high)
            else measured_bias.high,
            k0_tax=tax,
        ),
        seconds={
            "engine_start": started_s,
            "race": raced - begin,
            "fit": fitted - raced,
            "verification": done - fitted,
            "total": started_s + done - begin,
        },
        decided=all(state.decided.get(b, False) for b in batch_sizes),
        parallel=parallel.to_dict(),
    )
