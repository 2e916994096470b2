"""Presenting results: one dispatch keyed by result type and output format.

``emit(result, fmt)`` writes a :mod:`specobs.results` object to stdout as rich tables, one JSON
object (``result.to_dict()``, the JSON contract) or Markdown, and refuses a format it has no
renderer for. No math here: renderers read attributes and word them (``sentences``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

from specobs.errors import SpecobsError
from specobs.results import Comparison, Recommendation, Report, Result

FORMATS = ("rich", "json", "markdown")


def to_json(result: Result) -> str:
    """The JSON contract: exactly ``result.to_dict()`` (no NaN or infinities)."""
    return json.dumps(result.to_dict(), indent=2, allow_nan=False)


def _renderers() -> dict[tuple[type, str], Callable[..., str | None]]:
    from specobs.render import report, tuning

    return {
        (Report, "rich"): lambda r, console, names: report.to_rich(r, console),
        (Report, "markdown"): lambda r, console, names: report.to_markdown(r),
        (Recommendation, "rich"): lambda r, console, names: tuning.recommendation_to_rich(r, console),
        (Recommendation, "markdown"): lambda r, console, names: tuning.recommendation_to_markdown(r),
        (Comparison, "rich"): lambda r, console, names: tuning.comparison_to_rich(r, console, names),
        (Comparison, "markdown"): lambda r, console, names: tuning.comparison_to_markdown(r, names),
    }


def can_render(kind: type, fmt: str) -> bool:
    return fmt == "json" or (kind, fmt) in _renderers()


def emit(result: Result, fmt: str, *, console: Console | None = None, names: tuple[str, str] = ("A", "B")) -> None:
    """Write ``result`` in ``fmt`` to stdout (``names``: what a comparison's two sides are called)."""
    if fmt == "json":
        sys.stdout.write(to_json(result) + "\n")
        return
    renderer = _renderers().get((type(result), fmt))
    if renderer is None:
        raise SpecobsError(f"--format {fmt} is not available for this command (use one of: {_available(result)})")
    text = renderer(result, console or Console(), names)
    if text is not None:
        sys.stdout.write(text)


def _available(result: Any) -> str:
    return ", ".join(f for f in FORMATS if can_render(type(result), f))


__all__ = ["FORMATS", "can_render", "emit", "to_json"]
