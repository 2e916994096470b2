"""The report's findings, decided and ordered here: serving under load (where speculation stops
paying, what is beyond noise, the K=0 tax, how the step cost moves with load), the schedule
advice under load, what the input holds, the report's full ordered list, and the ranking of the
few its summary shows (:data:`FINDING_RANK`, :func:`rank`, :func:`key_findings`).

The acceptance, change, break, cost, integrity and per-request findings are decided in
``specobs.analysis.findings``; ``specobs.render.sentences.word`` words each.
"""

from __future__ import annotations

from collections.abc import Sequence

from specobs.analysis.findings import (
    acceptance_findings,
    break_findings,
    change_findings,
    cost_findings,
    finding,
    integrity_findings,
    request_findings,
)
from specobs.analysis.under_load import CROSSOVER_METRICS, MATERIAL_TREND, NOT_DRAFTING
from specobs.records import (
    BurstLatency,
    Crossover,
    CrossoverVerdict,
    Finding,
    FindingKind,
    LatencyShift,
    LatencyUnit,
    LoadAdvice,
    LoadAdviceFacts,
    LoadRatio,
    NoSpeculativeDecodingFacts,
    Report,
    RequestsOnlyFacts,
    Serving,
    ServingFacts,
    Severity,
    SyntheticPromptsFacts,
    Trend,
)

#: Which findings the summary shows, most important first (a lower rank first), by severity:
#: 0 the numbers do not measure what the configuration says (config integrity, counts that
#:   contradict what the engine printed) or acceptance collapsed; 1 acceptance fell (within one
#:   configuration, across a restart, slid, or came back stale after K=0) or a known pitfall is
#:   met; 2 the k = 0 tax a schedule pays; 3 what limits the drafts or biases a number (short
#:   drafts, wasted positions, underestimated positions, host-clock timing) and an improvement;
#:   4 the iid model misleads (conditional acceptance falling or rising materially); 5 the spread
#:   across requests and requests far below their class; 6 where the counts came from; 7 the
#:   rest. ``context`` findings (what the summary's acceptance line says itself, a configuration
#:   change, steps left out of timing, an iid model that holds) are never in the summary.
FINDING_RANK = {
    Severity.INTEGRITY: 0, Severity.REGRESSION: 1, Severity.TAX: 2, Severity.LIMIT: 3, Severity.MODEL: 4,
    Severity.SPREAD: 5, Severity.PROVENANCE: 6, Severity.OTHER: 7,
}  # fmt: skip
#: The rank of a severity not named in :data:`FINDING_RANK`.
UNNAMED_RANK = 7
#: The most findings the summary shows.
SUMMARY_FINDINGS = 3
#: Input formats whose windows are engine steps (the others print logging or scrape intervals).
STEP_FORMATS = ("events-jsonl", "events-parquet")


# --- serving under load ---------------------------------------------------------------------------


def not_drafting(r: LoadRatio) -> bool:
    """The speculative server drafted (almost) nothing at this level: under :data:`NOT_DRAFTING`
    of its steps drafted, so its ratios are the K=0 tax."""
    return r.drafting_share is not None and r.drafting_share < NOT_DRAFTING


def taxed(r: LoadRatio) -> bool:
    """A level's ratios show a cost beyond noise: throughput's interval below parity, or TPOT's above."""
    return (r.throughput_high is not None and r.throughput_high < 1) or (r.tpot_low is not None and r.tpot_low > 1)


def beyond_parity(low: float | None, high: float | None) -> bool:
    """A ratio's 95% interval excludes 1 (beyond noise)."""
    return low is not None and high is not None and not low <= 1 <= high


def trend(first: float, last: float) -> Trend:
    """How a quantity moved from ``first`` to ``last``: ``grew`` or ``fell`` by at least
    :data:`~specobs.analysis.under_load.MATERIAL_TREND` of ``first``, else ``held``."""
    way = "grew" if last > first * (1 + MATERIAL_TREND) else "fell" if last < first * (1 - MATERIAL_TREND) else "held"
    return Trend(first, last, way)


#: Per crossover metric, the ratio fields of a :class:`LoadRatio`.
_RATIO_FIELDS = {"output_throughput": "throughput", "mean_tpot_ms": "tpot", "goodput": "goodput"}


