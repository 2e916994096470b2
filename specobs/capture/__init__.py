"""Capture: record engine steps inside a serving engine and write them as ``steps`` rows.

``recorder`` (the non-blocking hand-off), ``timing`` (host and device clocks), ``sinks``
(event files), ``config`` (environment variables) are engine-agnostic; ``vllm`` holds the
vLLM plugin, hooks and stat logger.
"""

from specobs.capture.recorder import NullRecorder, Recorder
from specobs.capture.row import StepRow
from specobs.capture.sinks import JsonlSink, MemorySink, ParquetSink

__all__ = ["JsonlSink", "MemorySink", "NullRecorder", "ParquetSink", "Recorder", "StepRow"]
