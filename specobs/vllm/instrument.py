"""Capture for an offline ``LLM`` in this process (``specobs.vllm.instrument`` wires the rest)."""

from __future__ import annotations

import logging
from typing import Any

from specobs.capture.config import CaptureConfig
from specobs.capture.recorder import Recorder, Sink
from specobs.vllm import hooks

logger = logging.getLogger("specobs")


def instrument_engine(
    llm: Any = None,
    sink: Sink | None = None,
    *,
    config: CaptureConfig | None = None,
    wiring: hooks.Wiring | None = None,
) -> hooks.Capture:
    """Install the hooks in this process and send rows to ``sink`` (default: event files per env).

    The hooks live in the process that runs the engine core: an offline ``LLM`` runs it in this
    process when ``VLLM_ENABLE_V1_MULTIPROCESSING=0``. ``wiring`` plugs in the online tuner.
    """
    config = config or CaptureConfig.from_env()
    recorder = Recorder([sink if sink is not None else config.sink()], capacity=config.queue_size)
    capture = hooks.install(config, recorder, wiring=wiring)
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if client is not None and "Inproc" not in type(client).__name__:
        logger.warning(
            "specobs: this LLM runs its engine core in another process; instrument() cannot reach it. "
            "Set SPECOBS_ENABLE=1 (and SPECOBS_DIR) before creating the LLM instead."
        )
    return capture
