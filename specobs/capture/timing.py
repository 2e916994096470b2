"""Clocks for the engine's hot path: host wall time, or device events read later.

On a GPU (CUDA or ROCm/HIP: the same ``torch.cuda.Event`` API serves both) a span is two
events recorded on the current stream; nothing synchronises the stream. The recorder's
background thread asks ``end.query()`` whether the device got there yet and only then reads
``start.elapsed_time(end)``. On a CPU a span is two ``time.perf_counter()`` readings.

Events are never recorded while the stream is being captured into a graph: HIP refuses an
event record inside a capture (CUDA tolerates it, but the event then belongs to the graph,
not to the step). The hooks time runner calls that replay graphs, so their events sit
around the replay, outside any capture; should a hooked call ever run inside a capture (a
warm-up, a future vLLM), that span falls back to the host clock, with no synchronisation
added, and says so: every span has a ``clock`` (``device`` or ``host``), and each step row
records which clock its timings used (``timing_clock``: ``device``, ``host`` or ``mixed``).

A span is started and stopped on the engine thread (cheap: two event records or two clock
reads) and resolved to seconds later, off the hot path::

    clock = clock_for_device()
    span = clock.start()
    ...  # engine work
    span.stop()
    seconds = span.seconds()   # None while a device span is still in flight
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol


class Span(Protocol):
    def stop(self) -> None: ...

    def seconds(self) -> float | None:
        """Elapsed seconds, or None while not yet known (device still busy)."""
        ...


class _HostSpan:
    __slots__ = ("_elapsed", "_start")
    clock = "host"

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._elapsed: float | None = None

    def stop(self) -> None:
        self._elapsed = time.perf_counter() - self._start

    def seconds(self) -> float | None:
        return self._elapsed


class HostClock:
    """``time.perf_counter`` spans: exact on CPU, where work is synchronous."""

    kind = "host"

    def start(self) -> _HostSpan:
        return _HostSpan()


class _DeviceSpan:
    __slots__ = ("_capturing", "_end", "_host", "_start", "clock")

    def __init__(self, make_event: Callable[[], Any], capturing: Callable[[], bool]) -> None:
        self._capturing = capturing
        self._start = make_event()
        self._end = make_event()
        self._host: _HostSpan | None = _HostSpan()
        self._start.record()
        self.clock = "device"

    def stop(self) -> None:
        host = self._host
        if _capturing(self._capturing):  # stopped inside a capture: the end event cannot be recorded
            self.clock = "host"
            if host is not None:
                host.stop()
            return
        self._end.record()
        self._host = None

    def seconds(self) -> float | None:
        if self._host is not None:
            return self._host.seconds()
        if not self._end.query():  # not yet reached by the device: ask again later
            return None
        return self._start.elapsed_time(self._end) / 1000.0  # milliseconds → seconds


def _capturing(is_capturing: Callable[[], bool]) -> bool:
    """Whether the current stream is capturing a graph; True when that cannot be told (never
    risk an event record inside a capture)."""
    try:
        return bool(is_capturing())
    except Exception:
        return True


class DeviceClock:
    """Device-event spans recorded on the current stream, resolved without synchronising.

    ``make_event`` builds an event with timing enabled; by default
    ``torch.cuda.Event(enable_timing=True)`` (CUDA and ROCm). ``is_capturing`` tells whether
    the current stream is capturing a graph; by default ``torch.cuda.is_current_stream_capturing``.
    A span started during a capture is a host span (``host_spans`` counts them). Tests pass fakes.
    """

    kind = "device"

    def __init__(
        self, make_event: Callable[[], Any] | None = None, is_capturing: Callable[[], bool] | None = None
    ) -> None:
        if make_event is None or is_capturing is None:
            import torch

            if make_event is None:

                def make_event() -> Any:
                    return torch.cuda.Event(enable_timing=True)

            if is_capturing is None:
                is_capturing = torch.cuda.is_current_stream_capturing
        self._make_event = make_event
        self._is_capturing = is_capturing
        self.host_spans = 0

    def start(self) -> _DeviceSpan | _HostSpan:
        if _capturing(self._is_capturing):
            self.host_spans += 1
            return _HostSpan()
        return _DeviceSpan(self._make_event, self._is_capturing)


def clock_of(*groups: Sequence[Any]) -> str | None:
    """``device``, ``host`` or ``mixed``: the clocks the spans of ``groups`` used (None without
    spans). Runs once per step on the engine thread: no list or set is built."""
    first: str | None = None
    for spans in groups:
        for span in spans:
            kind = getattr(span, "clock", "host")
            if first is None:
                first = kind
            elif kind != first:
                return "mixed"
    return first


def clock_for_device() -> HostClock | DeviceClock:
    """Device events when a CUDA/ROCm device is in use, host time otherwise."""
    try:
        import torch

        if torch.cuda.is_available():
            return DeviceClock()
    except Exception:  # no torch, or a broken CUDA install: host time still works
        pass
    return HostClock()
