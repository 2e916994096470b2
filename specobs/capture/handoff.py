"""Step timing measured in a worker process, handed to the engine core with the step's own output.

At tensor or pipeline parallel size > 1, vLLM runs the model runner in worker processes while the
scheduler, which finishes each step's row, runs in the engine core. The worker whose output the
engine core reads (the *output rank*: tensor-parallel rank 0 of the last pipeline stage, vLLM's
``MultiprocExecutor._get_output_rank``) times draft and verify exactly as the hooks do in one
process, and attaches the seconds to the step's ``ModelRunnerOutput``. That object travels to the
engine core every step anyway (pickled through vLLM's message queue), so nothing new is sent,
nothing waits, and no socket or thread is added. Other ranks attach the same to outputs vLLM
drops.

Joining: when the engine core schedules a step it stamps the ``SchedulerOutput`` with a step
number (:data:`STEP_ATTR`); the stamp travels to the workers inside that object, and their timing
comes back keyed by it::

    worker = WorkerTiming()
    worker.finish(7, draft=[span_a], verify=[span_b, span_c])
    payload = worker.payload()        # (((7, 0.0021, 0.0113, "host"),), 0, None): seconds, never spans
    joiner = Joiner()
    delivered = joiner.receive(payload)   # {7: (0.0021, 0.0113, "host")}

A device span still in flight when its output leaves goes out with a later output. Until then the
engine core's row holds a :class:`LateSpan` in its place, which the recorder waits for as it waits
for any device span; one that cannot come any more (evicted, or the worker restarted) is
``expired``, and the row is written untimed and counted, never guessed.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any

from specobs.capture.timing import clock_of

#: Attribute of a ``SchedulerOutput`` holding the engine core's step number (travels to workers).
STEP_ATTR = "_specobs_step"
#: Attribute of a ``ModelRunnerOutput`` holding the worker's timing payload (travels back).
HANDOFF_ATTR = "_specobs_timing"
#: Steps a worker keeps while their device spans are in flight, and the engine core keeps
#: waiting for; beyond that the oldest are given up (and counted).
MAX_WAITING = 256

#: One step's timing on the wire: (step, draft seconds, verify seconds, clock); None: not run.
Entry = tuple[int, float | None, float | None, str | None]
#: What rides on an output: the entries, the worker's error count so far, its facts (first time only).
Payload = tuple[tuple[Entry, ...], int, "dict[str, Any] | None"]
#: Longest text kept from a worker's facts (labels, never payloads).
MAX_FACT_CHARS = 256

_PENDING = object()


def stamp(scheduler_output: Any, step: int) -> bool:
    """Mark a ``SchedulerOutput`` with its step number; False when the object takes no attribute
    (a future vLLM with slots): steps are then joined in this process only."""
    attrs = getattr(scheduler_output, "__dict__", None)
    if attrs is None:
        return False
    attrs[STEP_ATTR] = step
    return True


def stamp_of(scheduler_output: Any) -> int | None:
    """The step number a ``SchedulerOutput`` carries, or None."""
    attrs = getattr(scheduler_output, "__dict__", None)
    step = attrs.get(STEP_ATTR) if attrs is not None else None
    return step if type(step) is int else None


def _seconds(spans: Sequence[Any]) -> Any:
    """Sum of the spans' seconds; None without spans; ``_PENDING`` while one is in flight."""
    if not spans:
        return None
    total = 0.0
    for span in spans:
        seconds = span.seconds()
        if seconds is None:
            return _PENDING
        total += seconds
    return total


class WorkerTiming:
    """Worker side: each finished step's spans, sent as seconds with the next output that leaves."""

    __slots__ = ("_sent_errors", "_unsent", "dropped", "errors", "facts")

    def __init__(self) -> None:
        self._unsent: deque[tuple[int, Sequence[Any], Sequence[Any]]] = deque()
        self.errors = 0  # specobs failures in this worker, sent along (the engine core counts them)
        self._sent_errors = 0
        self.dropped = 0  # steps given up while their spans stayed in flight
        self.facts: dict[str, Any] | None = None  # what the engine core's run metadata needs from here, sent once

    def finish(self, step: int, draft: Sequence[Any], verify: Sequence[Any]) -> None:
        self._unsent.append((step, draft, verify))
        while len(self._unsent) > MAX_WAITING:
            self._unsent.popleft()
            self.dropped += 1

    def payload(self) -> Payload | None:
        """Every step whose spans have resolved (oldest first), this worker's error count and, the
        first time, its facts; None when there is nothing new to send."""
        entries: list[Entry] = []
        keep: deque[tuple[int, Sequence[Any], Sequence[Any]]] = deque()
        for step, draft, verify in self._unsent:
            d, v = _seconds(draft), _seconds(verify)
            if d is _PENDING or v is _PENDING:
                keep.append((step, draft, verify))
            else:
                entries.append((step, d, v, clock_of(draft, verify)))
        self._unsent = keep
        if not entries and self.errors == self._sent_errors and self.facts is None:
            return None
        facts, self.facts, self._sent_errors = self.facts, None, self.errors
        return tuple(entries), self.errors, facts


