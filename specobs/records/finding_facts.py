"""What the analysis concludes, as data: a finding's kind, its severity and its facts (worded in render).

Findings are decided where the numbers are (``specobs.analysis.findings`` for acceptance,
changes, breaks, costs, integrity and requests; ``specobs.advice.report_findings`` for serving under
load, the input and the report's ordered list and ranking). Each carries the numbers its
sentence uses as a typed facts record whose ``to_dict()`` is the JSON's ``finding_facts[].facts``;
``specobs.render.sentences.word`` turns a finding into its sentence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from specobs.records.acceptance_summary import ScheduleTax
from specobs.records.checks import IntegrityIssue
from specobs.records.history import Break, Change
from specobs.records.request_acceptance import FlaggedRequest
from specobs.records.result import Result, jsonable
from specobs.records.serving_load import Crossover, LoadAdvice, LoadRatio, ServingLevel, Slo, SyntheticPrompts


class FindingKind(StrEnum):
    """Every kind of finding (the values are the kinds' words in the JSON and the dashboard)."""

    # acceptance (one group's summary)
    ACCEPTANCE_LENGTH = "acceptance_length"
    ACCEPTANCE_RATE = "acceptance_rate"
    WASTED_POSITIONS = "wasted_positions"
    CONDITIONAL_TREND = "conditional_trend"
    INTERVAL_BIAS = "interval_bias"
    PRINTED_VALUES_CONTRADICT_COUNTS = "printed_values_contradict_counts"
    DRAFTS_DERIVED = "drafts_derived"
    # changes over time (``Change.kind``)
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    DRIFT = "drift"
    CONFIGURATION_CHANGE = "configuration_change"
    # breaks against the past (``BreakKind``)
    FALL = "fall"
    RISE = "rise"
    COLLAPSE = "collapse"
    STALE_AFTER_OFF = "stale_after_off"
    # costs
    SCHEDULE_TAX = "schedule_tax"
    UNSTEADY_STEPS = "unsteady_steps"
    # config integrity (``IntegrityIssue.kind``)
    SCHEDULE_IGNORED = "schedule_ignored"
    SCHEDULE_DISABLED = "schedule_disabled"
    SYNTHETIC_REJECTION = "synthetic_rejection"
    KNOWN_PITFALL = "known_pitfall"
    SHORT_DRAFTS = "short_drafts"
    MISSING_HOOKS = "missing_hooks"
    HOST_TIMED = "host_timed"
    ACCEPTED_PAST_END = "accepted_past_end"
    # finished requests
    REQUESTS = "requests"
    REQUESTS_FLAGGED = "requests_flagged"
    # what the input holds
    REQUESTS_ONLY = "requests_only"
    NO_SPECULATIVE_DECODING = "no_speculative_decoding"
    # serving under load
    SERVING = "serving"
    SCHEDULE_UNDER_LOAD = "schedule_under_load"
    SYNTHETIC_PROMPTS = "synthetic_prompts"


class Severity(StrEnum):
    """How much a finding matters (the report's summary shows the most severe few:
    ``specobs.advice.report_findings.FINDING_RANK`` orders these, most important first)."""

    #: The numbers do not measure what the configuration says, or acceptance collapsed.
    INTEGRITY = "integrity"
    #: Acceptance fell (within a configuration, across a restart, slid, stale after K=0) or a known pitfall is met.
    REGRESSION = "regression"
    #: The k = 0 tax a schedule pays.
    TAX = "tax"
    #: What limits the drafts or biases a number, and an improvement.
    LIMIT = "limit"
    #: The iid model misleads (conditional acceptance falling or rising materially).
    MODEL = "model"
    #: The spread across requests, and requests far below their class.
    SPREAD = "spread"
    #: Where the counts came from.
    PROVENANCE = "provenance"
    #: Anything else worth saying (ranked last).
    OTHER = "other"
    #: Said elsewhere in the summary, bookkeeping, or a model that holds: never in the summary.
    CONTEXT = "context"


class Facts(Result):
    """Base of the facts records: the numbers a finding's sentence uses (``to_dict()``)."""


@dataclass(frozen=True)
class NoFacts(Facts):
    """A finding that needs no number."""


@dataclass(frozen=True)
class AcceptanceLengthFacts(Facts):
    mean_acceptance_length: float
    low: float | None
    high: float | None
    reported: bool  # the engine's printed mean (weighted by running requests), not counts


@dataclass(frozen=True)
class AcceptanceRateFacts(Facts):
    draft_acceptance_rate: float
    drafts_known: bool  # False: the number of drafts is unknown, so no acceptance length


@dataclass(frozen=True)
class WastedPositionsFacts(Facts):
    positions: tuple[int, ...]  # 0-based positions accepted in under ``threshold`` of drafts
    threshold: float
    keep_k: int | None = None  # the positions are the tail: k=keep_k keeps the rest
    share_of_accepted: float | None = None  # of the accepted tokens k=keep_k keeps
    tokens_per_step: float | None = None  # at k=keep_k
    full_tokens_per_step: float | None = None  # at the k that ran


@dataclass(frozen=True)
class ConditionalTrendFacts(Facts):
    trend: str  # falling | rising | flat
    alpha: float
    max_gap: float | None
    material_gap: float  # the gap at which the iid formula misleads
    iid_misleads: bool
    first_position: int | None = None  # 0-based, with its conditional rate
    first_rate: float | None = None
    last_position: int | None = None
    last_rate: float | None = None


@dataclass(frozen=True)
class IntervalBiasFacts(Facts):
    tokens_per_draft: float
    k: int
    position: int  # 1-based, the widest upper bound
    rate: float
    rate_high: float


@dataclass(frozen=True)
class ContradictionFacts(Facts):
    windows: int


@dataclass(frozen=True)
class ChangeFacts(Facts):
    change: Change
    fell: bool  # acceptance length after below before
    hours: float | None = None  # a drift's span

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.change.to_dict(), "fell": self.fell, "hours": self.hours}


