"""The report's summary: what fits one 80×30 screen, ahead of the details.

A newcomer runs ``specobs report`` for the recommendation; the details (tables per group, per
position, timing) run to hundreds of lines. The summary says in a few lines what was read, how
well drafts are accepted, what to run (the recommendation's own sentence and its
``--speculative-config``) and the few findings that matter most, chosen by one rule
(:data:`FINDING_RANK`, :func:`key_findings`). Rich and Markdown both render it from
:func:`first_screen`; ``--brief`` stops after it. No math here: it picks and words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specobs.analysis.acceptance import MATERIAL_IID_GAP
from specobs.records import Finding, Report
from specobs.render import sentences

#: Which findings the summary shows, most important first (a lower rank first):
#: 0 the numbers do not measure what the configuration says (config integrity, counts that
#:   contradict what the engine printed) or acceptance collapsed; 1 acceptance fell (within one
#:   configuration, across a restart, slid, or came back stale after K=0) or a known pitfall is
#:   met; 2 the k = 0 tax a schedule pays; 3 what limits the drafts or biases a number (short
#:   drafts, wasted positions, underestimated positions, host-clock timing) and an improvement;
#: 4 the iid model misleads (conditional acceptance falling or rising materially); 5 the spread
#:   across requests and requests far below their class; 6 where the counts came from. A kind
#:   not named here (a new one) ranks 7.
FINDING_RANK = {
    "synthetic_rejection": 0, "schedule_ignored": 0, "schedule_disabled": 0, "accepted_past_end": 0, "missing_hooks": 0,
    "printed_values_contradict_counts": 0, "collapse": 0,
    "regression": 1, "fall": 1, "drift": 1, "stale_after_off": 1, "known_pitfall": 1,
    "schedule_tax": 2,
    "short_drafts": 3, "wasted_positions": 3, "interval_bias": 3, "host_timed": 3, "improvement": 3, "rise": 3,
    "conditional_trend": 4,
    "requests": 5, "requests_flagged": 5,
    "drafts_derived": 6,
}  # fmt: skip
#: Never in the summary: its acceptance line says the first two; a configuration change is a
#: switch of settings, not a problem; steps left out of timing are bookkeeping.
NOT_IN_SUMMARY = frozenset({"acceptance_length", "acceptance_rate", "configuration_change", "unsteady_steps"})
UNNAMED_RANK = 7
#: The most findings the summary shows.
SUMMARY_FINDINGS = 3


def rank(findings: Sequence[Finding], *, iid_misleads: bool = False, most: int = SUMMARY_FINDINGS) -> list[Finding]:
    """The ``most`` findings that matter most, by :data:`FINDING_RANK`: the first finding of each
    kind before a second of any kind (three findings are not one kind three times while another
    matters), in the given order among equals. A ``conditional_trend`` finding counts only when
    ``iid_misleads`` (it then says to use the per-position rates, not α; else that α is fair)."""
    chosen = [f for f in findings if f.kind not in NOT_IN_SUMMARY and (f.kind != "conditional_trend" or iid_misleads)]
    seen: dict[str, int] = {}
    keys = []
    for order, f in enumerate(chosen):
        repeat = seen.get(f.kind, 0)
        seen[f.kind] = repeat + 1
        keys.append((repeat > 0, FINDING_RANK.get(f.kind, UNNAMED_RANK), order))
    return [f for _, f in sorted(zip(keys, chosen, strict=True), key=lambda pair: pair[0])][:most]


def key_findings(report: Report, most: int = SUMMARY_FINDINGS) -> list[Finding]:
    """The report's findings that its summary shows (:func:`rank`)."""
    s = report.summary
    misleads = s.conditional_trend in ("falling", "rising") and (s.iid_max_gap or 0.0) >= MATERIAL_IID_GAP
    return rank(sentences.report_findings(report), iid_misleads=misleads, most=most)


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


__all__ = ["FINDING_RANK", "NOT_IN_SUMMARY", "SUMMARY_FINDINGS", "FirstScreen", "first_screen", "key_findings", "rank"]