class LateSpan:
    """Seconds that a worker will send with a later output (the recorder's span protocol).

    ``seconds()`` is None while they have not come; ``empty`` once they came and the step did
    not run this part (no draft); ``expired`` once they can no longer come."""

    __slots__ = ("_seconds", "clock", "empty", "expired")

    def __init__(self) -> None:
        self._seconds: float | None = None
        self.clock: str | None = None
        self.empty = False
        self.expired = False

    def seconds(self) -> float | None:
        return self._seconds

    def arrive(self, seconds: float | None, clock: str | None) -> None:
        self.clock = clock
        if seconds is None:
            self.empty = True
        else:
            self._seconds = seconds


def _seconds_value(x: Any) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x >= 0.0


def _entry(item: Any) -> Entry | None:
    """One entry of a payload from another process, checked (None: malformed, ignored)."""
    if not isinstance(item, tuple) or len(item) != 4:
        return None
    step, draft, verify, clock = item
    if type(step) is not int or not all(x is None or _seconds_value(x) for x in (draft, verify)):
        return None
    return step, draft, verify, clock if isinstance(clock, str) else None


def _facts(raw: dict[Any, Any]) -> dict[str, Any]:
    """A worker's facts, kept only where they are short strings, small integers or string lists."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            continue
        if isinstance(value, str):
            out[key] = value[:MAX_FACT_CHARS]
        elif type(value) is int:
            out[key] = value
        elif isinstance(value, list):
            out[key] = [v[:MAX_FACT_CHARS] for v in value[:32] if isinstance(v, str)]
    return out


class Joiner:
    """Engine-core side: payloads in, each step's seconds out; rows waiting for late seconds."""

    __slots__ = ("_awaiting", "clock", "errors", "facts", "seen")

    def __init__(self) -> None:
        self._awaiting: OrderedDict[int, tuple[LateSpan, LateSpan]] = OrderedDict()
        self.seen = False  # a worker has sent timing: a step without it waits for a later output
        self.clock: str | None = None  # the clock of the latest seconds received
        self.errors = 0  # the worker's error count as last received
        self.facts: dict[str, Any] | None = None  # the worker's facts (attention backends, ranks, missing hooks)

    def receive(self, payload: Any) -> dict[int, tuple[float | None, float | None, str | None]]:
        """The seconds of steps not yet waiting, by step; steps already waiting get theirs."""
        if not isinstance(payload, tuple) or len(payload) != 3 or not isinstance(payload[0], tuple):
            return {}
        self.seen = True
        if type(payload[1]) is int:
            self.errors = payload[1]
        if isinstance(payload[2], dict):
            self.facts = _facts(payload[2])
        out: dict[int, tuple[float | None, float | None, str | None]] = {}
        for item in payload[0]:
            entry = _entry(item)
            if entry is None:
                continue
            step, draft, verify, clock = entry
            self.clock = clock or self.clock
            waiting = self._awaiting.pop(step, None)
            if waiting is None:
                out[step] = (draft, verify, clock)
            else:
                waiting[0].arrive(draft, clock)
                waiting[1].arrive(verify, clock)
        return out

    def wait_for(self, step: int) -> tuple[LateSpan, LateSpan]:
        """Place-holders (draft, verify) for a step whose seconds are still on their way."""
        spans = self._awaiting[step] = (LateSpan(), LateSpan())
        while len(self._awaiting) > MAX_WAITING:
            _, (draft, verify) = self._awaiting.popitem(last=False)
            draft.expired = verify.expired = True
        return spans


__all__ = ["HANDOFF_ATTR", "MAX_WAITING", "STEP_ATTR", "Entry", "Joiner", "LateSpan", "Payload", "WorkerTiming",
           "stamp", "stamp_of"]  # fmt: skip
