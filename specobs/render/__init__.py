"""Presenting results: one dispatch keyed by result type and output format.

``emit(result, fmt)`` writes a :mod:`specobs.records` object to stdout as rich tables, one JSON
object (:func:`document`: ``result.to_dict()`` and the sentences worded here) or Markdown, and
refuses a format it has no renderer for. Renderers read attributes and word them:
``sentences`` (every sentence: findings by kind, reasons, headlines, notes), ``summary`` (the
first screen), ``report`` (the report's tables), ``tuning`` (recommendations, comparisons, tune
results), ``split_table`` (a split by context or side by side), ``fit`` (tables that fit the
console), ``markdown`` (Markdown pieces), ``charts`` (Altair charts for the app) and ``plot``
(charts written to files).
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
from specobs.records import (
    Comparison,
    LoadRecommendation,
    Recommendation,
    Report,
    Result,
    TuneResult,
    jsonable,
    rounded,
)
from specobs.render import report, sentences, tuning

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


def _after(data: dict[str, Any], key: str, added: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``added`` placed right after ``key`` (the JSON's documented order)."""
    out: dict[str, Any] = {}
    for name, value in data.items():
        out[name] = value
        if name == key:
            out.update(added)
    return out


def _split_worded(split: Any, data: dict[str, Any] | None) -> dict[str, Any] | None:
    """A split's numbers with its findings in words (``findings``)."""
    return None if split is None or data is None else {**data, "findings": sentences.split_findings(split)}


def _worded(result: Any, data: dict[str, Any]) -> dict[str, Any]:
    if isinstance(result, Report):
        data = {**data, "context": _split_worded(result.context, data.get("context")),
                "side_by_side": _split_worded(result.side_by_side, data.get("side_by_side"))}  # fmt: skip
        findings = sentences.report_findings(result)
        groups = list(zip(result.groups, sentences.group_findings(result), strict=True))
        words = {
            "findings": [f.text for f in findings],
            # The same findings as data, aligned with `findings`: kind, severity and the numbers.
            "finding_facts": [rounded(f.finding.to_dict()) for f in findings],
            # Each group's own sentences (printed under its per-position table), beside `groups`
            # so that each of those keeps exactly the summary keys.
            "group_findings": [{**jsonable(g.labels), "findings": [f.text for f in own]} for g, own in groups],
            # ...and as data, aligned with `group_findings` (each entry with its `findings`).
            "group_finding_facts": [
                {**jsonable(g.labels), "finding_facts": [rounded(f.finding.to_dict()) for f in own]}
                for g, own in groups
            ],
        }
        data = _after(data, "details", words)
        if data.get("tuner_decisions"):
            # Each decision's reason is a code with its numbers; its sentence beside it.
            data["tuner_decisions"] = [
                {**row, "reason_words": sentences.tuner_reason(decision)}
                for row, decision in zip(data["tuner_decisions"], result.tuner_decisions, strict=True)
            ]
        if result.recommendation is not None and data.get("recommendation") is not None:
            data["recommendation"] = _worded(result.recommendation, data["recommendation"])
    elif isinstance(result, Recommendation):
        words = {"assumptions": sentences.assumptions(result), "explanations": sentences.explanations(result)}
        data = _after(data, "predicted", words)
        data["by_context"] = _split_worded(result.by_context, data.get("by_context"))
    elif isinstance(result, LoadRecommendation):
        data = {"headline": sentences.load_headline(result), **data,
                "explanations": sentences.load_explanations(result)}  # fmt: skip
    elif isinstance(result, Comparison):
        data = {"verdict": sentences.verdict(result), **data}
        own = data.get("against_own_plain") or {}
        data["against_own_plain"] = {
            "a": _split_worded(result.own_a, own.get("a")),
            "b": _split_worded(result.own_b, own.get("b")),
        }
    return data


def document(result: Result) -> dict[str, Any]:
    """The JSON contract as a dict: the record's ``to_dict()`` (its numbers) with the sentences
    worded here (a report's findings, a recommendation's explanations and assumptions, a
    comparison's verdict)."""
    return _worded(result, result.to_dict())


def to_json(result: Result) -> str:
    """The JSON contract (:func:`document`), with any NaN or infinity written as ``null``
    (strict JSON never holds them; a corrupt input must not make the writer fail)."""
    return json.dumps(_finite(document(result)), indent=2, allow_nan=False)


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
    return {
        (Report, "rich"): lambda r, console, names, brief: report.to_rich(r, console, brief=brief),
        (Report, "markdown"): lambda r, console, names, brief: report.to_markdown(r, brief=brief),
        (Recommendation, "rich"): lambda r, console, names, brief: tuning.recommendation_to_rich(r, console),
        (Recommendation, "markdown"): lambda r, console, names, brief: tuning.recommendation_to_markdown(r),
        (LoadRecommendation, "rich"): lambda r, console, names, brief: tuning.load_recommendation_to_rich(r, console),
        (LoadRecommendation, "markdown"): lambda r, console, names, brief: tuning.load_recommendation_to_markdown(r),
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


__all__ = ["FORMATS", "PIPE_WIDTH", "can_render", "document", "emit", "stdout_console", "to_json"]
