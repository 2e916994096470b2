"""Clocks for the engine's hot path: host wall time, or device events read later.

On a GPU (CUDA or ROCm/HIP: the same ``torch.cuda.Event`` API serves both) a span is two
events recorded on the current stream; nothing synchronises the stream. The recorder's
background thread asks ``end.query()`` whether the device got there yet and only then reads
``start.elapsed_time(end)``. On a CPU a span is two ``time.perf_counter()`` readings.

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
from collections.abc import Callable
from typing import Any, Protocol


class Span(Protocol):
    def stop(self) -> None: ...

    def seconds(self) -> float | None:
        """Elapsed seconds, or None while not yet known (device still busy)."""
        ...


class _HostSpan:
    __slots__ = ("_elapsed", "_start")

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
    __slots__ = ("_end", "_start")

    def __init__(self, make_event: Callable[[], Any]) -> None:
        self._start = make_event()
        self._end = make_event()
        self._start.record()

    def stop(self) -> None:
        self._end.record()

    def seconds(self) -> float | None:
        if not self._end.query():  # not yet reached by the device: ask again later
            return None
        return self._start.elapsed_time(self._end) / 1000.0  # milliseconds → seconds


class DeviceClock:
    """Device-event spans recorded on the current stream, resolved without synchronising.

    ``make_event`` builds an event with timing enabled; by default
    ``torch.cuda.Event(enable_timing=True)`` (CUDA and ROCm). Tests pass a fake.
    """

    kind = "device"

    def __init__(self, make_event: Callable[[], Any] | None = None) -> None:
        if make_event is None:
            import torch

            def make_event() -> Any:
                return torch.cuda.Event(enable_timing=True)

        self._make_event = make_event

    def start(self) -> _DeviceSpan:
        return _DeviceSpan(self._make_event)


def clock_for_device() -> HostClock | DeviceClock:
    """Device events when a CUDA/ROCm device is in use, host time otherwise."""
    try:
        import torch

        if torch.cuda.is_available():
            return DeviceClock()
    except Exception:  # no torch, or a broken CUDA install: host time still works
        pass
    return HostClock()
