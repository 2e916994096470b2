"""Presenting results: one dispatch keyed by result type and output format.

``emit(result, fmt)`` writes a :mod:`specobs.results` object to stdout as rich tables, one JSON
object (``result.to_dict()``, the JSON contract) or Markdown, and refuses a format it has no
renderer for. No math here: renderers read attributes and word them (``sentences``).
"""

from __future__ import annotations

import errno
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

from specobs.errors import SpecobsError
from specobs.results import Comparison, Recommendation, Report, Result, TuneResult

FORMATS = ("rich", "json", "markdown")
#: Width of rich tables when stdout is not a terminal (a pipe, a file) and ``COLUMNS`` is unset:
#: wide enough that no column is truncated, instead of rich's default of 80.
PIPE_WIDTH = 200


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by ``None`` (JSON ``null``); nothing rounded."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def to_json(result: Result) -> str:
    """The JSON contract: ``result.to_dict()``, with any NaN or infinity written as ``null``
    (strict JSON never holds them; a corrupt input must not make the writer fail)."""
    return json.dumps(_finite(result.to_dict()), indent=2, allow_nan=False)


class _StdoutConsole(Console):
    """Rich's console, except that a reader who stops reading (``specobs report ... | head``) ends
    the command quietly with status 0 (rich's own default is status 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "broken pipe")  # the CLI exits 0 on it, quietly


def stdout_console() -> Console:
    """The console rich output goes to: the terminal's width on a terminal, else ``COLUMNS`` if
    set, else :data:`PIPE_WIDTH`."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return _StdoutConsole()
    return _StdoutConsole(width=PIPE_WIDTH)


def _renderers() -> dict[tuple[type, str], Callable[..., str | None]]:
    from specobs.render import report, tuning

    return {
        (Report, "rich"): lambda r, console, names, brief: report.to_rich(r, console, brief=brief),
        (Report, "markdown"): lambda r, console, names, brief: report.to_markdown(r, brief=brief),
        (Recommendation, "rich"): lambda r, console, names, brief: tuning.recommendation_to_rich(r, console),
        (Recommendation, "markdown"): lambda r, console, names, brief: tuning.recommendation_to_markdown(r),
        (Comparison, "rich"): lambda r, console, names, brief: tuning.comparison_to_rich(r, console, names),
        (Comparison, "markdown"): lambda r, console, names, brief: tuning.comparison_to_markdown(r, names),
        (TuneResult, "rich"): lambda r, console, names, brief: tuning.tune_to_rich(r, console),
        (TuneResult, "markdown"): lambda r, console, names, brief: tuning.tune_to_markdown(r),
    }


def can_render(kind: type, fmt: str) -> bool:
    return fmt == "json" or (kind, fmt) in _renderers()


def emit(
    result: Result,
    fmt: str,
    *,
    console: Console | None = None,
    names: tuple[str, str] = ("A", "B"),
    brief: bool = False,
) -> None:
    """Write ``result`` in ``fmt`` to stdout (``names``: what a comparison's two sides are called;
    ``brief``: a report's summary only, in rich and Markdown; JSON is always whole)."""
    if fmt == "json":
        sys.stdout.write(to_json(result) + "\n")
        return
    renderer = _renderers().get((type(result), fmt))
    if renderer is None:
        raise SpecobsError(f"--format {fmt} is not available for this command (use one of: {_available(result)})")
    text = renderer(result, console or stdout_console(), names, brief)
    if text is not None:
        sys.stdout.write(text)


def _available(result: Any) -> str:
    return ", ".join(f for f in FORMATS if can_render(type(result), f))


__all__ = ["FORMATS", "PIPE_WIDTH", "can_render", "emit", "stdout_console", "to_json"]