@dataclass(frozen=True)
class BreakFacts(Facts):
    brk: Break


@dataclass(frozen=True)
class IntegrityFacts(Facts):
    issue: IntegrityIssue
    share: float | None = None  # accepted_past_end: affected / checked


@dataclass(frozen=True)
class TaxFacts(Facts):
    tax: ScheduleTax
    measurable: bool  # False: the k=0 engine was no slower than the plain one


@dataclass(frozen=True)
class UnsteadyFacts(Facts):
    steps: Mapping[str, int]  # why → steps left out of timing
    outlier_factor: float
    coarse_outlier_factor: float

    def to_dict(self) -> dict[str, Any]:
        return {"steps": dict(self.steps), "outlier_factor": self.outlier_factor,
                "coarse_outlier_factor": self.coarse_outlier_factor}  # fmt: skip


@dataclass(frozen=True)
class RequestSpreadFacts(Facts):
    request_weighted: float
    token_weighted: float
    num_drafted: int
    p10: float | None
    p50: float | None
    p90: float | None
    material_gap: float
    long_requests: str  # alike | more | less (accept, against short ones)


@dataclass(frozen=True)
class FlaggedRequestsFacts(Facts):
    num_flagged: int
    worst: FlaggedRequest


@dataclass(frozen=True)
class UndraftedRequestsFacts(Facts):
    num_without_drafts: int
    num_requests: int


@dataclass(frozen=True)
class RequestsOnlyFacts(Facts):
    num_requests: int
    num_drafts: int


@dataclass(frozen=True)
class NoSpeculativeDecodingFacts(Facts):
    num_windows: int
    unit: str  # steps | logging intervals | steps and intervals
    max_k: int | None
    timed: bool


@dataclass(frozen=True)
class CrossoverVerdict(Facts):
    """One metric's crossover, and the levels where it was better (``never``) or no better
    (``below``) than plain beyond noise."""

    crossover: Crossover
    beyond_noise_levels: tuple[float | None, ...] = ()


@dataclass(frozen=True)
class LatencyShift(Facts):
    """A tail-latency ratio whose interval excludes parity."""

    measure: str
    load: str
    level: float | None
    ratio: float
    low: float
    high: float


@dataclass(frozen=True)
class BurstLatency(Facts):
    """ITL against TPOT at one level of a speculative server over plain: ITL is per output event
    (a speculative step streams its accepted tokens as one), TPOT per output token."""

    load: str
    level: float | None
    median_itl_ratio: float | None
    p99_itl_ratio: float | None
    tpot_ratio: float | None


@dataclass(frozen=True)
class SyntheticPromptsFacts(Facts):
    uses: tuple[SyntheticPrompts, ...]


@dataclass(frozen=True)
class Trend(Facts):
    """How a quantity moved from the lowest load level to the highest (grew, fell, held)."""

    first: float
    last: float
    way: str


@dataclass(frozen=True)
class ServingFacts(Facts):
    model: str | None
    config: str | None
    plain_config: str | None
    load: str
    ratios: tuple[LoadRatio, ...]
    verdicts: tuple[CrossoverVerdict, ...]
    latency: tuple[LatencyShift, ...]  # per token or per request (ITL is in ``bursts``)
    not_drafting: tuple[LoadRatio, ...]  # levels where it drafted (almost) nothing: the K=0 tax
    taxed_levels: tuple[float | None, ...]  # of those, where the tax is beyond noise
    repeated: bool  # every level has repeated runs (an interval)
    levels: tuple[ServingLevel, ...]  # this configuration's levels
    plain_levels: tuple[ServingLevel, ...]  # its plain server's
    slo: Slo | None
    step_cost: Trend | None = None  # the speculative step's relative cost, lowest to highest level
    tokens_per_draft: Trend | None = None
    #: ITL beside TPOT per level: ITL's ratios compare bursts with single tokens.
    bursts: tuple[BurstLatency, ...] = ()


@dataclass(frozen=True)
class LoadAdviceFacts(Facts):
    advice: LoadAdvice


@dataclass(frozen=True)
class Finding(Result):
    """One finding: what it is about (``kind``), how much it matters (``severity``) and the
    numbers behind it (``facts``). ``specobs.render.sentences.word`` says it."""

    kind: FindingKind
    severity: Severity = Severity.OTHER
    facts: Facts = field(default_factory=NoFacts)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": str(self.kind), "severity": str(self.severity), "facts": jsonable(self.facts)}


__all__ = [
    "AcceptanceLengthFacts",
    "AcceptanceRateFacts",
    "BreakFacts",
    "ChangeFacts",
    "ContradictionFacts",
    "CrossoverVerdict",
    "Facts",
    "Finding",
    "FindingKind",
    "FlaggedRequestsFacts",
    "IntegrityFacts",
    "IntervalBiasFacts",
    "LatencyShift",
    "LoadAdviceFacts",
    "NoFacts",
    "NoSpeculativeDecodingFacts",
    "RequestSpreadFacts",
    "RequestsOnlyFacts",
    "ServingFacts",
    "Severity",
    "TaxFacts",
    "Trend",
    "UndraftedRequestsFacts",
    "UnsteadyFacts",
    "WastedPositionsFacts",
]
