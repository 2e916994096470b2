"""Capture: record engine steps inside a serving engine and write them as ``steps`` rows.

Engine-agnostic: ``recorder`` (the non-blocking hand-off: bounded, drops and counts, never
raises), ``row`` (the typed row), ``timing`` (host and device clocks), ``handoff`` (step timing
measured in a worker process, handed to the engine core with the step's output), ``sinks``
(event files, memory) and ``config`` (environment variables). Everything that knows vLLM
(plugin, hooks, stat logger, config and metrics knowledge) is in :mod:`specobs.vllm`.
"""

from specobs.capture.recorder import NullRecorder, Recorder
from specobs.capture.row import StepRow
from specobs.capture.sinks import JsonlSink, MemorySink, ParquetSink

__all__ = ["JsonlSink", "MemorySink", "NullRecorder", "ParquetSink", "Recorder", "StepRow"]
