"""What the numbers conclude, as typed findings (``specobs.records.Finding``), decided here beside
the numbers: acceptance summaries, changes over time, breaks against the past, the k = 0 tax and
unsteady steps, config integrity, and acceptance per request. Every threshold a finding rests on
is applied here (or imported from the module that defines it); ``specobs.render.sentences`` only
words what is decided here.

Example: a summary with ``conditional_trend="falling"`` and ``iid_max_gap=0.08`` (≥
:data:`~specobs.analysis.acceptance.MATERIAL_IID_GAP`) gives a ``conditional_trend`` finding with
``iid_misleads=True`` and severity ``model``; with a gap of 0.03 the same finding says the iid
model is fair, with severity ``context`` (never in the report's summary).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from specobs.analysis.acceptance import MATERIAL_IID_GAP, WASTED_THRESHOLD
from specobs.analysis.cost import COARSE_OUTLIER_FACTOR, OUTLIER_FACTOR
from specobs.analysis.per_request import MATERIAL_MEAN_GAP
from specobs.analysis.pitfalls import BY_ID as PITFALL_BY_ID
from specobs.records import (
    AcceptanceLengthFacts,
    AcceptanceRateFacts,
    Break,
    BreakFacts,
    Change,
    ChangeFacts,
    ConditionalTrendFacts,
    ContradictionFacts,
    Facts,
    Finding,
    FindingKind,
    FlaggedRequestsFacts,
    IntegrityFacts,
    IntegrityIssue,
    IntervalBiasFacts,
    NoFacts,
    RequestAcceptance,
    RequestSpreadFacts,
    ScheduleTax,
    Severity,
    Summary,
    TaxFacts,
    UndraftedRequestsFacts,
    UnsteadyFacts,
    WastedPositionsFacts,
)

K = FindingKind
#: How much each kind of finding matters (``conditional_trend`` is decided per finding: ``model``
#: when the iid formula misleads, else ``context``). A kind not named here is ``other``.
SEVERITY: dict[FindingKind, Severity] = {
    **dict.fromkeys((K.SYNTHETIC_REJECTION, K.SCHEDULE_IGNORED, K.SCHEDULE_DISABLED, K.ACCEPTED_PAST_END,
                     K.MISSING_HOOKS, K.PRINTED_VALUES_CONTRADICT_COUNTS, K.COLLAPSE), Severity.INTEGRITY),
    **dict.fromkeys((K.REGRESSION, K.FALL, K.DRIFT, K.STALE_AFTER_OFF, K.KNOWN_PITFALL), Severity.REGRESSION),
    K.SCHEDULE_TAX: Severity.TAX,
    **dict.fromkeys((K.SHORT_DRAFTS, K.WASTED_POSITIONS, K.INTERVAL_BIAS, K.HOST_TIMED, K.IMPROVEMENT, K.RISE,
                     K.SYNTHETIC_PROMPTS), Severity.LIMIT),
    **dict.fromkeys((K.REQUESTS, K.REQUESTS_FLAGGED), Severity.SPREAD),
    K.DRAFTS_DERIVED: Severity.PROVENANCE,
    **dict.fromkeys((K.ACCEPTANCE_LENGTH, K.ACCEPTANCE_RATE, K.CONFIGURATION_CHANGE, K.UNSTEADY_STEPS),
                    Severity.CONTEXT),
}  # fmt: skip
#: A later position's Wilson upper bound this far above its rate, where drafts were shorter than
#: k and the source divides every position by all drafts, says positions 2..k are underestimated.
INTERVAL_BIAS_MARGIN = 0.005
#: Integrity issues worded as findings (any other kind is carried in the JSON alone).
INTEGRITY_KINDS = frozenset({K.SCHEDULE_IGNORED, K.SCHEDULE_DISABLED, K.SYNTHETIC_REJECTION, K.KNOWN_PITFALL,
                             K.SHORT_DRAFTS, K.MISSING_HOOKS, K.HOST_TIMED, K.ACCEPTED_PAST_END})  # fmt: skip


def finding(kind: FindingKind | str, facts: Facts | None = None, severity: Severity | None = None) -> Finding:
    """A finding of ``kind`` (a :class:`FindingKind` or its value: any other raises ``ValueError``)
    with its severity from :data:`SEVERITY`."""
    typed = FindingKind(kind)
    return Finding(typed, severity or SEVERITY.get(typed, Severity.OTHER), facts if facts is not None else NoFacts())


def iid_misleads(trend: str | None, max_gap: float | None) -> bool:
    """The iid (Leviathan) formula misleads: conditional acceptance falls or rises and misses some
    position by :data:`MATERIAL_IID_GAP` or more."""
    return trend in ("falling", "rising") and max_gap is not None and max_gap >= MATERIAL_IID_GAP


def acceptance_findings(s: Summary) -> list[Finding]:
    """What one group's acceptance numbers conclude."""
    out: list[Finding] = []
    length = s.mean_acceptance_length
    if length is None:
        if s.draft_acceptance_rate is not None:
            out.append(finding(K.ACCEPTANCE_RATE, AcceptanceRateFacts(s.draft_acceptance_rate, drafts_known=False)))
        return out
    out.append(finding(K.ACCEPTANCE_LENGTH, AcceptanceLengthFacts(
        length, s.mean_acceptance_length_low, s.mean_acceptance_length_high,
        reported=s.mean_acceptance_length_basis == "reported",
    )))  # fmt: skip
    if s.draft_acceptance_rate is not None:
        out.append(finding(K.ACCEPTANCE_RATE, AcceptanceRateFacts(s.draft_acceptance_rate, drafts_known=True)))
    rates = s.acceptance_rate_per_position or ()
    wasted = tuple(s.wasted_positions)
    if rates and wasted:
        tail_start = wasted[0]
        if wasted == tuple(range(tail_start, len(rates))) and tail_start > 0:
            cut = s.truncation[tail_start - 1]
            facts = WastedPositionsFacts(wasted, WASTED_THRESHOLD, tail_start, cut.share_of_accepted or 0.0,
                                         cut.tokens_per_step, s.truncation[-1].tokens_per_step)  # fmt: skip
        else:
            facts = WastedPositionsFacts(wasted, WASTED_THRESHOLD)
        out.append(finding(K.WASTED_POSITIONS, facts))
    trend, alpha, gap = s.conditional_trend, s.iid_alpha, s.iid_max_gap
    cond = s.conditional_acceptance_rate_per_position or ()
    if trend in ("falling", "rising") and alpha is not None and s.supported_positions:
        first, last = s.supported_positions[0], s.supported_positions[-1]
        misleads = iid_misleads(trend, gap)
        out.append(finding(K.CONDITIONAL_TREND, ConditionalTrendFacts(
            trend, alpha, gap, MATERIAL_IID_GAP, misleads, first, cond[first], last, cond[last],
        ), Severity.MODEL if misleads else Severity.CONTEXT))  # fmt: skip
    elif trend == "flat" and alpha is not None:
        out.append(finding(K.CONDITIONAL_TREND, ConditionalTrendFacts(trend, alpha, gap, MATERIAL_IID_GAP, False),
                           Severity.CONTEXT))  # fmt: skip
    bounds = s.position_bounds
    if bounds:
        widest = max(bounds[1:], key=lambda b: b.rate_high - b.rate, default=None)
        if widest is not None and widest.rate_high > widest.rate + INTERVAL_BIAS_MARGIN:
            out.append(finding(K.INTERVAL_BIAS, IntervalBiasFacts(
                s.draft_tokens_per_draft or 0.0, len(bounds), widest.position, widest.rate, widest.rate_high,
            )))  # fmt: skip
    if s.windows_contradicting:
        out.append(finding(K.PRINTED_VALUES_CONTRADICT_COUNTS, ContradictionFacts(s.windows_contradicting)))
    if s.num_drafts_derived:
        out.append(finding(K.DRAFTS_DERIVED))
    return out