def crossover_verdict(c: Crossover, ratios: Sequence[LoadRatio]) -> CrossoverVerdict:
    """A crossover with the levels where the configuration is better than plain beyond noise (it
    never crossed) or no better than plain beyond noise (below parity from the lowest level)."""
    if c.how not in ("never", "below"):
        return CrossoverVerdict(c)
    field, higher = _RATIO_FIELDS[c.metric], CROSSOVER_METRICS[c.metric]
    beyond = []
    for r in ratios:
        lo, hi = getattr(r, f"{field}_low"), getattr(r, f"{field}_high")
        if lo is None or hi is None:
            continue
        better = lo > 1 if higher else hi < 1
        worse = hi < 1 if higher else lo > 1
        if better if c.how == "never" else worse:
            beyond.append(r.level)
    return CrossoverVerdict(c, tuple(beyond))


def latency_beyond_noise(ratios: Sequence[LoadRatio]) -> tuple[LatencyShift, ...]:
    """The tail-latency ratios whose interval excludes parity, per level (p99 and p90 first):
    per token or per request only. ITL is per output event, which under speculation carries a
    step's accepted tokens: its ratios compare bursts with single tokens (:func:`bursts`)."""
    out = []
    for r in ratios:
        for m in sorted(r.latency, key=lambda m: m.measure, reverse=True):
            if m.unit == LatencyUnit.EVENT:
                continue
            if m.ratio is None or m.low is None or m.high is None or not beyond_parity(m.low, m.high):
                continue
            out.append(LatencyShift(m.measure, r.load, r.level, m.ratio, m.low, m.high))
    return tuple(out)


def bursts(ratios: Sequence[LoadRatio]) -> tuple[BurstLatency, ...]:
    """Per level where the results report ITL, its median and p99 ratios beside the TPOT ratio:
    what a reader of ITL percentiles would compare, and the per-token measure to read instead."""
    out = []
    for r in ratios:
        itl = {m.measure: m.ratio for m in r.latency if m.unit == LatencyUnit.EVENT}
        if itl:
            out.append(BurstLatency(r.load, r.level, itl.get("median_itl_ms"), itl.get("p99_itl_ms"), r.tpot_ratio))
    return tuple(out)


def serving_findings(serving: Serving | None) -> list[Finding]:
    """Speculation against the plain server under load (``analysis.under_load``), one finding per
    configuration and load kind."""
    if serving is None:
        return []
    out = []
    for key in dict.fromkeys((c.model, c.config, c.load) for c in serving.crossovers):
        model, config, load = key
        ratios = tuple(r for r in serving.ratios if (r.model, r.config, r.load) == key)
        crossovers = [c for c in serving.crossovers if (c.model, c.config, c.load) == key]
        plain = ratios[0].plain_config if ratios else None
        mine = {lv.level: lv for lv in serving.levels if (lv.model, lv.config, lv.load) == key}
        plains = {lv.level: lv for lv in serving.levels if (lv.model, lv.config, lv.load) == (model, plain, load)}
        idle = tuple(r for r in ratios if not_drafting(r))
        timed = [r for r in ratios if r.step_time_ratio is not None]
        accepted = [r for r in ratios if r.acceptance_length is not None]
        step_cost = tokens = None
        if len(timed) > 1 and timed[0].step_time_ratio and timed[-1].step_time_ratio:
            step_cost = trend(timed[0].step_time_ratio, timed[-1].step_time_ratio)
        if len(accepted) > 1 and accepted[0].acceptance_length and accepted[-1].acceptance_length:
            tokens = trend(accepted[0].acceptance_length, accepted[-1].acceptance_length)
        out.append(finding(FindingKind.SERVING, ServingFacts(
            model=model, config=config, plain_config=plain, load=load, ratios=ratios,
            verdicts=tuple(crossover_verdict(c, ratios) for c in crossovers),
            latency=latency_beyond_noise(ratios), not_drafting=idle,
            taxed_levels=tuple(r.level for r in idle if taxed(r)),
            repeated=all(c.repeated for c in crossovers), levels=tuple(mine.values()),
            plain_levels=tuple(plains.values()), slo=serving.slo, step_cost=step_cost, tokens_per_draft=tokens,
            bursts=bursts(ratios),
        )))  # fmt: skip
    if serving.synthetic:
        out.append(finding(FindingKind.SYNTHETIC_PROMPTS, SyntheticPromptsFacts(serving.synthetic)))
    return out


