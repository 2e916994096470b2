"""The closed loop behind ``specobs tune``: race every k in one engine, choose, apply, verify.

The engine side is a :class:`Bench` (``specobs.tuning.engine`` runs real vLLM engines; tests
may pass any object with the same two methods). This module only decides what to run and what
the numbers say:

1. **Race.** At each batch size the candidates are the plain engine and the speculative engine
   at every k from 0 (drafting switched off by the schedule) to the largest. A round runs every
   candidate still in the race once, at every undecided batch size, in a shuffled order, so
   slow drift of a shared machine hits all candidates alike. After ``min_rounds`` a candidate is
   dropped when the paired comparison with the leader (the ratio of their tokens/s in the same
   rounds) says it is slower by more than ``equivalence`` beyond noise (the 95% t interval of
   the mean log ratio lies below log(1 - equivalence); tested after every round, so a bar
   stricter than "below 0" keeps equal candidates from being dropped by chance). A
   batch size is decided when one candidate is left, or when every one left is within
   ``equivalence`` of the leader at the interval's worst. Racing stops when every batch size is
   decided, at ``max_rounds``, or when the next round would not fit the race's share of the
   budget.
2. **Choose.** Measured batch sizes get the speculative engine's fastest k there. Power-of-two
   buckets between measured batch sizes take the choice of their measured neighbours when both
   agree, else the model fitted on the captured steps of every measured k
   (:func:`specobs.tuning.recommend.recommend`) picks between the neighbours' choices. When the
   plain engine is predicted at least as fast as the schedule on the verification workload, the
   answer is no speculative config at all.
3. **Verify.** The chosen schedule, the best single static k and the plain engine run the same
   mixed-batch workload (requests of staggered lengths, so the batch shrinks from the largest
   size to 1 during each round), interleaved and repeated; gains are paired per round.
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

from specobs.analysis.intervals import mean_interval
from specobs.results import TuneBucket, TuneMeasurement, TuneNoise, TuneResult, TuneVerification

PLAIN = "plain"
SPECULATIVE = "speculative"
#: Share of the budget the race may use; the rest is kept for the verification.
RACE_SHARE = 0.7
MIN_ROUNDS = 3
#: A cap that only stops a race whose candidates stay tied; the budget normally ends it first.
MAX_ROUNDS = 40
VERIFY_MIN_ROUNDS = 3
VERIFY_MAX_ROUNDS = 8
#: Candidates within this share of the leader (at their interval's worst) are equivalent.
EQUIVALENCE = 0.03
#: The schedule must beat plain decoding by this share (predicted) to be recommended at all.
MARGIN = 0.02

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


@dataclass(frozen=True)
class Sample:
    """One round of one configuration: tokens generated and the wall time it took."""

    tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else math.nan


class Bench(Protocol):
    """What the loop needs from the engines."""

    def measure(self, config: Config, batch_size: int, round_index: int) -> Sample:
        """Generate at ``batch_size`` concurrent requests under ``config``."""

    def mixed(self, config: Config, round_index: int) -> Sample:
        """The verification workload under ``config``."""

    def steps(self) -> Any:
        """The captured windows so far (a polars frame), or None when nothing was captured."""


@dataclass
class _Arm:
    """One candidate at one batch size during the race."""

    config: Config
    batch_size: int
    samples: dict[int, float] = field(default_factory=dict)  # round → tokens/s
    seconds: float = 0.0  # last round's wall time (to plan the next round)
    eliminated: bool = False


def _log_ratio_interval(arm: _Arm, leader: _Arm) -> tuple[float, float, float]:
    rounds = sorted(set(arm.samples) & set(leader.samples))
    diffs = [math.log(arm.samples[r] / leader.samples[r]) for r in rounds]
    return mean_interval(diffs)


def _mean_log(arm: _Arm) -> float:
    return float(np.mean(np.log(list(arm.samples.values())))) if arm.samples else -math.inf


@dataclass
class Race:
    """The state of the race at every batch size (see the module docstring)."""

    arms: dict[int, list[_Arm]]
    min_rounds: int = MIN_ROUNDS
    equivalence: float = EQUIVALENCE
    rounds: int = 0
    decided: dict[int, bool] = field(default_factory=dict)

    def alive(self, batch_size: int) -> list[_Arm]:
        return [a for a in self.arms[batch_size] if not a.eliminated]

    def leader(self, batch_size: int) -> _Arm:
        return max(self.alive(batch_size), key=_mean_log)

    def plan(self) -> list[_Arm]:
        return [a for b, arms in self.arms.items() if not self.decided.get(b) for a in arms if not a.eliminated]

    def update(self) -> None:
        """Drop the candidates slower than the leader beyond noise; mark decided batch sizes."""
        if self.rounds < self.min_rounds:
            return
        for b in self.arms:
            if self.decided.get(b):
                continue
            leader = self.leader(b)
            equivalent = True
            for arm in self.alive(b):
                if arm is leader:
                    continue
                _, low, high = _log_ratio_interval(arm, leader)
                if high < math.log1p(-self.equivalence):  # slower by more than the equivalence, beyond noise
                    arm.eliminated = True
                elif low < math.log1p(-self.equivalence):
                    equivalent = False
            self.decided[b] = equivalent


def race(
    bench: Bench,
    batch_sizes: Sequence[int],
    ks: Sequence[int],
    *,
    deadline: float,
    rng: random.Random,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = MAX_ROUNDS,
    equivalence: float = EQUIVALENCE,
    on_round: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Race:
    """Step 1: race the plain engine and every k at every batch size until decided or out of time."""
    largest = max(batch_sizes)
    configs = [Config(PLAIN), *(Config.static(k, largest) for k in ks)]
    state = Race({b: [_Arm(c, b) for c in configs] for b in batch_sizes}, min_rounds, equivalence)
    while state.rounds < max_rounds:
        plan = state.plan()
        if not plan:
            break
        if state.rounds >= min_rounds and clock() + sum(a.seconds for a in plan) > deadline:
            break
        rng.shuffle(plan)
        for arm in plan:
            sample = bench.measure(arm.config, arm.batch_size, state.rounds)
            arm.samples[state.rounds] = sample.tokens_per_second
            arm.seconds = sample.seconds
        state.rounds += 1
        state.update()
        if on_round is not None:
            on_round(state.rounds)
    return state


# --- choosing -------------------------------------------------------------------------------------


def power_buckets(largest: int) -> list[tuple[int, int]]:
    """1, 2–3, 4–7, … up to ``largest`` (the last bucket ends at it), as vLLM's table wants them."""
    out = []
    low = 1
    while low <= largest:
        out.append((low, min(low * 2 - 1, largest)))
        low *= 2
    return out