def change_findings(changes: Sequence[Change]) -> list[Finding]:
    """Where acceptance changed over time (``analysis.timeseries``), one finding each."""
    out = []
    for change in changes:
        c = change.change
        hours = None
        if change.kind == "drift":
            hours = (c.end_ts - c.ts) / 3600 if c.end_ts is not None and c.ts is not None else math.nan
        out.append(finding(change.kind, ChangeFacts(change, fell=c.after < c.before, hours=hours)))
    return out


def break_findings(breaks: Sequence[Break]) -> list[Finding]:
    """Acceptance that broke against its own past (``analysis.breaks``), one finding each."""
    return [finding(str(b.kind), BreakFacts(b)) for b in breaks]


def cost_findings(tax: Sequence[ScheduleTax], unsteady: Mapping[str, int]) -> list[Finding]:
    """The k = 0 tax (``analysis.cost.schedule_tax``; none measurable when the k=0 engine was no
    slower than the plain one) and the steps left out of timing."""
    out = [finding(K.SCHEDULE_TAX, TaxFacts(t, measurable=t.tax_seconds > 0)) for t in tax]
    if unsteady:
        out.append(finding(K.UNSTEADY_STEPS, UnsteadyFacts(dict(unsteady), OUTLIER_FACTOR, COARSE_OUTLIER_FACTOR)))
    return out


def integrity_findings(issues: Sequence[IntegrityIssue]) -> list[Finding]:
    """One finding per config-integrity issue (``analysis.integrity``) of a kind worded (a known
    pitfall only when the pitfalls table names it)."""
    out = []
    for i in issues:
        if i.kind not in INTEGRITY_KINDS or (i.kind == K.KNOWN_PITFALL and i.pitfall not in PITFALL_BY_ID):
            continue
        share = (i.affected / i.checked if i.checked else 0.0) if i.kind == K.ACCEPTED_PAST_END else None
        out.append(finding(i.kind, IntegrityFacts(i, share)))
    return out


def request_findings(r: RequestAcceptance | None) -> list[Finding]:
    """The spread of acceptance across requests and why its two means differ (they differ
    materially at :data:`~specobs.analysis.per_request.MATERIAL_MEAN_GAP`), requests far below
    their class, and requests that never verified a draft."""
    if r is None:
        return []
    o = r.overall
    out: list[Finding] = []
    rw, tw = o.request_weighted_mean_acceptance_length, o.token_weighted_mean_acceptance_length
    if rw is not None and tw is not None:
        long_requests = "alike" if abs(rw - tw) < MATERIAL_MEAN_GAP else "more" if tw > rw else "less"
        out.append(finding(K.REQUESTS, RequestSpreadFacts(
            rw, tw, o.num_requests - o.num_requests_without_drafts, o.p10, o.p50, o.p90, MATERIAL_MEAN_GAP,
            long_requests,
        )))  # fmt: skip
    if r.num_flagged:
        out.append(finding(K.REQUESTS_FLAGGED, FlaggedRequestsFacts(r.num_flagged, r.flagged[0])))
    if o.num_requests_without_drafts:
        out.append(finding(K.REQUESTS, UndraftedRequestsFacts(o.num_requests_without_drafts, o.num_requests)))
    return out


__all__ = [
    "INTEGRITY_KINDS",
    "INTERVAL_BIAS_MARGIN",
    "SEVERITY",
    "acceptance_findings",
    "break_findings",
    "change_findings",
    "cost_findings",
    "finding",
    "iid_misleads",
    "integrity_findings",
    "request_findings",
]
