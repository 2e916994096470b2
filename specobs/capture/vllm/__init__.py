"""vLLM integration: the general plugin, the hooks, ``instrument()`` and the stat logger.

Importing this package does not import vLLM; ``StatLogger`` does (it subclasses vLLM's
``StatLoggerBase``), so it is loaded on first use.
"""

from __future__ import annotations

from typing import Any

from specobs.capture.vllm.instrument import instrument

__all__ = ["StatLogger", "instrument"]


def __getattr__(name: str) -> Any:
    if name in ("StatLogger", "PluginStatLogger"):
        from specobs.capture.vllm import stat_logger

        return getattr(stat_logger, name)
    raise AttributeError(name)
