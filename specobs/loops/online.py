"""Online tuning inside a live engine (opt-in, ``SPECOBS_ONLINE_TUNER=observe|explore|apply``).

The capture hooks call :meth:`OnlineTuner.on_step` once per finished step with its batch size,
k, generated tokens and step time. The tuner keeps tokens/s per (batch bucket, k) in chunks of
``chunk_steps`` steps, and acts on the scheduler's batch-size → k table
(``scheduler.dynamic_sd_lookup``), which vLLM reads on every step:

- ``observe``: measures only. It writes a ``suggest`` decision when a k other than the current
  one has been measured faster beyond noise (for example after an operator changed the table).
- ``explore``: also runs a block of :data:`EXPLORE_STEPS` steps at a neighbouring k (current
  ± 1), the one with the fewest measurements, where the estimate is least certain. At most
  ``share`` of a bucket's steps (default 5%) explore. This is lossless: speculative decoding
  never changes outputs, only speed.
- ``apply``: also switches a bucket to a k whose measured gain over the current k clears
  ``margin`` with its whole 95% interval (``apply``). It then measures the next window at the
  new k against the old k's rate: ``confirm`` when it holds, ``rollback`` (back to the old k)
  when it measures worse.

The estimator is ``specobs tune``'s (:mod:`specobs.advice.paired`): a step counts for the k
that drafted its tokens (the k of the step before; two before under async scheduling), so the
first step of an exploring block counts for nothing, and each exploring block is paired with
the current k's counted steps just before it (a unit), so load that comes and goes hits both.
``observe`` has no blocks of its own to pair (the operator chose when k changed): it compares
chunks of counted steps, Welch's interval on mean log tokens/s.

Every decision is a :class:`TunerDecision` (time, bucket, from k, to k, predicted gain with its
interval, measured gain afterwards, reason), kept for the exporters and written beside the
event files. The tuner never raises into vLLM: the hooks wrap it, and a failure turns it off.
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from collections import deque
from collections.abc import Callable, MutableSequence
from dataclasses import dataclass, field
from typing import Any

from specobs import buckets
from specobs.advice.paired import Block, StepAttribution, ratio
from specobs.analysis.intervals import geometric_ratio, log_stats
from specobs.capture.config import CaptureConfig
from specobs.records import TUNER_ACTIONS, TunerDecision, TunerReason, reason_of

logger = logging.getLogger("specobs")

MODES = ("observe", "explore", "apply")
DEFAULT_SHARE = 0.05
CHUNK_STEPS = 32
MIN_CHUNKS = 3
MARGIN = 0.03
MAX_CHUNKS = 64  # per (bucket, k): older chunks age out, so the estimate follows the traffic
MAX_DECISIONS = 1000
#: Steps an exploring block runs at the other k (the first counts for nothing).
EXPLORE_STEPS = 4
MAX_UNITS = 256  # per (bucket, k): older exploring blocks age out


@dataclass
class _KMeasure:
    """tokens/s of one k in one bucket, in chunks of steps."""

    chunks: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_CHUNKS))
    tokens: float = 0.0
    seconds: float = 0.0
    steps: int = 0

    def add(self, tokens: float, seconds: float, chunk_steps: int) -> bool:
        """Add a step; True when it completed a chunk."""
        self.tokens += tokens
        self.seconds += seconds
        self.steps += 1
        if self.steps < chunk_steps:
            return False
        if self.seconds > 0:
            self.chunks.append(self.tokens / self.seconds)
        self.tokens = self.seconds = 0.0
        self.steps = 0
        return True

    def log_stats(self) -> tuple[float, float, int]:
        return log_stats(self.chunks)


def _gain(new: _KMeasure, old: _KMeasure) -> tuple[float, float, float] | None:
    """(gain, low, high) of ``new`` over ``old``: Welch's 95% interval on the mean log tokens/s
    (the smaller side's n − 1 degrees of freedom)."""
    ratio, low, high = geometric_ratio(new.chunks, old.chunks, conservative=True)
    if ratio is None or low is None or high is None:
        return None
    return ratio - 1, low - 1, high - 1


@dataclass
class _Bucket:
    low: int
    high: int
    k: int
    steps: int = 0
    explored: int = 0
    exploring: int | None = None  # the k the current exploring block runs at, None when not exploring
    explore_left: int = 0  # steps left in the exploring block
    unit: int = 0  # exploring blocks started so far
    recent: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=EXPLORE_STEPS - 1))
    block: list[float] = field(default_factory=lambda: [0.0, 0.0, 0])  # the exploring block's counted steps
    before: Block | None = None  # the current k's counted steps just before the exploring block
    after: tuple[int, Block, list[float]] | None = None  # (k, explored block, current k's steps after it)
    units: dict[int, deque[tuple[Block, Block]]] = field(default_factory=dict)  # k → (before, explored) pairs
    verifying: dict[str, Any] | None = None  # after an apply: from_k, baseline rate, the new window
    by_k: dict[int, _KMeasure] = field(default_factory=dict)
    suggested: set[tuple[int, int]] = field(default_factory=set)


