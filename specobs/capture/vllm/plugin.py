"""vLLM general plugin (entry point ``vllm.general_plugins``), loaded in every vLLM process.

Without ``SPECOBS_ENABLE`` it returns at once: nothing is imported, patched or started.
With it, the hooks are installed in this process; only the engine-core process (where the
scheduler and the model run) produces rows, and its recorder starts on the first row.
"""

from __future__ import annotations

import os


def register() -> None:
    """Entry point: install the hooks when ``SPECOBS_ENABLE`` is set (idempotent)."""
    from specobs.capture.config import SPECOBS_RUN_ID, CaptureConfig

    config = CaptureConfig.from_env()
    if not config.enabled or not config.hooks:
        return
    # Engine-core processes start from this one: let them share its run id.
    os.environ.setdefault(SPECOBS_RUN_ID.name, config.run_id)
    try:
        from specobs.capture.vllm import hooks

        hooks.install(config)
    except Exception as exc:  # never break vLLM's start-up
        import logging

        logging.getLogger("specobs").warning("specobs: capture not started (%s: %s)", type(exc).__name__, exc)