def _tps(arm: _Arm) -> float:
    return float(np.mean(list(arm.samples.values()))) if arm.samples else math.nan


def _best_speculative(state: Race, batch_size: int, prefer: int | None = None) -> _Arm:
    """The speculative engine's k at a batch size: ``prefer`` (the best static k) while the race
    has not shown it slower than the leader, else the fastest k still in the race. A k that
    only leads within noise would make the schedule more complex for no measured gain."""
    arms = [a for a in state.arms[batch_size] if a.config.engine == SPECULATIVE and a.samples]
    alive = [a for a in arms if not a.eliminated] or arms
    preferred = [a for a in alive if a.config.k == prefer]
    return preferred[0] if preferred else max(alive, key=_mean_log)


def _plain(state: Race, batch_size: int) -> _Arm:
    return next(a for a in state.arms[batch_size] if a.config.engine == PLAIN)


Chooser = Callable[[int, int, Sequence[int]], int | None]


def choose_buckets(state: Race, largest: int, model: Chooser | None, prefer: int | None = None) -> list[TuneBucket]:
    """Step 2: a k per power-of-two bucket: measured where a measured batch size falls in the
    bucket, else the neighbours' common choice, else ``model(low, high, (k_below, k_above))``."""
    measured = sorted(state.arms)
    best = {b: _best_speculative(state, b, prefer) for b in measured}
    out = []
    for low, high in power_buckets(largest):
        inside = [b for b in measured if low <= b <= high]
        if inside:
            b = inside[0]
            arm = best[b]
            out.append(TuneBucket(low, high, arm.config.k, "measured", b, _tps(arm), state.decided.get(b, False)))
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
    tps = _tps(_plain(state, b)) if bucket.basis == "measured" and b is not None else None
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
            if arm.samples:
                key = -1 if arm.config.engine == PLAIN else arm.config.k
                curves.setdefault(key, {})[b] = _tps(arm)

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
    prefer_static: bool = True,
) -> Decision:
    """Step 2 in full: buckets, the merged schedule, and plain decoding when the schedule is not
    predicted to beat the plain engine by ``margin`` on the verification workload.
    ``prefer_static=False`` takes every measured batch size's fastest k (the oracle's rule)."""
    static = Config.static(best_static(state, [k for k in ks if k >= 1], largest), largest)
    buckets = choose_buckets(state, largest, chooser, prefer=static.k if prefer_static else None)
    schedule = merged(buckets)
    chosen = Config(SPECULATIVE, schedule)
    plain_time = workload_time(_config_tps(state, Config(PLAIN)), largest)
    chosen_time = workload_time(_config_tps(state, chosen), largest)
    if chosen_time * (1 + margin) > plain_time or max(k for _, _, k in schedule) == 0:
        return Decision(Config(PLAIN), ((1, largest, 0),), [_plain_bucket(state, b) for b in buckets], static)
    return Decision(chosen, schedule, buckets, static)


# --- verifying ------------------------------------------------------------------------------------


def _gain(samples: dict[str, dict[int, float]], a: str, b: str) -> tuple[float, float, float]:
    rounds = sorted(set(samples[a]) & set(samples[b]))
    mean, low, high = mean_interval([math.log(samples[a][r] / samples[b][r]) for r in rounds])
    return math.expm1(mean), math.expm1(low), math.expm1(high)


