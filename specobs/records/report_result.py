"""The report: everything ``specobs report`` computes, in one record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specobs.errors import Notice, Skipped
from specobs.records.acceptance_summary import BatchTiming, GroupSummary, ScheduleTax, Summary
from specobs.records.checks import IntegrityIssue
from specobs.records.context_split import Split
from specobs.records.finding_facts import Finding
from specobs.records.history import Break, Change, SourceReport
from specobs.records.recommendation import Recommendation
from specobs.records.request_acceptance import RequestAcceptance
from specobs.records.result import MAX_SKIPPED_EXAMPLES, Result, rounded
from specobs.records.run_metadata import RunMetadata
from specobs.records.serving_load import LoadAdvice, Serving
from specobs.records.tuner import TunerDecision


@dataclass(frozen=True)
class Report(Result):
    """Everything ``specobs report`` shows, computed once (``specobs.advice.report_builder.analyze``)."""

    by: tuple[str, ...]
    group_columns: tuple[str, ...]
    summary: Summary
    groups: tuple[GroupSummary, ...]
    sources: tuple[SourceReport, ...]
    skipped: tuple[Skipped, ...]
    changes: tuple[Change, ...] = ()
    timing: tuple[BatchTiming, ...] = ()
    recommendation: Recommendation | None = None
    tax: tuple[ScheduleTax, ...] = ()
    unsteady: Mapping[str, int] = field(default_factory=dict)  # why → steps left out of timing
    notices: tuple[Notice, ...] = ()  # what was assumed while reading the inputs
    tuner_decisions: tuple[TunerDecision, ...] = ()  # the online tuner's log (SPECOBS_ONLINE_TUNER), oldest first
    requests: RequestAcceptance | None = None  # finished requests (capture, server responses, offline outputs)
    metadata: tuple[RunMetadata, ...] = ()  # one record per engine, read beside the event files
    integrity: tuple[IntegrityIssue, ...] = ()  # config-integrity issues (worded among the findings)
    breaks: tuple[Break, ...] = ()  # acceptance that broke against its own past, with likely causes
    serving: Serving | None = None  # serving-benchmark results: speculation against plain under load
    load_advice: tuple[LoadAdvice, ...] = ()  # where each configuration should draft, from its crossover
    #: True when the input holds finished requests alone: ``summary`` and ``groups`` are then
    #: summed from the requests' own counts (one window per request; ``analysis.requests.as_windows``).
    summary_from_requests: bool = False
    #: ``by`` names no group knows a value of: the inputs do not record them (a log has no context
    #: length; a run without metadata no attention backend).
    unrecorded: tuple[str, ...] = ()
    #: Acceptance, cost and the best k by context length (None: no row knows its context).
    context: Split | None = None
    #: The same, side by side by the environment dimensions ``by`` names (platform, attention
    #: backend, vLLM release…): each against its own plain engine (None: ``by`` names none).
    side_by_side: Split | None = None
    #: What the report concludes, in order (``specobs.advice.report_findings.report_findings``), computed
    #: once by ``report_builder`` so that every surface reads the same list (None: a report built
    #: without them, which says none). Worded by ``render.sentences``, never computed there.
    findings: tuple[Finding, ...] | None = field(default=None, compare=False)
    #: Each group's own acceptance findings, in the order of ``groups`` (None: not computed).
    group_findings: tuple[tuple[Finding, ...], ...] | None = field(default=None, compare=False)
    #: Of ``findings``, those the summary shows, most important first
    #: (``specobs.advice.report_findings.key_findings``; None: not computed).
    key_findings: tuple[Finding, ...] | None = field(default=None, compare=False)

    @property
    def empty(self) -> bool:
        """No speculative decoding metrics were found (no steps, finished requests or serving results)."""
        return not self.summary.num_windows and self.requests is None and self.serving is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": rounded(self.summary.to_dict()),
            "groups": [rounded(g.to_dict()) for g in self.groups],
            "details": {
                "summary": rounded(self.summary.details()),
                "groups": [rounded(g.details()) for g in self.groups],
            },
            "timing": [rounded(t.to_dict()) for t in self.timing],
            "recommendation": rounded(self.recommendation.to_dict()) if self.recommendation else None,
            "change_points": [rounded(c.to_dict()) for c in self.changes],
            "sources": [
                {"source": s.name, "format": s.format, "lines": s.lines, "windows": s.windows, "skipped": s.skipped}
                for s in self.sources
            ],
            "skipped_lines": {
                "total": len(self.skipped),
                "examples": [
                    {"source": s.source, "line": s.line, "why": s.why} for s in self.skipped[:MAX_SKIPPED_EXAMPLES]
                ],
            },
            "notices": [{"source": n.source, "line": n.line, "why": n.why} for n in self.notices],
            "tuner_decisions": [rounded(d.to_dict()) for d in self.tuner_decisions],
            "requests": rounded(self.requests.to_dict()) if self.requests is not None else None,
            "run_metadata": [m.to_dict() for m in self.metadata],
            "breaks": [rounded(b.to_dict()) for b in self.breaks],
            "serving": rounded(self.serving.to_dict()) if self.serving is not None else None,
            "load_advice": [rounded(a.to_dict()) for a in self.load_advice],
            "unrecorded_dimensions": list(self.unrecorded),
            "context": rounded(self.context.to_dict()) if self.context is not None else None,
            "side_by_side": rounded(self.side_by_side.to_dict()) if self.side_by_side is not None else None,
        }
