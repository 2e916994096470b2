"""``specobs.vllm``: everything that knows vLLM's internals, and the plugin vLLM loads.

This ``__init__`` is the entry point: the general plugin (``register``), ``instrument(llm,
sink=...)`` for an offline ``LLM``, and ``StatLogger``. It wires the capture to what sits above
it: the exporters (``SPECOBS_PROMETHEUS``, ``SPECOBS_OTEL``) and the online tuner
(``SPECOBS_ONLINE_TUNER``), through :class:`specobs.vllm.hooks.Wiring`. See docs/vllm.md.
Importing it does not import vLLM; ``StatLogger`` does (it subclasses vLLM's
``StatLoggerBase``), so it is loaded on first use. Without ``SPECOBS_ENABLE`` the plugin returns
at once: nothing is patched or started.

The room's other modules produce rows like :mod:`specobs.capture` (a lower layer than this
``__init__``): ``hooks`` (the capture inside the engine core), ``hookpoints`` (every place the
hooks patch, as data), ``instrument`` (an offline engine in this process), ``stat_logger``
(acceptance from vLLM's own stats, without hooks), ``engine_metadata`` (run metadata read from
the engine), ``spec_config`` (vLLM's ``SpeculativeConfig`` from specobs's side), ``releases``
(a release's source checked against what specobs uses) and ``metric_series`` (vLLM's
Prometheus series that specobs reads).
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import TYPE_CHECKING, Any

from specobs.capture.config import SPECOBS_RUN_ID, CaptureConfig

if TYPE_CHECKING:
    from specobs.capture.recorder import Sink
    from specobs.vllm import hooks

logger = logging.getLogger("specobs")


def wiring() -> hooks.Wiring:
    """The capture with everything plugged in: event files and exporters, and the online tuner."""
    # Imported on use (all below this module): every vLLM process loads the plugin, and one
    # without SPECOBS_ENABLE must not pay for polars, prometheus_client or the tuner.
    from specobs.exporters.wiring import capture_sinks
    from specobs.loops import online
    from specobs.vllm import hooks

    return hooks.Wiring(sinks=capture_sinks, tuner=online.start)


def register() -> None:
    """vLLM general plugin (entry point ``vllm.general_plugins``), loaded in every vLLM process:
    install the hooks when ``SPECOBS_ENABLE`` is set (idempotent). Only the engine-core process
    (where the scheduler and the model run) produces rows; its recorder starts on the first row."""
    config = CaptureConfig.from_env()
    if not config.enabled or not config.hooks or (config.workers_only and not _worker_process()):
        return
    # Engine-core processes start from this one: let them share its run id.
    os.environ.setdefault(SPECOBS_RUN_ID.name, config.run_id)
    try:
        from specobs.vllm import hooks

        hooks.install(config, wiring=wiring())
    except Exception as exc:  # never break vLLM's start-up
        logger.warning("specobs: capture not started (%s: %s)", type(exc).__name__, exc)


def _worker_process() -> bool:
    """Whether this is one of vLLM's worker processes (``MultiprocExecutor`` names them ``VllmWorker-<rank>``)."""
    import multiprocessing

    return multiprocessing.current_process().name.startswith("VllmWorker")


def instrument(llm: Any = None, sink: Sink | None = None, *, config: CaptureConfig | None = None) -> hooks.Capture:
    """Install the hooks in this process and send rows to ``sink`` (default: event files per env).

    The hooks live in the process that runs the engine core. An offline ``LLM`` runs it in
    this process when ``VLLM_ENABLE_V1_MULTIPROCESSING=0``; otherwise set ``SPECOBS_ENABLE=1``
    before creating the ``LLM`` so the plugin installs them in the engine-core process. At tensor
    or pipeline parallel the model runs in worker processes: set ``SPECOBS_ENABLE=workers``
    before creating the ``LLM`` so that they time the steps and hand the seconds over.
    Returns the capture state (``.recorder.flush()``, ``.recorder.counters``).
    """
    from specobs.vllm.instrument import instrument_engine

    return instrument_engine(llm, sink, config=config, wiring=wiring())


def __getattr__(name: str) -> Any:
    if name in ("StatLogger", "PluginStatLogger"):
        return getattr(importlib.import_module("specobs.vllm.stat_logger"), name)
    raise AttributeError(name)


__all__ = ["StatLogger", "instrument", "register", "wiring"]
