"""The recorder: engine threads hand it rows; a background thread writes them to sinks.

Rules it keeps, so that instrumentation can never hurt the engine:

- ``record()`` never blocks and never raises: a bounded deque takes the row, or the row is
  dropped and counted in ``dropped_events`` when the deque is full (a slow or stuck sink
  fills it; the engine goes on).
- Rows are :class:`~specobs.capture.row.StepRow` objects (the hooks) or dicts of ``steps``
  columns (other producers); the flush thread turns a ``StepRow`` into a dict
  (``to_dict()``), so sinks always receive dicts and the engine thread never builds one.
- Timings may still be in flight on the device when a row is recorded (see ``timing``);
  the flush thread resolves them later, in the row's dict, and keeps it back until it can.
- Everything specobs does is wrapped; an exception is counted (``hook_errors`` for hooks,
  ``sink_errors`` for sinks), logged once per place, and never re-raised into vLLM.
- Rows are flushed at most ``flush_interval`` seconds apart (default 1 s) and at exit;
  closing waits a bounded time for a stuck sink and then gives up.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from specobs.capture.row import StepRow

logger = logging.getLogger("specobs")

#: Rows whose device timings are still unresolved after this long get null timings.
PENDING_TIMEOUT_SECONDS = 30.0


class Sink(Protocol):
    """Where rows go: event files, an exporter, a list in a test."""

    def write(self, rows: Sequence[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...


class Recorder:
    """Bounded, non-blocking hand-off from the engine to sinks (see the module docstring)."""

    def __init__(
        self,
        sinks: Iterable[Sink],
        *,
        capacity: int = 65536,
        flush_interval: float = 1.0,
        close_timeout: float = 5.0,
    ) -> None:
        self.sinks = list(sinks)
        self.capacity = capacity
        self.flush_interval = min(flush_interval, 1.0)
        self.close_timeout = close_timeout
        self.dropped_events = 0
        self.hook_errors = 0
        self.sink_errors = 0
        self.unresolved_timings = 0
        self.untimed_steps = 0  # steps that ran and were written without their verify time (never arrived)
        self.rows_written = 0
        self._queue: deque[StepRow | dict[str, Any]] = deque()
        self._pending: list[tuple[float, dict[str, Any]]] = []
        self._warned: set[str] = set()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._flush_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="specobs-recorder", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    # --- engine side: cheap, never blocks, never raises -------------------------------
    def record(self, row: StepRow | dict[str, Any]) -> None:
        """Queue one row (a ``StepRow``, or a dict of steps columns; timing values may be spans)."""
        if len(self._queue) >= self.capacity:
            self.dropped_events += 1
            return
        self._queue.append(row)

    def error(self, where: str, exc: BaseException) -> None:
        """Count a failure inside specobs at ``where`` and log it once."""
        self.hook_errors += 1
        self._warn_once(where, f"specobs: {where} failed and was skipped ({type(exc).__name__}: {exc})")

    def warn_once(self, key: str, message: str) -> None:
        self._warn_once(key, message)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message)

    @property
    def counters(self) -> dict[str, int]:
        """Health counters, for exporters and tests."""
        return {
            "dropped_events": self.dropped_events,
            "hook_errors": self.hook_errors,
            "sink_errors": self.sink_errors,
            "unresolved_timings": self.unresolved_timings,
            "untimed_steps": self.untimed_steps,
            "rows_written": self.rows_written,
            "queued": len(self._queue),
        }

    # --- flush side: the background thread ----------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            self.flush()

    def flush(self, *, final: bool = False) -> None:
        """Resolve timings and write every ready row to every sink."""
        with self._flush_lock:
            now = time.monotonic()
            batch: list[tuple[float, StepRow | dict[str, Any]]] = list(self._pending)
            self._pending = []
            while self._queue:
                batch.append((now, self._queue.popleft()))
            ready: list[dict[str, Any]] = []
            for queued_at, item in batch:
                try:
                    row = item.to_dict() if isinstance(item, StepRow) else item  # converted once: pending keeps it
                    if _resolve(row, force=final or now - queued_at > PENDING_TIMEOUT_SECONDS, recorder=self):
                        ready.append(row)
                    else:
                        self._pending.append((queued_at, row))
                except Exception as exc:  # a broken span: drop the row, keep going
                    self.dropped_events += 1
                    self.error("resolving timings", exc)
            if ready:
                self._write(ready)

    def _write(self, rows: list[dict[str, Any]]) -> None:
        for sink in self.sinks:
            try:
                sink.write(rows)
            except Exception as exc:
                self.sink_errors += 1
                self.dropped_events += len(rows)
                self._warn_once(f"sink {type(sink).__name__}", f"specobs: sink {type(sink).__name__} failed: {exc}")
        self.rows_written += len(rows)

    def close(self) -> None:
        """Flush what is left and close the sinks, waiting at most ``close_timeout`` seconds."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()

        def final() -> None:
            self._thread.join(self.close_timeout)
            self.flush(final=True)
            for sink in self.sinks:
                try:
                    sink.close()
                except Exception as exc:
                    self.sink_errors += 1
                    self._warn_once(f"close {type(sink).__name__}", f"specobs: closing a sink failed: {exc}")

        closer = threading.Thread(target=final, name="specobs-close", daemon=True)
        closer.start()
        closer.join(self.close_timeout * 2)


def _resolve(row: dict[str, Any], *, force: bool, recorder: Recorder) -> bool:
    """Turn span values into seconds in place; False when a device span is still in flight.

    ``row`` is the flush thread's own dict (a ``StepRow``'s ``to_dict()``, or a dict handed to
    ``record``), so the row objects the engine built are never changed. A span may say it is
    ``empty`` (resolved: that part did not run, null without counting) or ``expired`` (its
    seconds can no longer come: null and counted at once, without waiting for the timeout).
    """
    for key, value in row.items():
        if isinstance(value, list | tuple) and value and hasattr(value[0], "seconds"):
            parts = [span.seconds() for span in value]
            if any(p is None for p in parts):
                if all(getattr(span, "empty", False) for span in value):  # known now: that part did not run
                    row[key] = None
                    continue
                if not force and not any(getattr(span, "expired", False) for span in value):
                    return False
                recorder.unresolved_timings += 1
                if key == "verify_seconds":  # the step itself goes untimed
                    recorder.untimed_steps += 1
                row[key] = None
            else:
                row[key] = float(sum(parts))
    return True


class NullRecorder:
    """What hooks talk to when capture is off: the same methods, doing nothing."""

    dropped_events = hook_errors = sink_errors = unresolved_timings = untimed_steps = rows_written = 0

    @property
    def counters(self) -> dict[str, int]:
        return {}

    def record(self, row: StepRow | dict[str, Any]) -> None:
        pass

    def error(self, where: str, exc: BaseException) -> None:
        pass

    def warn_once(self, key: str, message: str) -> None:
        pass

    def flush(self, *, final: bool = False) -> None:
        pass

    def close(self) -> None:
        pass
