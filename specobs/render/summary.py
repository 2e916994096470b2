"""The report's summary: what fits one 80×30 screen, ahead of the details.

A newcomer runs ``specobs report`` for the recommendation; the details (tables per group, per
position, timing) run to hundreds of lines. The summary says in a few lines what was read, how
well drafts are accepted, what to run (the recommendation's own sentence and its
``--speculative-config``) and the few findings that matter most, chosen by one rule
(``specobs.advice.report_findings``: ``FINDING_RANK``, ``key_findings``, decided there and carried
by the report as ``key_findings``). Rich and Markdown both render it from :func:`first_screen`;
``--brief`` stops after it. No math here: it words.
"""

from __future__ import annotations

from dataclasses import dataclass

from specobs.records import Report
from specobs.render import sentences


def key_findings(report: Report) -> list[sentences.Worded]:
    """The findings the report's summary shows (``report.key_findings``, ranked in advice), worded."""
    return sentences.worded(report.key_findings or ())


@dataclass(frozen=True)
class FirstScreen:
    """The summary's lines, for any renderer."""

    inputs: str
    acceptance: str
    grouped_by: str  # what the per-group lines are per ("method and k"); empty without them
    by_group: tuple[str, ...]
    recommendation: str  # the recommendation's headline, or why there is none
    speculative_config: str | None  # the flag line, ready to paste
    findings: tuple[str, ...]


def first_screen(report: Report) -> FirstScreen:
    rec = report.recommendation
    by_group, grouped_by = sentences.acceptance_by_group(report)
    config = rec.recommended.speculative_config if rec is not None else None
    return FirstScreen(
        inputs=sentences.inputs_line(report),
        acceptance=sentences.acceptance_line(report),
        grouped_by=grouped_by,
        by_group=tuple(by_group),
        recommendation=sentences.headline(rec) if rec is not None else sentences.no_recommendation(report),
        speculative_config=sentences.speculative_config_line(config) if config else None,
        findings=tuple(f.text for f in key_findings(report)),
    )


__all__ = [
    "FirstScreen",
    "first_screen",
    "key_findings",
]
