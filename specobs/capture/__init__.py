"""Capture: record engine steps inside a serving engine and write them as ``steps`` rows.

``recorder`` (the non-blocking hand-off), ``timing`` (host and device clocks), ``sinks``
(event files), ``config`` (environment variables) are engine-agnostic; everything that knows
vLLM (plugin, hooks, stat logger, config and metrics knowledge) is in :mod:`specobs.vllm`.
"""

from specobs.capture.recorder import NullRecorder, Recorder
from specobs.capture.row import StepRow
from specobs.capture.sinks import JsonlSink, MemorySink, ParquetSink

__all__ = ["JsonlSink", "MemorySink", "NullRecorder", "ParquetSink", "Recorder", "StepRow"]