class OnlineTuner:
    """See the module docstring. ``table`` is the scheduler's dense batch-size → k list (index =
    batch size), changed in place."""

    def __init__(
        self,
        mode: str,
        table: MutableSequence[int],
        max_k: int,
        *,
        share: float = DEFAULT_SHARE,
        margin: float = MARGIN,
        chunk_steps: int = CHUNK_STEPS,
        min_chunks: int = MIN_CHUNKS,
        clock: Callable[[], float] = time.time,
        run_id: str | None = None,
        engine: int | None = None,
        lag: int = 1,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"SPECOBS_ONLINE_TUNER={mode}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.table = table
        self.max_k = max_k
        self.share = min(max(share, 0.0), 0.5)
        self.margin = margin
        self.chunk_steps = chunk_steps
        self.min_chunks = min_chunks
        self.clock = clock
        self.run_id = run_id
        self.engine = engine
        largest = len(table) - 1
        self.buckets = [_Bucket(lo, hi, int(table[lo])) for lo, hi in buckets.spans(largest)]
        self._by_batch = [0] * (largest + 1)
        for i, b in enumerate(self.buckets):
            for size in range(b.low, b.high + 1):
                self._by_batch[size] = i
        self.decisions: deque[TunerDecision] = deque(maxlen=MAX_DECISIONS)
        self._attribution = StepAttribution(lag)
        self._rng = random.Random(0)
        self.decisions_total: dict[str, int] = dict.fromkeys(TUNER_ACTIONS, 0)

    # --- the table --------------------------------------------------------------------------------
    def _set(self, bucket: _Bucket, k: int) -> None:
        for size in range(bucket.low, bucket.high + 1):
            self.table[size] = k

    def schedule(self) -> list[tuple[int, int, int]]:
        """The live schedule, one row per bucket (what ``specobs_tuner_num_speculative_tokens`` shows)."""
        return [(b.low, b.high, b.k) for b in self.buckets]

    def _decide(
        self, bucket: _Bucket, action: str, to_k: int, reason: TunerReason | str, predicted=None, measured=None
    ) -> None:
        gain, low, high = predicted if predicted is not None else (None, None, None)
        typed, text = reason_of(reason)
        decision = TunerDecision(self.clock(), bucket.low, bucket.high, action, bucket.k, to_k, gain, low, high,
                                 measured, typed, self.run_id, self.engine, text)  # fmt: skip
        self.decisions.append(decision)
        self.decisions_total[action] += 1

    # --- one step ---------------------------------------------------------------------------------
    def on_step(self, batch_size: int, k: int, tokens: int | None, seconds: float | None) -> None:
        counted = self._attribution.add(k)  # the step before drafted at the same k
        if not 0 < batch_size < len(self._by_batch):
            return
        bucket = self.buckets[self._by_batch[batch_size]]
        bucket.steps += 1
        useful = counted and bool(tokens) and seconds is not None and seconds > 0
        if useful:
            assert tokens is not None and seconds is not None
            if bucket.exploring is not None and k == bucket.exploring:
                bucket.block[0] += tokens
                bucket.block[1] += seconds
                bucket.block[2] += 1
            elif k == bucket.k and bucket.after is not None:
                self._after_block(bucket, float(tokens), seconds)
            elif k == bucket.k:
                bucket.recent.append((float(tokens), seconds))
            measure = bucket.by_k.setdefault(k, _KMeasure())
            if measure.add(tokens, seconds, self.chunk_steps):
                self._after_chunk(bucket, k)
        if bucket.exploring is not None:
            bucket.explore_left -= 1
            if bucket.explore_left <= 0:  # the block is done: pair it, back to the bucket's k
                self._close_block(bucket)
        idle = bucket.exploring is None and bucket.after is None
        if self.mode != "observe" and bucket.verifying is None and idle:
            self._maybe_explore(bucket)

    def _close_block(self, bucket: _Bucket) -> None:
        k = bucket.exploring
        assert k is not None
        tokens, seconds, steps = bucket.block
        explored = Block(bucket.unit, k, tokens, seconds, int(steps))
        if steps and seconds > 0:
            if bucket.before is not None:
                self._pair(bucket, k, bucket.before, explored)
            else:  # the current k's steps right after the block are its pair
                bucket.after = (k, explored, [0.0, 0.0, 0])
        bucket.exploring = None
        bucket.before = None
        self._set(bucket, bucket.k)

    def _after_block(self, bucket: _Bucket, tokens: float, seconds: float) -> None:
        assert bucket.after is not None
        k, explored, sums = bucket.after
        sums[0] += tokens
        sums[1] += seconds
        sums[2] += 1
        if sums[2] >= EXPLORE_STEPS - 1:
            bucket.after = None
            self._pair(bucket, k, Block(bucket.unit, bucket.k, sums[0], sums[1], int(sums[2])), explored)

    def _pair(self, bucket: _Bucket, k: int, current: Block, explored: Block) -> None:
        bucket.units.setdefault(k, deque(maxlen=MAX_UNITS)).append((current, explored))
        if self.mode == "apply" and bucket.verifying is None:
            self._consider(bucket)

    def _maybe_explore(self, bucket: _Bucket) -> None:
        if self.share <= 0 or (bucket.explored + EXPLORE_STEPS) > self.share * bucket.steps:
            return
        options = [k for k in (bucket.k - 1, bucket.k + 1) if 0 <= k <= self.max_k]
        # A random start and a random side for its pair (the current k's steps before or after
        # it): exploring never locks onto a periodic load, and drift within a unit cancels.
        if not options or self._rng.random() >= 0.25:
            return
        before = self._rng.random() < 0.5
        if before and len(bucket.recent) < (bucket.recent.maxlen or 0):  # nothing yet to pair it with
            return
        k = min(options, key=lambda o: (len(bucket.units.get(o, ())), o))
        bucket.unit += 1
        steps = list(bucket.recent)
        bucket.before = (
            Block(bucket.unit, bucket.k, sum(t for t, _ in steps), sum(s for _, s in steps), len(steps))
            if before
            else None
        )
        bucket.recent.clear()
        bucket.block = [0.0, 0.0, 0]
        bucket.exploring = k
        bucket.explore_left = EXPLORE_STEPS
        bucket.explored += EXPLORE_STEPS
        self._set(bucket, k)

    def paired_gain(self, bucket: _Bucket, k: int) -> tuple[float, float, float] | None:
        """k's gain over the bucket's current k from its exploring blocks, each paired with the
        current k's steps just before it (:func:`specobs.advice.paired.ratio`, 95%)."""
        pairs = [p for p in bucket.units.get(k, ()) if p[0].candidate == bucket.k]
        if len(pairs) < self.min_chunks:
            return None
        r = ratio([new for _, new in pairs], [old for old, _ in pairs])
        return r.estimate - 1, r.low - 1, r.high - 1

    def _after_chunk(self, bucket: _Bucket, k: int) -> None:
        if bucket.verifying is not None:
            self._verify(bucket, k)
        elif self.mode != "explore":  # explore only gathers data; observe suggests; apply switches
            self._consider(bucket)

    def _consider(self, bucket: _Bucket) -> None:
        """The best other k whose gain over the current k clears the margin with its interval."""
        current = bucket.by_k.get(bucket.k)
        if current is None or len(current.chunks) < self.min_chunks:
            return
        best: tuple[tuple[float, float, float], int] | None = None
        for k, measure in bucket.by_k.items():
            if k == bucket.k or len(measure.chunks) < self.min_chunks:
                continue
            gain = self.paired_gain(bucket, k) if bucket.units.get(k) else _gain(measure, current)
            if gain is not None and gain[1] > self.margin and (best is None or gain[0] > best[0][0]):
                best = (gain, k)
        if best is None:
            return
        gain, k = best
        reason = TunerReason.MEASURED_FASTER
        if self.mode == "observe":
            if (bucket.k, k) not in bucket.suggested:
                bucket.suggested.add((bucket.k, k))
                self._decide(bucket, "suggest", k, reason, gain)
        else:
            self.switch(bucket.low, k, reason, gain)

    def switch(self, batch_size: int, k: int, reason: TunerReason | str = TunerReason.FORCED, predicted=None) -> None:
        """Switch the bucket holding ``batch_size`` to ``k`` and verify it over the next window
        (also how an operator or a test forces a choice)."""
        bucket = self.buckets[self._by_batch[batch_size]]
        if k == bucket.k or not 0 <= k <= self.max_k:
            return
        baseline = bucket.by_k.get(bucket.k)
        rate = math.exp(baseline.log_stats()[0]) if baseline is not None and baseline.chunks else None
        self._decide(bucket, "apply", k, reason, predicted)
        bucket.verifying = {"from_k": bucket.k, "baseline": rate, "window": _KMeasure()}
        bucket.k = k
        bucket.exploring = None
        bucket.before = bucket.after = None
        self._set(bucket, k)

    def _verify(self, bucket: _Bucket, k: int) -> None:
        state = bucket.verifying
        assert state is not None
        if k != bucket.k:
            return
        window: _KMeasure = state["window"]
        window.chunks.append(bucket.by_k[k].chunks[-1])
        if len(window.chunks) < self.min_chunks:
            return
        bucket.verifying = None
        baseline = state["baseline"]
        if baseline is None:  # nothing measured before: keep it, there is nothing to compare
            self._decide(bucket, "confirm", k, TunerReason.NO_EARLIER_MEASUREMENT)
            return
        measured = math.exp(window.log_stats()[0]) / baseline - 1
        if measured < 0:
            old = state["from_k"]
            self._decide(bucket, "rollback", old, TunerReason.WINDOW_MEASURED, measured=measured)
            bucket.by_k.pop(k, None)  # its earlier chunks promised a gain the switch did not keep
            bucket.k = old
            self._set(bucket, old)
        else:
            self._decide(bucket, "confirm", k, TunerReason.WINDOW_MEASURED, measured=measured)

    def refuse(self, reason: TunerReason | str) -> None:
        """Record that tuning is off for this engine, and why (one decision for the log; free text is
        kept as ``other``)."""
        bucket = self.buckets[0]
        self._decide(bucket, "refuse", bucket.k, reason)

    def exploration_share(self) -> float:
        steps = sum(b.steps for b in self.buckets)
        return sum(b.explored for b in self.buckets) / steps if steps else 0.0


def refusal(scheduler: Any) -> TunerReason | None:
    """Why the schedule would have no effect in this engine, or None when tuning can run."""
    config = getattr(scheduler, "vllm_config", None)
    parallel = getattr(config, "parallel_config", None)
    if int(getattr(parallel, "data_parallel_size", 1) or 1) > 1:
        return TunerReason.DATA_PARALLEL
    if os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "0") not in ("", "0"):
        return TunerReason.MODEL_RUNNER_V2
    if getattr(scheduler, "dynamic_sd_lookup", None) is None:
        return TunerReason.NO_SCHEDULE
    return None