def load_advice_findings(advice: Sequence[LoadAdvice]) -> list[Finding]:
    """Where each configuration should draft under load (``advice.load``)."""
    return [finding(FindingKind.SCHEDULE_UNDER_LOAD, LoadAdviceFacts(a)) for a in advice]


# --- the input and the report ---------------------------------------------------------------------


def input_findings(report: Report) -> list[Finding]:
    """What the input holds when it is not engine steps or intervals with drafts: a plain
    engine's alone (no speculative decoding; a valid input, not an error), or finished
    requests alone (their own counts are the acceptance)."""
    s = report.summary
    if report.summary_from_requests and report.requests is not None:
        only = RequestsOnlyFacts(report.requests.overall.num_requests, s.num_drafts or 0)
        return [finding(FindingKind.REQUESTS_ONLY, only)]
    drafted = s.num_drafts or s.num_draft_tokens or s.mean_acceptance_length is not None
    if not s.num_windows or drafted or s.draft_acceptance_rate is not None or report.requests is not None:
        return []
    formats = {src.format for src in report.sources if src.windows}
    unit = (
        "steps" if formats and formats <= set(STEP_FORMATS)
        else "logging intervals" if not formats & set(STEP_FORMATS)
        else "steps and intervals"
    )  # fmt: skip
    facts = NoSpeculativeDecodingFacts(s.num_windows, unit, s.num_spec_tokens, bool(report.timing))
    return [finding(FindingKind.NO_SPECULATIVE_DECODING, facts)]


def report_findings(report: Report) -> tuple[Finding, ...]:
    """The overall findings of a report, in order: what the input holds when it is not what the
    report is about, config integrity (it says what the numbers mean), then acceptance, breaks,
    changes over time, costs, requests, serving under load and where to draft under it."""
    return tuple(
        input_findings(report)
        + integrity_findings(report.integrity)
        + acceptance_findings(report.summary)
        + break_findings(report.breaks)
        + change_findings(report.changes)
        + cost_findings(report.tax, report.unsteady)
        + request_findings(report.requests)
        + serving_findings(report.serving)
        + load_advice_findings(report.load_advice)
    )


def findings_of(report: Report) -> tuple[Finding, ...]:
    """The findings a report carries (computed once by ``report_builder``), or computed now for a
    report built without them."""
    return report.findings if report.findings is not None else report_findings(report)


def group_findings_of(report: Report) -> tuple[tuple[Finding, ...], ...]:
    """Each group's own acceptance findings, in the order of ``report.groups``."""
    if report.group_findings is not None:
        return report.group_findings
    return tuple(tuple(acceptance_findings(g.summary)) for g in report.groups)


def rank(findings: Sequence[Finding], *, most: int = SUMMARY_FINDINGS) -> list[Finding]:
    """The ``most`` findings that matter most, by :data:`FINDING_RANK` of their severity: the first
    finding of each kind before a second of any kind (three findings are not one kind three times
    while another matters), in the given order among equals; ``context`` findings never."""
    chosen = [f for f in findings if f.severity != Severity.CONTEXT]
    seen: dict[str, int] = {}
    keys = []
    for order, f in enumerate(chosen):
        repeat = seen.get(str(f.kind), 0)
        seen[str(f.kind)] = repeat + 1
        keys.append((repeat > 0, FINDING_RANK.get(f.severity, UNNAMED_RANK), order))
    return [f for _, f in sorted(zip(keys, chosen, strict=True), key=lambda pair: pair[0])][:most]


def key_findings(report: Report, most: int = SUMMARY_FINDINGS) -> list[Finding]:
    """The report's findings that its summary shows (:func:`rank`)."""
    return rank(findings_of(report), most=most)


__all__ = [
    "FINDING_RANK",
    "STEP_FORMATS",
    "SUMMARY_FINDINGS",
    "UNNAMED_RANK",
    "beyond_parity",
    "bursts",
    "crossover_verdict",
    "findings_of",
    "group_findings_of",
    "input_findings",
    "key_findings",
    "latency_beyond_noise",
    "load_advice_findings",
    "not_drafting",
    "rank",
    "report_findings",
    "serving_findings",
    "taxed",
    "trend",
]
