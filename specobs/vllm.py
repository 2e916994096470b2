"""``specobs.vllm``: capture for vLLM — ``instrument(llm, sink=...)`` and ``StatLogger``.

See docs/vllm.md. ``StatLogger`` imports vLLM; ``instrument`` imports it when called.
"""

from __future__ import annotations

from typing import Any

from specobs.capture.vllm import instrument

__all__ = ["StatLogger", "instrument"]  # noqa: F822 - StatLogger is loaded lazily


def __getattr__(name: str) -> Any:
    if name == "StatLogger":
        from specobs.capture.vllm.stat_logger import StatLogger

        return StatLogger
    raise AttributeError(name)