def verify(
    bench: Bench,
    chosen: Config,
    static: Config,
    *,
    deadline: float,
    rng: random.Random,
    workload: str,
    min_rounds: int = VERIFY_MIN_ROUNDS,
    max_rounds: int = VERIFY_MAX_ROUNDS,
    on_round: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> TuneVerification:
    """Step 3: the chosen config vs the best static k vs plain on the mixed workload, interleaved.
    A configuration identical to another (the schedule is the best static k, or plain decoding
    was chosen) runs once per round and its gain over the other is 0 by construction."""
    names = {"schedule": chosen, "static": static, "plain": Config(PLAIN)}
    if chosen.engine == PLAIN:  # "no speculation" is the plain engine itself: measured once per round
        del names["plain"]
    ks = {k for *_, k in chosen.schedule}
    if chosen.engine == SPECULATIVE and ks == {static.k}:  # the best static k itself: twice would show noise only
        del names["static"]
    samples: dict[str, dict[int, float]] = {n: {} for n in names}
    seconds = 0.0
    rounds = 0
    while rounds < max_rounds and (rounds < min_rounds or clock() + seconds <= deadline):
        order = list(names)
        rng.shuffle(order)
        started = clock()
        for name in order:
            samples[name][rounds] = bench.mixed(names[name], rounds).tokens_per_second
        seconds = clock() - started
        rounds += 1
        if on_round is not None:
            on_round(rounds)
    if "plain" not in samples:
        samples["plain"] = samples["schedule"]
    if "static" not in samples:
        samples["static"] = samples["schedule"]
    vs_static = _gain(samples, "schedule", "static")
    vs_plain = _gain(samples, "schedule", "plain") if chosen.engine != PLAIN else (0.0, 0.0, 0.0)
    return TuneVerification(
        rounds=rounds,
        workload=workload,
        schedule_tokens_per_second=float(np.mean(list(samples["schedule"].values()))),
        best_static_num_speculative_tokens=static.k,
        best_static_tokens_per_second=float(np.mean(list(samples["static"].values()))),
        plain_tokens_per_second=float(np.mean(list(samples["plain"].values()))),
        gain_vs_best_static=vs_static[0],
        gain_vs_best_static_low=vs_static[1],
        gain_vs_best_static_high=vs_static[2],
        gain_vs_plain=vs_plain[0],
        gain_vs_plain_low=vs_plain[1],
        gain_vs_plain_high=vs_plain[2],
    )


# --- the whole loop -------------------------------------------------------------------------------


def measurements(state: Race) -> list[TuneMeasurement]:
    out = []
    for b in sorted(state.arms):
        leader = state.leader(b)
        for arm in state.arms[b]:
            if not arm.samples:
                continue
            mean, low, high = mean_interval(list(arm.samples.values()))
            out.append(
                TuneMeasurement(
                    batch_size=b,
                    num_speculative_tokens=arm.config.k,
                    tokens_per_second=mean,
                    low=low,
                    high=high,
                    rounds=len(arm.samples),
                    engine=arm.config.engine,
                    eliminated=arm.eliminated,
                    leader=arm is leader,
                )
            )
    return out


def round_to_round(state: Race) -> float:
    """Median relative standard deviation of a candidate's rounds (the noise the race fought)."""
    spreads = []
    for arms in state.arms.values():
        for arm in arms:
            values = list(arm.samples.values())
            if len(values) >= 2:
                spreads.append(float(np.std(values, ddof=1) / np.mean(values)))
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
    from specobs.tuning.recommend import recommend

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
) -> TuneResult:
    """Race, choose, verify (module docstring); ``started_s`` is the engines' start-up time."""
    rng = random.Random(seed)
    begin = clock()
    largest = max(batch_sizes)
    ks = list(range(0, max_k + 1))

    def progress(phase: str) -> Callable[[int], None]:
        return lambda n: on_progress(phase, n) if on_progress else None

    state = race(
        bench, sorted(batch_sizes), ks, deadline=begin + RACE_SHARE * budget_s, rng=rng,
        on_round=progress("race"), clock=clock,
    )  # fmt: skip
    raced = clock()
    chooser = model_chooser(bench.steps(), method, largest)
    decision = decide(state, ks, largest, chooser, margin=margin)
    chosen, schedule, buckets, static = decision.chosen, decision.schedule, decision.buckets, decision.static
    fitted = clock()
    verification = verify(
        bench, chosen, static, deadline=begin + budget_s, rng=rng, workload=workload,
        on_round=progress("verify"), clock=clock,
    )  # fmt: skip
    done = clock()
    busy: dict[str, float] = getattr(bench, "busy_seconds", dict)()
    idle: dict[str, float] = getattr(bench, "idle_cpu_seconds", dict)()
    return TuneResult(
        method=method,
        speculative_config=speculative_config(base_config, schedule) if chosen.engine != PLAIN else None,
        schedule=schedule,
        buckets=tuple(buckets),
        measurements=tuple(measurements(state)),
        verification=verification,
        noise=TuneNoise(round_to_round(state), state.rounds, idle, busy),
        seconds={
            "engine_start": started_s,
            "race": raced - begin,
            "fit": fitted - raced,
            "verification": done - fitted,
            "total": started_s + done - begin,
        },
        decided=all(state.decided.get(b, False) for b in batch_sizes),
    )