#: What the engine's log says when tuning is off (the decision log carries the reason itself).
_OFF_LOG = {
    TunerReason.NO_SPECULATIVE_DECODING: "no speculative decoding in this engine",
    TunerReason.DATA_PARALLEL: "data parallel > 1: vLLM disables the batch-size schedule there",
    TunerReason.MODEL_RUNNER_V2: "Model Runner V2 is reported to ignore the batch-size schedule",
    TunerReason.NO_SCHEDULE: "the engine has no batch-size schedule: start it with "
    "num_speculative_tokens_per_batch_size in --speculative-config (e.g. [[1, MAX_NUM_SEQS, K]])",
}


def start(config: CaptureConfig, scheduler: Any, labels: dict[str, Any], recorder: Any) -> OnlineTuner | None:
    """The online tuner of one engine (``Wiring.tuner``), or None with the reason logged and, when
    the engine cannot be tuned, a ``refuse`` decision recorded."""
    mode = config.online_tuner
    if mode not in MODES:
        logger.warning("specobs: SPECOBS_ONLINE_TUNER=%s: expected observe, explore or apply; online tuning off", mode)
        return None
    max_k = int(getattr(scheduler, "num_spec_tokens", 0) or 0)
    reason = TunerReason.NO_SPECULATIVE_DECODING if max_k <= 0 else refusal(scheduler)
    if reason is not None:
        logger.warning("specobs: online tuning off: %s", _OFF_LOG.get(reason, reason))
        largest = int(getattr(getattr(scheduler, "scheduler_config", None), "max_num_seqs", 1) or 1)
        refused = TunerDecision(time.time(), 1, largest, "refuse", max_k, max_k, None, None, None, None, reason,
                                labels.get("run_id"), labels.get("engine"))  # fmt: skip
        recorder.record(refused.to_row())
        return None
    tuner = OnlineTuner(
        mode, scheduler.dynamic_sd_lookup, max_k, share=config.online_tuner_share,
        chunk_steps=config.online_tuner_chunk_steps, run_id=labels.get("run_id"), engine=labels.get("engine"),
        # Under async scheduling the scheduler runs a step ahead: two steps after a switch mix ks.
        lag=2 if getattr(getattr(scheduler, "scheduler_config", None), "async_scheduling", False) else 1,
    )  # fmt: skip
    logger.info("specobs: online tuning on (%s, k up to %d, %.0f%% of steps may explore)", mode, max_k,
                100 * tuner.share)  # fmt: skip
    return tuner
