"""The typed results every surface presents: frozen dataclasses whose ``to_dict()`` is the JSON contract.

Analysis and tuning build these; the CLI, the renderers, the dashboard and the exporters read
their attributes and compute nothing of their own. Fields marked ``internal`` carry what a
renderer needs to word a finding (a step-time ratio, the k an "off" range was judged by) and
are left out of ``to_dict()``; everything else is a JSON key, in field order.

Sentences are rendering: ``findings``, ``explanations``, ``assumptions`` and a comparison's
``verdict`` are worded by :mod:`specobs.render.sentences` from the typed facts held here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from specobs.dimensions import ENVIRONMENT, ENVIRONMENT_EXTRA, fields_of
from specobs.errors import Notice, Skipped
from specobs.schema import METADATA_KEY, METADATA_LABELS, METADATA_VERSION

#: The per-group acceptance keys of ``summary`` and each ``groups`` entry (docs/report.md).
SUMMARY_KEYS = (
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "acceptance_rate_per_position",
    "conditional_acceptance_rate_per_position",
    "num_accepted_tokens_per_pos",
    "num_drafts_per_pos",
)
#: Intervals and diagnoses under ``details``.
DETAIL_KEYS = (
    "num_windows",
    "num_spec_tokens",
    "mean_acceptance_length_se",
    "mean_acceptance_length_low",
    "mean_acceptance_length_high",
    "mean_acceptance_length_basis",
    "acceptance_rate_per_position_low",
    "acceptance_rate_per_position_high",
    "conditional_acceptance_rate_per_position_low",
    "conditional_acceptance_rate_per_position_high",
    "iid_alpha",
    "iid_max_gap",
    "conditional_trend",
    "num_drafts_derived",
    "start_ts",
    "end_ts",
)
#: The acceptance keys of each side of a comparison.
SIDE_KEYS = (
    "mean_acceptance_length",
    "mean_acceptance_length_low",
    "mean_acceptance_length_high",
    "mean_acceptance_length_se",
    "draft_acceptance_rate",
    "num_drafts",
    "num_accepted_tokens",
)
#: Skipped lines listed by example in a report's JSON (the total is always given).
MAX_SKIPPED_EXAMPLES = 20


def internal() -> Any:
    """A field a renderer reads but the JSON leaves out."""
    return field(default=None, metadata={"json": False}, compare=False)


def jsonable(value: Any) -> Any:
    """Results, sequences and mappings → plain JSON values (tuples become lists)."""
    if isinstance(value, Result):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def rounded(value: Any, digits: int = 6) -> Any:
    """``value`` with every float rounded (the report's JSON); NaN and infinities become null."""
    if isinstance(value, float):
        return round(value, digits) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    return value


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


class Result:
    """Base of the result types: ``to_dict()`` from the fields, in order, internal ones left out."""

    def to_dict(self) -> dict[str, Any]:
        return {
            f.name: jsonable(getattr(self, f.name))
            for f in fields(self)  # type: ignore[arg-type]
            if f.metadata.get("json", True)
        }


# --- vocabularies: enum values are the JSON's words --------------------------------------------


class Baseline(StrEnum):
    """What speedups are against: a plain engine measured, or how its step time was estimated."""

    PLAIN = "plain engine"
    OFF_MINUS_DRAFT = "estimated: k=0 steps of the speculative engine minus their drafting"
    VERIFY = "estimated: verify at one token per request plus overhead"
    NONE = "not measured: no step timing and no plain engine in the input"


class Basis(StrEnum):
    """What a headline number rests on (``Recommended.basis``)."""

    MEASURED = "measured"  # every part
    MODELLED = "modelled"  # some part from the model: the buckets say which
    NOT_MEASURED = "not measured"  # no timing: no number, see the bands


class BucketBasis(StrEnum):
    """What one bucket's speedup rests on (``Prediction.basis``, ``BucketChoice.basis``,
    ``TuneBucket.basis``)."""

    MEASURED = "measured"
    PLAIN_MODELLED = "measured, plain modelled"  # the plain engine did not run most of those batch sizes
    MODEL = "model"
    DRAINED = "model, measured only while draining"  # a k seen only while larger batches drained
    PLAIN_DECODING = "plain decoding"  # the bucket switches speculation off


#: The bucket bases whose k was measured in the bucket (the plain engine there perhaps modelled).
MEASURED_BASES = frozenset({BucketBasis.MEASURED, BucketBasis.PLAIN_MODELLED})


class NoteKind(StrEnum):
    """What a cost fit assumed or measured (``ModelNote.kind``)."""

    NO_DRAFT_TIMING = "no_draft_timing"
    DRAFT_MEASURED = "draft_measured"
    DRAFT_SCALED = "draft_scaled"
    DRAFT_FLAT = "draft_flat"
    NO_PLAIN_ENGINE = "no_plain_engine"


# --- acceptance -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PositionRate(Result):
    """One draft position (1-based): ``r_i = a_i/n_i`` and ``β_i = a_i/m_i`` with 95% intervals."""

    position: int
    accepted: int | None
    drafts: int | None
    rate: float | None
    rate_low: float | None
    rate_high: float | None
    conditional: float | None
    conditional_low: float | None
    conditional_high: float | None


@dataclass(frozen=True)
class PositionBound(Result):
    """A per-position rate read from a source that divides by all drafts, and how high it may be."""

    position: int
    rate: float
    rate_high: float


@dataclass(frozen=True)
class Truncation(Result):
    """Tokens per verification step and the share of accepted tokens kept if drafting stopped at k."""

    k: int
    tokens_per_step: float
    share_of_accepted: float | None


@dataclass(frozen=True)
class Summary(Result):
    """Acceptance of one group (or of everything): counts, rates, intervals and diagnoses.

    ``to_dict()`` gives the :data:`SUMMARY_KEYS`; ``details()`` the :data:`DETAIL_KEYS`.
    Unknown is None, never 0.
    """

    num_drafts: int | None = None
    num_draft_tokens: int | None = None
    num_accepted_tokens: int | None = None
    mean_acceptance_length: float | None = None
    draft_acceptance_rate: float | None = None
    acceptance_rate_per_position: tuple[float | None, ...] | None = None
    conditional_acceptance_rate_per_position: tuple[float | None, ...] | None = None
    num_accepted_tokens_per_pos: tuple[int | None, ...] | None = None
    num_drafts_per_pos: tuple[int | None, ...] | None = None
    num_windows: int | None = None
    num_spec_tokens: int | None = None
    mean_acceptance_length_se: float | None = None
    mean_acceptance_length_low: float | None = None
    mean_acceptance_length_high: float | None = None
    mean_acceptance_length_basis: str | None = None  # "counts" or "reported"
    acceptance_rate_per_position_low: tuple[float | None, ...] | None = None
    acceptance_rate_per_position_high: tuple[float | None, ...] | None = None
    conditional_acceptance_rate_per_position_low: tuple[float | None, ...] | None = None
    conditional_acceptance_rate_per_position_high: tuple[float | None, ...] | None = None
    iid_alpha: float | None = None
    iid_max_gap: float | None = None
    conditional_trend: str | None = None  # falling, rising, flat
    num_drafts_derived: bool | None = None
    start_ts: float | None = None
    end_ts: float | None = None
    # What the findings need beyond the JSON.
    num_drafts_allowed_per_pos: tuple[int | None, ...] | None = internal()
    drafts_for_length: int | None = internal()
    draft_tokens_per_draft: float | None = internal()  # T/D over the rows with per-position counts
    windows_contradicting: int | None = internal()  # printed length or rate off their own counts
    supported_positions: tuple[int, ...] = field(default=(), metadata={"json": False}, compare=False)
    wasted_positions: tuple[int, ...] = field(default=(), metadata={"json": False}, compare=False)
    truncation: tuple[Truncation, ...] = field(default=(), metadata={"json": False}, compare=False)
    position_bounds: tuple[PositionBound, ...] | None = internal()

    def to_dict(self) -> dict[str, Any]:
        return {k: jsonable(getattr(self, k)) for k in SUMMARY_KEYS}

    def details(self) -> dict[str, Any]:
        return {k: jsonable(getattr(self, k)) for k in DETAIL_KEYS}

    def side(self) -> dict[str, Any]:
        """The acceptance keys of one side of a comparison (:data:`SIDE_KEYS`)."""
        return {k: jsonable(getattr(self, k)) for k in SIDE_KEYS}

    @property
    def positions(self) -> tuple[PositionRate, ...]:
        """Every position's rates and counts, 1-based."""
        rates = self.acceptance_rate_per_position or ()

        def at(values: Sequence[Any] | None, i: int) -> Any:
            return values[i] if values is not None and i < len(values) else None

        return tuple(
            PositionRate(
                i + 1,
                at(self.num_accepted_tokens_per_pos, i),
                at(self.num_drafts_per_pos, i),
                rate,
                at(self.acceptance_rate_per_position_low, i),
                at(self.acceptance_rate_per_position_high, i),
                at(self.conditional_acceptance_rate_per_position, i),
                at(self.conditional_acceptance_rate_per_position_low, i),
                at(self.conditional_acceptance_rate_per_position_high, i),
            )
            for i, rate in enumerate(rates)
        )


@dataclass(frozen=True)
class GroupSummary(Result):
    """A group's labels (its ``--by`` columns) and its acceptance summary."""

    labels: Mapping[str, Any]
    summary: Summary

    def to_dict(self) -> dict[str, Any]:
        return {**jsonable(self.labels), **self.summary.to_dict()}

    def details(self) -> dict[str, Any]:
        return {**jsonable(self.labels), **self.summary.details()}


@dataclass(frozen=True)
class BatchTiming(Result):
    """Where step time goes at one batch bucket of one group (``analysis.cost.timing_by_batch``)."""

    labels: Mapping[str, Any]
    batch_bucket: str | None
    timed_steps: int
    mean_draft_seconds: float | None
    mean_verify_seconds: float | None
    mean_step_seconds: float | None
    mean_other_seconds: float | None
    draft_share: float | None
    cost_ratio: float | None
    rejected_draft_share: float | None
    generated_tokens_per_second: float | None

    def to_dict(self) -> dict[str, Any]:
        return {**jsonable(self.labels), **{k: v for k, v in super().to_dict().items() if k != "labels"}}

    @classmethod
    def from_row(cls, row: Mapping[str, Any], label_columns: Sequence[str]) -> BatchTiming:
        return cls(
            labels={c: row[c] for c in label_columns if c in row},
            batch_bucket=row.get("batch_bucket"),
            timed_steps=row["timed_steps"],
            mean_draft_seconds=row.get("mean_draft_seconds"),
            mean_verify_seconds=row.get("mean_verify_seconds"),
            mean_step_seconds=row.get("mean_step_seconds"),
            mean_other_seconds=row.get("mean_other_seconds"),
            draft_share=row.get("draft_share"),
            cost_ratio=row.get("cost_ratio"),
            rejected_draft_share=row.get("rejected_draft_share"),
            generated_tokens_per_second=row.get("generated_tokens_per_second"),
        )


@dataclass(frozen=True)
class ScheduleTax(Result):
    """What a speculative engine's k = 0 steps cost against a plain engine (``analysis.cost.schedule_tax``)."""

    model: str | None
    platform: str | None
    device: str | None
    method: str | None
    steps: int
    off_seconds: float
    plain_seconds: float
    batch_sizes: tuple[int, ...]
    tax_seconds: float
    tax_share: float


@dataclass(frozen=True)
class Finding(Result):
    """One plain-language finding: what it is about (``kind``) and its sentence."""

    kind: str
    text: str


# --- per request ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestGroup(Result):
    """Acceptance across the finished requests of one group (``label``: a bucket or a label's value).

    ``request_weighted_mean_acceptance_length`` is the mean of the requests' own lengths
    (``1 + accepted/steps`` each, the bonus token counted); ``token_weighted_…`` is
    ``1 + Σ accepted / Σ steps``, in which long requests weigh more. Percentiles are over the
    requests that verified a draft. Unknown is None.
    """

    label: str | None
    num_requests: int
    num_requests_without_drafts: int
    num_spec_steps: int
    num_draft_tokens: int
    num_accepted_tokens: int
    request_weighted_mean_acceptance_length: float | None
    token_weighted_mean_acceptance_length: float | None
    p10: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], label: str | None = None) -> RequestGroup:
        """From a row of ``analysis.requests.summarize``."""
        values: dict[str, Any] = {f.name: row.get(f.name) for f in fields(cls) if f.name != "label"}
        for name in ("num_requests", "num_requests_without_drafts", "num_spec_steps", "num_draft_tokens",
                     "num_accepted_tokens"):  # fmt: skip
            values[name] = int(values[name] or 0)
        return cls(label=None if label is None else str(label), **values)


@dataclass(frozen=True)
class LengthBin(Result):
    """Requests whose acceptance length is in ``[low, high)`` (the last bin closed)."""

    low: float
    high: float
    requests: int


@dataclass(frozen=True)
class FlaggedRequest(Result):
    """A request whose draft acceptance rate sits far below its class's (same workload and
    prompt-length bucket, the request itself left out): a quality signal (``analysis.requests``)."""

    request_key: str | None  # a hash of the request id, never the id or its text
    workload: str | None
    prompt_bucket: str | None
    num_draft_tokens: int
    draft_acceptance_rate: float
    class_draft_acceptance_rate: float
    z: float


@dataclass(frozen=True)
class RequestAcceptance(Result):
    """Acceptance per request (``requests`` rows): overall, its distribution, and by group;
    ``flagged``: the worst of the ``num_flagged`` requests far below their class."""

    overall: RequestGroup
    histogram: tuple[LengthBin, ...]
    by_prompt_length: tuple[RequestGroup, ...]
    by_output_length: tuple[RequestGroup, ...]
    by_workload: tuple[RequestGroup, ...]
    by_method: tuple[RequestGroup, ...]
    num_flagged: int = 0
    flagged: tuple[FlaggedRequest, ...] = ()


@dataclass(frozen=True)
class Slo(Result):
    """A per-request service-level objective, in seconds (vLLM's ``--goodput`` measures): a
    request is *good* when it succeeded and meets every bound set; goodput is good requests per
    second of the run, as vLLM computes it."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2el_s: float | None = None

    def __str__(self) -> str:
        parts = [(n, v) for n, v in (("ttft", self.ttft_s), ("tpot", self.tpot_s), ("e2el", self.e2el_s))]
        return ", ".join(f"{n} ≤ {v * 1e3:g} ms" for n, v in parts if v is not None)


@dataclass(frozen=True)
class ServingLevel(Result):
    """One configuration at one load level of a serving benchmark: runs and mean measures."""

    model: str | None
    config: str | None
    speculative: bool | None
    load: str  # concurrency | rate
    level: float
    runs: int
    output_throughput: float | None
    mean_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_ttft_ms: float | None
    acceptance_length: float | None  # the benchmark's spec_decode section (the server's counters)
    #: Drafts the server counted during these runs (the spec_decode sections; 0: it drafted nothing).
    spec_decode_num_drafts: int | None = None
    #: What the in-engine capture recorded during these runs (their time windows): steps, mean
    #: batch size, acceptance length, mean step time, the share of steps that drafted, the engine
    #: runs; None without a capture of the server.
    captured_steps: int | None = None
    captured_batch_size: float | None = None
    captured_acceptance_length: float | None = None
    captured_step_ms: float | None = None
    captured_drafting_share: float | None = None
    #: Per position, the share of drafts whose token there was accepted (as vLLM's
    #: ``spec_decode_per_position_acceptance_rates``), and the mean draft and verify ms per step.
    captured_per_position: tuple[float, ...] | None = None
    captured_draft_ms: float | None = None
    captured_verify_ms: float | None = None
    run_ids: tuple[str, ...] = ()
    #: Under an SLO (``Serving.slo``): good requests per second (mean over runs) and the share of
    #: requests that met it; None without an SLO or without the per-request data it needs.
    goodput: float | None = None
    slo_attained: float | None = None


@dataclass(frozen=True)
class MeasureRatio(Result):
    """B/A of one latency measure (``p99_tpot_ms``…) with its 95% interval over repeats."""

    measure: str
    ratio: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class LoadRatio(Result):
    """A speculative configuration over the plain server at one load level (B/A of geometric
    means over repeats; 95% interval, None with one run on a side)."""

    model: str | None
    config: str | None
    plain_config: str | None
    load: str
    level: float
    runs: int
    plain_runs: int
    throughput_ratio: float | None
    throughput_low: float | None
    throughput_high: float | None
    tpot_ratio: float | None  # below 1: tokens come faster
    tpot_low: float | None
    tpot_high: float | None
    #: Medians and percentiles of TTFT, TPOT, ITL and end-to-end latency both sides report.
    latency: tuple[MeasureRatio, ...] = ()
    goodput_ratio: float | None = None  # under ``Serving.slo``
    goodput_low: float | None = None
    goodput_high: float | None = None
    #: The share of the speculative engine's steps that drafted here (capture; 0 when the
    #: benchmark counted no drafts): near 0, the ratios are the cost of a speculative server
    #: that does not speculate at this load (a k=0 tier of a schedule: the K=0 tax).
    drafting_share: float | None = None
    #: Captured: the speculative engine's mean step time over the plain engine's at this level,
    #: and its tokens per draft (why the ratio is what it is: step cost against acceptance).
    step_time_ratio: float | None = None
    acceptance_length: float | None = None


@dataclass(frozen=True)
class Crossover(Result):
    """Where a configuration stops paying in one metric (``output_throughput``, ``mean_tpot_ms``
    or ``goodput``): its ratio against plain crosses parity (``how``: ``crossed``, ``never``
    within the levels measured, ``below`` parity from the lowest, ``unknown``), with the levels
    where its 95% bounds cross (None: open at that end)."""

    model: str | None
    config: str | None
    load: str
    metric: str
    level: float | None
    how: str
    low: float | None
    high: float | None
    lowest_level: float
    highest_level: float
    repeated: bool  # every level had repeats on both sides (else no interval)


@dataclass(frozen=True)
class Serving(Result):
    """Speculation under load, from serving-benchmark results (``analysis.serving``)."""

    levels: tuple[ServingLevel, ...]
    ratios: tuple[LoadRatio, ...]
    crossovers: tuple[Crossover, ...]
    slo: Slo | None = None


@dataclass(frozen=True)
class LoadAdvice(Result):
    """Where one speculative configuration should draft, from where it stopped paying against
    the plain server under load (``advice.load``): a measured crossover, not a model.

    ``verdict``: ``switch_off_above`` (its gain is shown beyond noise at low load and it stops
    paying within the levels measured), ``speculate`` (it paid at every level measured, beyond
    noise at some), ``plain`` (no gain shown: at or below parity from the lowest level, or a loss
    beyond noise), ``not_shown`` (no difference beyond noise either way). ``draft_up_to`` is the
    largest batch size that drafts: the batch at the crossover's 95% lower bound, the highest load
    where the gain is still shown (``crossover_batch`` is the point estimate's,
    ``crossover_batch_high`` the upper bound's); turned into batch sizes by the capture's mean
    batch per level, else taken as the concurrency, an upper bound (``batch_from``).
    ``schedule`` is vLLM's ``num_speculative_tokens_per_batch_size`` with k=0 above it, in
    ``speculative_config`` with every setting the run metadata shows (``missing`` names the rest).
    The schedule itself was not run unless ``schedule_measured``; its k=0 steps still pay the K=0
    tax, measured in ``k0_tax`` where a server of the sweep did not draft."""

    model: str | None
    config: str | None
    method: str | None
    num_speculative_tokens: int | None
    load: str
    metric: str  # the crossover it rests on
    verdict: str
    stops_paying_at: float | None = None
    stops_paying_low: float | None = None  # 95% bounds of the crossover level (None: open)
    stops_paying_high: float | None = None
    lowest_level: float | None = None
    highest_level: float | None = None
    losses: tuple[float, ...] = ()  # levels where it lost beyond noise
    draft_up_to: int | None = None
    crossover_batch: int | None = None
    crossover_batch_high: int | None = None
    batch_from: str | None = None  # capture | concurrency
    schedule: tuple[tuple[int, int, int], ...] | None = None
    speculative_config: str | None = None
    missing: tuple[str, ...] = ()
    schedule_measured: bool = False
    k0_tax: tuple[LoadRatio, ...] = ()


@dataclass(frozen=True)
class LoadRecommendation(Result):
    """What ``specobs recommend`` returns for serving-benchmark results alone: where each
    configuration should draft, from its measured crossover (``advice.load``)."""

    under_load: tuple[LoadAdvice, ...]
    slo: Slo | None = None


@dataclass(frozen=True)
class SplitRow(Result):
    """Acceptance, cost and measured speed of one target at one k at one value of the split's
    dimensions (a context bucket; an attention backend and platform…) (``analysis.split``).
    ``tokens_per_second``: generated tokens per second of step time, the geometric mean over
    ``stretches`` (runs of consecutive timed steps of one engine at this k and these values);
    ``speedup`` its ratio to the ``baseline``'s at the same values, with Welch's 95% interval over
    the stretches (None where not timed or without a baseline). ``pitfalls``: the known pitfalls
    (``analysis.pitfalls``) the row's engines meet."""

    labels: Mapping[str, Any]  # the target (schema.TARGET_LABELS)
    values: Mapping[str, Any]  # the split's columns → their values
    k: int | None
    summary: Summary
    draft_ms: float | None = None  # mean per timed step
    verify_ms: float | None = None
    step_ms: float | None = None
    tokens_per_second: float | None = None
    stretches: int = 0
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    baseline: str | None = None  # "plain engine", else "k=0" (the same engine with drafting off)
    pitfalls: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {"labels": dict(self.labels), **dict(self.values), "k": self.k}
        out.update(self.summary.to_dict())
        out.update({f.name: jsonable(getattr(self, f.name)) for f in fields(self)[4:]})
        return out


@dataclass(frozen=True)
class ContextTrend(Result):
    """Acceptance of one target at one k from its shortest to its longest context bucket (each
    with at least ``analysis.split.MIN_DRAFTS`` drafts): ``beyond_noise`` when the two
    acceptance-length intervals do not overlap."""

    labels: Mapping[str, Any]
    k: int | None
    short_bucket: str
    long_bucket: str
    short_length: float
    short_interval: tuple[float | None, float | None]
    long_length: float
    long_interval: tuple[float | None, float | None]
    short_rate: float | None
    long_rate: float | None
    beyond_noise: bool


@dataclass(frozen=True)
class SplitBest(Result):
    """The fastest measured k of one target at one value of the split, against the runner-up:
    ``ratio`` (low, high) its tokens per second over the runner-up's, Welch 95% over stretches;
    ``clear`` when the whole interval is above 1."""

    labels: Mapping[str, Any]
    values: Mapping[str, Any]
    k: int | None
    runner_up: int | None
    ratio: float | None
    low: float | None
    high: float | None
    clear: bool


@dataclass(frozen=True)
class Split(Result):
    """Acceptance, cost, measured speed and the best k of every target at each value of ``by``
    (``analysis.split``): by context length, or side by side by what the engines ran on.

    ``best_k_differs``: two values of one target whose best k differ, each beating the other's k
    beyond noise at its own value. ``trends``: for context only (its buckets are ordered).
    ``vllm_option``: for context, the speculative-config field that would apply a per-context k
    where the user's vLLM declares one (None: no release up to 0.33 has one, so none is printed)."""

    by: tuple[str, ...]  # dimension names
    rows: tuple[SplitRow, ...]
    trends: tuple[ContextTrend, ...] = ()
    best: tuple[SplitBest, ...] = ()
    best_k_differs: bool = False
    vllm_option: str | None = None
    #: Steps whose split values are known, of all steps (context: logs, scrapes and older captures have none).
    steps_known: int = 0
    steps: int = 0


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


# --- inputs read, and changes found over time --------------------------------------------------


@dataclass
class SourceReport:
    """What was read from one input."""

    name: str
    format: str
    lines: int | None
    windows: int
    skipped: int
    #: Run metadata the input itself holds (engine start-up lines of a log).
    metadata: tuple[RunMetadata, ...] = ()


@dataclass(frozen=True)
class ChangePoint:
    """A step change in acceptance length between two stretches of windows, or (``trend``) a
    gradual drift: then ``index``/``ts`` are where the slide starts, ``end_ts`` where it ends,
    ``before``/``after`` the fitted length at both ends and ``z`` the slope's."""

    index: int  # first window (0-based, in series order) after the change
    ts: float | None
    before: float
    after: float
    z: float
    end_ts: float | None = None
    rate_per_hour: float | None = None  # a drift's fitted slope, acceptance length per hour
    trend: bool = False
    rate_interval: tuple[float, float] | None = None  # the slope's 95% interval, per hour

    @property
    def kind(self) -> str:
        if self.trend:
            return "drift"
        return "regression" if self.after < self.before else "improvement"


@dataclass(frozen=True)
class Change:
    """A detected step in acceptance length, classified.

    ``kind``: ``regression`` / ``improvement`` (within one configuration) or
    ``configuration_change`` (the step coincides with a switch of method, k, batch bucket or
    workload; ``changed`` says which, before → after). ``labels`` are the group's values of the
    requested keys, ``configuration`` the configuration it happened within (or switched to),
    ``change`` where it is and how large (its own ``kind`` is only the direction).
    """

    kind: str
    labels: Mapping[str, Any]
    configuration: Mapping[str, Any]
    change: ChangePoint
    changed: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the labels, then ``ts``, ``kind``, ``before``, ``after``, ``z``,
        ``configuration`` and ``changed`` (field → [before, after]); a ``drift`` adds
        ``end_ts`` and ``rate_per_hour``."""
        out = {
            **self.labels,
            "ts": self.change.ts,
            "kind": self.kind,
            "before": round(self.change.before, 4),
            "after": round(self.change.after, 4),
            "z": round(self.change.z, 2),
            "configuration": dict(self.configuration),
            "changed": {name: list(pair) for name, pair in self.changed.items()},
        }
        if self.change.trend:
            out["end_ts"] = self.change.end_ts
            out["rate_per_hour"] = round(self.change.rate_per_hour or 0.0, 4)
            out["rate_interval"] = [round(v, 4) for v in self.change.rate_interval or ()]
        return out


@dataclass(frozen=True)
class Cause(Result):
    """A run-metadata field that changed where acceptance broke (before → after), ranked by how
    often such a change moves acceptance; ``pitfall`` names a known pitfall its new value meets
    (``specobs.analysis.pitfalls``)."""

    field: str
    before: Any
    after: Any
    pitfall: str | None = None


@dataclass(frozen=True)
class RunRef(Result):
    """One engine run of a lineage: its identity, span and steady-state acceptance."""

    run_id: str | None
    engine: int | None
    start_ts: float | None
    end_ts: float | None
    num_drafts: int


class BreakKind(StrEnum):
    """What broke: acceptance fell or rose across a restart, collapsed near zero, or came back
    lower right after a stretch with drafting off (k=0)."""

    FALL = "fall"
    RISE = "rise"
    COLLAPSE = "collapse"
    STALE_AFTER_OFF = "stale_after_off"


@dataclass(frozen=True)
class Break(Result):
    """Acceptance that broke in one lineage (same model, method and workload), against the
    lineage's own earlier steady state: the run before and the run after a restart (``fall``,
    ``rise``, ``collapse``), or the steps before and after K=0 stretches (``stale_after_off``).

    ``before``/``after`` are acceptance lengths at ``depth`` drafted positions (both sides'
    per-position conditional rates, so a k change is compared on the positions both drafted);
    ``interval`` is the 95% interval of ``after − before``. ``causes`` are the run-metadata
    fields that changed between the two runs, most likely first; ``coincident_change`` is
    False when none did (a restart alone, or within one run)."""

    kind: BreakKind
    labels: Mapping[str, Any]
    ts: float | None
    before: float | None  # None: a collapse with no earlier run to compare
    after: float
    difference: float | None
    low: float | None
    high: float | None
    z: float | None
    depth: int
    before_run: RunRef | None = None
    after_run: RunRef | None = None
    causes: tuple[Cause, ...] = ()
    coincident_change: bool | None = None  # None: a side has no run metadata to compare
    pitfalls: tuple[str, ...] = ()  # known pitfalls the run after meets (ids)
    resumes: int | None = None  # stale_after_off: K=0 stretches checked

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.labels,
            "kind": str(self.kind),
            "ts": self.ts,
            "before": _round(self.before, 4),
            "after": _round(self.after, 4),
            "difference": _round(self.difference, 4),
            "interval": None if self.low is None or self.high is None else [round(self.low, 4), round(self.high, 4)],
            "z": _round(self.z, 2),
            "depth": self.depth,
            "before_run": jsonable(self.before_run),
            "after_run": jsonable(self.after_run),
            "causes": [c.to_dict() for c in self.causes],
            "coincident_change": self.coincident_change,
            "pitfalls": list(self.pitfalls),
            "resumes": self.resumes,
        }


# --- recommendation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction(Result):
    """One method at one k in one batch bucket: the model's speedup, the measured one, the estimate used."""

    method: str | None
    draft_model: str | None
    num_speculative_tokens: int
    batch_size: float  # where the model is evaluated
    batch_size_min: int
    batch_size_max: int
    tokens_per_second: float | None
    speedup: float  # the model's
    measured_speedup: float | None
    estimate: float  # what the recommendation compares: measured where measured, else the anchored model
    basis: BucketBasis
    interval: tuple[float, float] | None
    extrapolated: bool
    steps: int = field(default=0, metadata={"json": False})  # traffic steps in the bucket (the weight)


@dataclass(frozen=True)
class BucketChoice(Result):
    """The k chosen for one batch bucket (0 = off) and what it is predicted or measured to give."""

    method: str | None
    batch_size_min: int
    batch_size_max: int
    num_speculative_tokens: int
    predicted_speedup: float
    interval: tuple[float, float] | None
    basis: BucketBasis
    measured_steps: int
    # For the explanation: the k a bucket is judged by (its own; for "off", the best k ≥ 1) and
    # that k's speedup, tokens per step and step time against a plain step.
    reference_k: int | None = internal()
    reference_method: str | None = internal()  # the method judged (for "off" overall: the best one tried)
    reference_speedup: float | None = internal()
    reference_basis: BucketBasis | None = internal()  # noqa: RUF009 - measured or modelled factors below
    tokens_per_step: float | None = internal()
    step_ratio: float | None = internal()  # the k's step / a plain step (None without timing)
    off_ratio: float | None = internal()  # a k = 0 step / a plain step
    off_measured: bool = field(default=False, metadata={"json": False})
    in_schedule: bool = field(default=False, metadata={"json": False})  # off through a schedule, not overall
    measured_k: int = field(default=0, metadata={"json": False})
    model_speedup: float | None = internal()  # the model alone at this k (before anchoring to a measured k)


@dataclass(frozen=True)
class Recommended(Result):
    """The headline: one method with one k or a batch-size schedule, or no speculative config."""

    method: str | None
    draft_model: str | None
    num_speculative_tokens: int
    schedule: tuple[tuple[int, int, int], ...] | None  # (batch low, batch high, k)
    predicted_speedup: float | None  # None: not measured (see ``Recommendation.bands``)
    interval: tuple[float, float] | None
    speculative_config: str | None
    baseline: Baseline
    #: What the number rests on (:class:`Basis`).
    basis: Basis = Basis.MEASURED
    #: Fields the config needs that the input does not show (or shows with several values): it
    #: is not ready to paste until they are added. Empty: ready.
    missing_fields: tuple[str, ...] = ()
    #: The config checked against the installed vLLM; None without one (or with the check off).
    config_check: ConfigCheck | None = None
    #: Of ``missing_fields``, those whose engines ran with different values: field -> the values.
    differing: Mapping[str, tuple[str, ...]] = field(default_factory=dict, metadata={"json": False}, compare=False)

    @property
    def ready(self) -> bool:
        """Whether ``speculative_config`` can be pasted as it is: nothing missing, and the
        installed vLLM (when checked) takes it."""
        refused = self.config_check is not None and bool(self.config_check.problems)
        return self.speculative_config is not None and not self.missing_fields and not refused


@dataclass(frozen=True)
class ConfigCheck(Result):
    """A ``--speculative-config`` checked against the installed vLLM (its ``SpeculativeConfig``).

    ``fields_checked``: its field names, types and bounds against the fields vLLM's source
    declares; ``built``: vLLM built the whole config with the target's (and draft's) model
    config, as at start-up; ``problems``: what vLLM refuses (empty: nothing). It is built only
    when complete and when ``target_path`` (the target as the input's engines loaded it, None
    when the input does not show it) and the draft are model folders on this machine:
    ``folders_not_found`` lists those that are not; ``load_error`` is why vLLM could not be
    tried with them (the target's config did not load)."""

    vllm_version: str | None
    fields_checked: bool
    built: bool
    problems: tuple[str, ...] = ()
    target_path: str | None = None
    folders_not_found: tuple[str, ...] = ()
    load_error: str | None = None


@dataclass(frozen=True)
class Target(Result):
    """What a recommendation is for: a target model on a platform and device. Methods on
    different targets are never compared: their speedups answer different questions."""

    model: str | None
    platform: str | None
    device: str | None
    steps: int  # traffic steps of its speculative engines in the input


@dataclass(frozen=True)
class MethodWin(Result):
    """Which method wins a batch bucket (each at its best k there), when there are several."""

    batch_size_min: int
    batch_size_max: int
    winner: str | None
    draft_model: str | None
    num_speculative_tokens: int
    speedups: Mapping[str, float]
    labels: Mapping[str, Any]


@dataclass(frozen=True)
class ModelNote(Result):
    """One thing a method's cost fit rests on, as numbers (``render.sentences.model_note`` words it)."""

    kind: NoteKind
    drafter: str | None = None  # the method's usual drafter kind: lookup | autoregressive | parallel
    measured_drafter: str | None = None  # the kind the measured draft time shows
    k_low: int | None = None  # the ks the draft time was measured at
    k_high: int | None = None
    batch: float | None = None  # the typical batch size it was judged at
    growth: float | None = None  # draft time at k_high over k_low (None: from 0)
    grows: bool | None = None  # grows with k (one pass per token) or flat (one pass)
    baseline: Baseline | None = None  # how plain decoding was estimated without a plain engine


@dataclass(frozen=True)
class MethodFacts(Result):
    """What a method's fit rests on, for the assumptions."""

    method: str | None
    timed: bool
    cost_ratio: float | None
    cost_ratio_source: str | None
    model_notes: tuple[ModelNote, ...]
    plain_measured: bool
    drafts_per_request_step: float
    drafts_per_request_step_by_k: tuple[tuple[int, float], ...]
    measured_k: int
    conditional_tail: float
    conditional_tail_low: float
    conditional_tail_high: float


@dataclass(frozen=True)
class KBand(Result):
    """One k of a :class:`SpeedupBand`: tokens per draft (1 + accepted per draft, with its 95%
    interval) and the modelled speedup between the two cost regimes."""

    num_speculative_tokens: int
    tokens_per_draft: float
    tokens_per_draft_low: float
    tokens_per_draft_high: float
    speedup_low: float  # compute-bound: verification grows with tokens scored, drafter at its class's high cost
    speedup_high: float  # memory-bound: verification flat, drafter at its class's low cost
    extrapolated: bool  # k above the measured one: acceptance of the extra positions extrapolated


@dataclass(frozen=True)
class SpeedupBand(Result):
    """What an input without step timing says about one method's speed: not measured, a band
    per k between two stated cost regimes (``specobs.advice.band``), and the k each favours."""

    method: str | None
    draft_model: str | None
    drafter_kind: str  # lookup | autoregressive | parallel
    per_position_cost: tuple[float, float]  # drafter cost per drafted position, in plain steps
    per_step_cost: tuple[float, float]  # drafter cost per drafting step, whatever k is
    overhead: tuple[float, float]  # a speculative engine's extra cost per step
    cost_ratio_given: bool  # the per-position cost is the user's --cost-ratio
    drafts_per_request_step: float | None  # q as measured; None: unknown, taken as 1
    measured_k: int
    ran_k: int | None  # the largest k the input ran
    best_k_memory_bound: int
    best_k_compute_bound: int
    by_k: tuple[KBand, ...]
    #: The config that ran (at ``ran_k``), completed from the run metadata: what to measure
    #: against (with the capture, ``specobs tune`` or a plain server), not a recommendation.
    speculative_config: str | None = None
    missing_fields: tuple[str, ...] = ()  # what the input does not show of it (see Recommended)
    config_check: ConfigCheck | None = None

    def at(self, k: int) -> KBand | None:
        return next((b for b in self.by_k if b.num_speculative_tokens == k), None)


@dataclass(frozen=True)
class ServedSpeedup(Result):
    """A speculative server against a plain one, measured from their own throughput lines at
    matched running requests (``specobs.advice.served``): one batch bucket, or all of them."""

    method: str | None
    draft_model: str | None
    num_speculative_tokens: int
    batch_size_min: int
    batch_size_max: int
    running: tuple[int, ...]  # the running-request counts both engines showed
    overall: bool  # every matched count, not one bucket
    speedup: float
    interval: tuple[float, float]  # 95%, from the spread of the intervals' throughputs
    tokens_per_second: float  # the speculative engine's, weighted by its intervals at each count
    plain_tokens_per_second: float
    intervals: int
    plain_intervals: int
    tokens_per_step: float | None  # generated / (generated − accepted): tokens per request-step


@dataclass(frozen=True)
class Recommendation(Result):
    """What ``specobs recommend`` returns."""

    recommended: Recommended
    by_batch_size: tuple[BucketChoice, ...]
    predicted: tuple[Prediction, ...]
    method_comparison: tuple[MethodWin, ...] = ()
    methods: tuple[MethodFacts, ...] = field(default=(), metadata={"json": False})
    unknown_method: bool = field(default=False, metadata={"json": False})  # chosen but unlabelled
    #: The target this is for, and the input's other targets (each needs its own recommendation).
    target: Target | None = None
    other_targets: tuple[Target, ...] = ()
    #: Methods whose input has no step timing: what it can say without measuring (never a point).
    bands: tuple[SpeedupBand, ...] = ()
    #: Speculative servers measured against a plain one from their throughput lines.
    served: tuple[ServedSpeedup, ...] = ()
    #: Where each configuration should draft, from its measured crossover under load.
    under_load: tuple[LoadAdvice, ...] = ()
    #: The best k by context length, measured (None: no step knows its context). Advice only: no
    #: vLLM release up to 0.33 takes a per-context k (``by_context.vllm_option``).
    by_context: Split | None = None

    @property
    def method(self) -> str | None:
        """The method the buckets are about (the recommended one, else the best that was tried)."""
        return self.by_batch_size[0].method if self.by_batch_size else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommended": self.recommended.to_dict(),
            "by_batch_size": jsonable(self.by_batch_size),
            "predicted": jsonable(self.predicted),
            "method_comparison": jsonable(self.method_comparison),
            "target": jsonable(self.target),
            "other_targets": jsonable(self.other_targets),
            "bands": jsonable(self.bands),
            "served": jsonable(self.served),
            "under_load": jsonable(self.under_load),
            "by_context": rounded(self.by_context.to_dict()) if self.by_context is not None else None,
        }


# --- comparison -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Configuration(Result):
    """Methods, draft models and ks a run used, its schedule (the ks per batch bucket), and what
    it ran on: the values of each run-metadata field (:data:`ENVIRONMENT_FIELDS`, and each
    recorded environment variable by name) over its engines."""

    method: tuple[str, ...]
    draft_model: tuple[str, ...]
    num_spec_tokens: tuple[int, ...]
    schedule: Mapping[str, tuple[int, ...]]
    environment: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    engines_with_metadata: int = 0


@dataclass(frozen=True)
class Difference(Result):
    """A configuration field in which A and B are known to differ."""

    field: str
    a: Any
    b: Any


@dataclass(frozen=True)
class ConfigurationComparison(Result):
    a: Configuration
    b: Configuration
    differences: tuple[Difference, ...]
    #: Run-metadata fields in which A and B differ (attention backend, graph mode, device, …):
    #: named before anything else, since numbers across them are not comparable unsaid.
    environment: tuple[Difference, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.differences or self.environment)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "changed": self.changed}


@dataclass(frozen=True)
class PositionChange(Result):
    """One position's rate on both sides; ``changed`` when the 95% intervals do not overlap."""

    position: int
    a: float | None
    a_interval: tuple[float, float] | None
    b: float | None
    b_interval: tuple[float, float] | None

    @property
    def changed(self) -> bool:
        ia, ib = self.a_interval, self.b_interval
        return bool(ia and ib and (ia[1] < ib[0] or ib[1] < ia[0]))

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "changed": self.changed}


@dataclass(frozen=True)
class SideTiming(Result):
    """Steps-weighted means over every batch bucket of one side."""

    mean_draft_seconds: float | None
    mean_verify_seconds: float | None
    mean_step_seconds: float | None
    generated_tokens_per_second: float | None


@dataclass(frozen=True)
class BucketThroughput(Result):
    """Generated tokens/s of both sides at one batch bucket both ran."""

    batch_bucket: str | None
    steps_a: int
    steps_b: int
    runs_a: int | None
    runs_b: int | None
    tokens_per_second_a: float
    tokens_per_second_b: float
    ratio: float
    step_seconds_ratio: float | None
    tested: bool


@dataclass(frozen=True)
class Throughput(Result):
    """B/A generated tokens per second at matched batch buckets, with a 95% interval."""

    basis: str
    interval: str
    ratio: float | None
    low: float | None
    high: float | None
    degrees_of_freedom: float | None
    step_seconds_ratio: float | None
    direction: str | None  # fell, rose, unchanged; None: nothing tested
    buckets: tuple[BucketThroughput, ...]
    buckets_only_in_a: tuple[str | None, ...]
    buckets_only_in_b: tuple[str | None, ...]


@dataclass(frozen=True)
class AcceptanceTest(Result):
    """The z test of B − A on the mean acceptance length."""

    difference: float | None = None
    standard_error: float | None = None
    z: float | None = None
    direction: str | None = None  # fell, rose, unchanged; None: not tested


@dataclass(frozen=True)
class Comparison(Result):
    """Run A (before) against run B (after): the JSON of ``specobs compare``."""

    kind: str  # regression, improvement, unchanged, configuration_changed, unknown
    a: Summary
    b: Summary
    positions: tuple[PositionChange, ...]
    timing_a: SideTiming | None
    timing_b: SideTiming | None
    configuration: ConfigurationComparison
    throughput: Throughput | None
    acceptance: AcceptanceTest
    #: Run-metadata fields that differ between A's and B's engines, most likely cause of an
    #: acceptance change first (``analysis.breaks.causes``); empty without metadata on both sides.
    causes: tuple[Cause, ...] = ()
    #: Serving-benchmark results on both sides: B over A per configuration and load level
    #: (``analysis.serving.serving_changes``; ``plain_config`` is A's configuration).
    serving: tuple[LoadRatio, ...] = ()
    #: Each side's targets and k against its own plain engine (or its k = 0 steps), at matched
    #: batch sizes, with the known pitfalls its engines meet (``analysis.split``; None: not timed).
    own_a: Split | None = None
    own_b: Split | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "a": self.a.side(),
            "b": self.b.side(),
            "positions": jsonable(self.positions),
            "timing": {"a": jsonable(self.timing_a), "b": jsonable(self.timing_b)},
            "configuration": self.configuration.to_dict(),
            "throughput": jsonable(self.throughput),
            "acceptance": self.acceptance.to_dict(),
            "causes": [c.to_dict() for c in self.causes],
            "serving": [rounded(r.to_dict()) for r in self.serving],
            "against_own_plain": {
                "a": rounded(self.own_a.to_dict()) if self.own_a is not None else None,
                "b": rounded(self.own_b.to_dict()) if self.own_b is not None else None,
            },
        }


# --- the closed loop (specobs tune) -------------------------------------------------------------


@dataclass(frozen=True)
class TuneMeasurement(Result):
    """One candidate at one batch size: generated tokens per wall-clock second of its counted
    steps (start to start), with a 95% jackknife interval over its units.

    ``num_speculative_tokens`` 0 on the ``plain`` engine is plain decoding; 0 on the
    ``speculative`` engine is drafting switched off by the schedule (the drafter still runs).
    The speculative engine's ks are compared block by block inside one generation (units are
    cycles of blocks); the plain engine against them round by round (units are rounds), its
    interval widened by the bias between the two engine processes (``TuneNoise.engine_bias``).
    """

    batch_size: int
    num_speculative_tokens: int
    tokens_per_second: float
    low: float
    high: float
    rounds: int  # rounds this candidate ran in
    engine: str  # plain | speculative
    eliminated: bool  # dropped from the race: slower than the leader beyond noise
    leader: bool  # the fastest candidate at this batch size when the race ended
    steps: int = 0  # counted steps
    units: int = 0  # cycles (speculative) or rounds (plain) it was measured in
    vs_leader: float | None = None  # tokens/s over the leader's, paired (None: the leader itself)
    vs_leader_low: float | None = None  # at the race's per-look level (95% over all its looks)
    vs_leader_high: float | None = None


@dataclass(frozen=True)
class TuneBucket(Result):
    """The k chosen for one batch-size bucket and where that choice comes from."""

    batch_size_min: int
    batch_size_max: int
    num_speculative_tokens: int
    basis: str  # measured | model | nearest measured | measured either side | plain engine
    measured_batch_size: int | None  # the measured batch size this bucket's choice comes from
    tokens_per_second: float | None  # measured at that batch size (None: from the model)
    decided: bool  # the race established the leader's advantage, or a tie within 2%, at 95%


@dataclass(frozen=True)
class TuneVerification(Result):
    """The chosen configuration against the best static k and the plain engine on one mixed-batch
    workload. The chosen schedule and the best static k run in the same generations, switched
    block by block (gain paired over cycles); the plain engine runs in rounds beside them (gain
    paired over rounds, widened by the engine bias). 95% intervals."""

    rounds: int
    workload: str
    schedule_tokens_per_second: float
    best_static_num_speculative_tokens: int
    best_static_tokens_per_second: float
    plain_tokens_per_second: float
    gain_vs_best_static: float
    gain_vs_best_static_low: float
    gain_vs_best_static_high: float
    gain_vs_plain: float
    gain_vs_plain_low: float
    gain_vs_plain_high: float
    cycles: int = 0  # cycles of blocks behind the gain over the best static k
    half_width_target: float = 0.05  # the half-width (relative) the verification ran for
    target_met: bool = False  # both gains' intervals are within the target

    @property
    def half_widths(self) -> tuple[float, float]:
        """Relative half-widths of the gain over the best static k and over plain."""

        def half(low: float, high: float, gain: float) -> float:
            return (high - low) / (2 * (1 + gain)) if math.isfinite(high - low) else math.inf

        return (
            half(self.gain_vs_best_static_low, self.gain_vs_best_static_high, self.gain_vs_best_static),
            half(self.gain_vs_plain_low, self.gain_vs_plain_high, self.gain_vs_plain),
        )


@dataclass(frozen=True)
class TuneNoise(Result):
    """How noisy the measurements were, how they were compared, and whether an idle engine
    stayed idle."""

    round_to_round: float  # median relative standard deviation of a candidate's rounds
    rounds: int  # race rounds run
    idle_cpu_seconds: dict[str, float]  # CPU an engine used while the other one ran
    busy_seconds: dict[str, float]  # wall time each engine spent generating
    cycle_to_cycle: float | None = None  # the same, for a speculative k's cycles of blocks
    comparison: str = "rounds"  # how the speculative engine's ks were compared
    engine_bias: float | None = None  # how far two engine processes doing the same work differ (ratio)
    engine_bias_low: float | None = None
    engine_bias_high: float | None = None
    engine_bias_basis: str | None = None  # how it was measured
    k0_tax: float | None = None  # share of a k=0 step the drafter still takes (captured steps)


@dataclass(frozen=True)
class TuneResult(Result):
    """What ``specobs tune`` returns: the chosen speculative config, the measurements it rests on,
    and their verification."""

    method: str | None
    speculative_config: str | None  # ready for --speculative-config; None: no speculation
    schedule: tuple[tuple[int, int, int], ...]
    buckets: tuple[TuneBucket, ...]
    measurements: tuple[TuneMeasurement, ...]
    verification: TuneVerification | None
    noise: TuneNoise
    seconds: dict[str, float]  # engine start, race, fit, verification, total
    decided: bool  # every measured batch size's race ended with a decision
    #: The shape every engine ran at: tensor, pipeline and data parallel sizes (None: a result
    #: from before the loops took a shape, or from a bench that is not vLLM).
    parallel: Mapping[str, int] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TuneResult:
        """A result back from its JSON (``tune.json``), for the dashboard and the docs."""
        verification = data.get("verification")
        return cls(
            method=data["method"],
            speculative_config=data["speculative_config"],
            schedule=tuple((int(a), int(b), int(k)) for a, b, k in data["schedule"]),
            buckets=tuple(TuneBucket(**b) for b in data["buckets"]),
            measurements=tuple(TuneMeasurement(**m) for m in data["measurements"]),
            verification=TuneVerification(**verification) if verification else None,
            noise=TuneNoise(**data["noise"]),
            seconds=dict(data["seconds"]),
            decided=bool(data["decided"]),
            parallel={str(k): int(v) for k, v in data["parallel"].items()} if data.get("parallel") else None,
        )


#: What the online tuner can decide (``TunerDecision.action``).
TUNER_ACTIONS = ("suggest", "apply", "confirm", "rollback", "refuse")


@dataclass(frozen=True)
class TunerDecision(Result):
    """One decision of the online tuner (``SPECOBS_ONLINE_TUNER``): a row of its decision log."""

    ts: float
    batch_size_min: int
    batch_size_max: int
    action: str  # suggest | apply | confirm | rollback | refuse
    from_k: int
    to_k: int
    predicted_gain: float | None  # the measured gain that triggered it, with its 95% interval
    predicted_low: float | None
    predicted_high: float | None
    measured_gain: float | None  # for confirm / rollback: the window after the switch vs before
    reason: str
    run_id: str | None = None
    engine: int | None = None

    def to_row(self) -> dict[str, Any]:
        """The event-file row: ``tuner_action`` marks it apart from step rows."""
        row = self.to_dict()
        return {"tuner_action": row.pop("action"), **row}


@dataclass(frozen=True)
class IntegrityIssue(Result):
    """Where the numbers do not measure what the configuration says (``analysis.integrity``).

    ``affected`` of ``checked`` per kind: ``schedule_ignored``: steps drafting more than the
    schedule allows, of the steps where it allows less than the maximum (``observed``: their
    mean draft length, ``corrected``: the mean k allowed); ``short_drafts``: draft tokens, of
    drafts × k (``observed``: the fill); ``accepted_past_end``: accepted tokens cut off by a
    stop, of all accepted (``observed``/``corrected``: the draft acceptance rate with and
    without them); ``host_timed``: GPU steps timed on the host clock, of GPU steps timed;
    ``schedule_disabled``: ``affected`` is the data-parallel size;
    ``synthetic_rejection``: nothing counted; ``missing_hooks``: the vLLM release lacks hook points
    specobs uses, and ``lost`` names what the rows then lack.
    """

    kind: str  # schedule_ignored | schedule_disabled | synthetic_rejection | short_drafts | accepted_past_end |
    # host_timed | known_pitfall | missing_hooks
    run_id: str | None = None
    engine: int | None = None
    method: str | None = None
    affected: int = 0
    checked: int = 0
    observed: float | None = None
    corrected: float | None = None
    max_k: int | None = None
    pitfall: str | None = None  # known_pitfall (and the table's own checks): the pitfall's id
    lost: tuple[str, ...] = ()  # missing_hooks: what the rows lack
    vllm_version: str | None = None  # missing_hooks: the release


@dataclass(frozen=True)
class Pitfall(Result):
    """A known way speculative decoding goes wrong, as data (``specobs.analysis.pitfalls``).

    ``when`` is a condition on run metadata: field → allowed values (a tuple), or one of the
    tests ``"set"`` / ``"unset"`` / ``">1"``; ``environment`` fields are named
    ``environment.NAME``. ``acceptance_below``: the pitfall shows only when the run's draft
    acceptance rate is below it (None: the metadata alone meets it). ``source`` is the public
    report it comes from, checked before it went in."""

    id: str
    title: str
    when: Mapping[str, Any]
    source: str
    advice: str
    acceptance_below: float | None = None


#: Run-metadata fields that make two engines' numbers incomparable when they differ, in the
#: order a comparison names them (method, draft model, k and schedule are the configuration's).
ENVIRONMENT_FIELDS = (*fields_of(ENVIRONMENT), *ENVIRONMENT_EXTRA)


@dataclass(frozen=True)
class RecommendOptions(Result):
    """The recommendation's settings, with the defaults every surface uses (CLI, API, dashboard,
    ``specobs tune``): one place to change them."""

    max_k: int | None = None  #: the largest k considered (None: what the data supports)
    margin: float = 0.02  #: speedup a k must beat plain decoding by
    cost_ratio: float | None = None  #: a drafter's cost ratio to use instead of the measured one
    bootstrap: int = 30  #: resamples for the intervals (0: none)
    seed: int = 0


#: The defaults (``RecommendOptions()``), named once.
RECOMMEND_DEFAULTS = RecommendOptions()


@dataclass(frozen=True)
class RunMetadata(Result):
    """What one engine ran on and with, captured once per engine (docs/schema.md, "Run metadata").

    Every field is optional: a value that could not be read is None, never a guess.
    ``schedule`` is vLLM's ``num_speculative_tokens_per_batch_size`` as the engine holds it
    (``(low, high, k)`` per range); ``schedule_configured`` the one the user asked for, where the
    source shows it (a log's ``non-default args``: vLLM drops the schedule with data parallel > 1);
    ``environment`` holds only the variables that change what
    the engine runs (:data:`specobs.capture.vllm.metadata.ENVIRONMENT`).
    """

    ts: float | None = None
    run_id: str | None = None
    engine: int | None = None
    pid: int | None = None
    model: str | None = None
    model_path: str | None = None  # the target as vLLM loads it (``model`` is the served name)
    method: str | None = None
    draft_model: str | None = None
    num_speculative_tokens: int | None = None
    #: The speculative config's settings as the source shows them (vLLM's field names: a log's
    #: ``non-default args``, or every non-default field of the engine's config); None when the
    #: source does not show them (a start-up line alone, an older capture).
    speculative_config: Mapping[str, Any] | None = None
    schedule: tuple[tuple[int, int, int], ...] | None = None
    schedule_configured: tuple[tuple[int, int, int], ...] | None = None  # what was asked for (logs)
    max_num_seqs: int | None = None
    rejection_sample_method: str | None = None
    draft_sample_method: str | None = None
    vllm_version: str | None = None
    platform: str | None = None
    device: str | None = None
    device_arch: str | None = None
    attention_backend: str | None = None
    draft_attention_backend: str | None = None
    graph_mode: str | None = None
    model_runner: str | None = None  # v1 | v2 (VLLM_USE_V2_MODEL_RUNNER)
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    #: Where draft and verify were timed: ``engine_core`` (the model runner runs in the engine-core
    #: process) or ``worker`` (tensor/pipeline parallel: the output rank, tensor-parallel rank 0 of
    #: the last pipeline stage, handing its timing over with each step's output).
    timing_source: str | None = None
    #: What the rows lack because this vLLM release has no such hook point (empty: nothing).
    missing_hooks: tuple[str, ...] | None = None
    source: str | None = field(default=None, metadata={"json": False}, compare=False)  # the file it came from

    def to_row(self) -> dict[str, Any]:
        """The record written beside the event files: ``specobs_metadata`` marks it."""
        return {METADATA_KEY: METADATA_VERSION, **self.to_dict()}

    def labels(self) -> dict[str, Any]:
        """The low-cardinality fields every step row carries as labels (``schema.METADATA_LABELS``)."""
        return {name: getattr(self, name) for name in METADATA_LABELS}


__all__ = [
    "DETAIL_KEYS",
    "ENVIRONMENT_FIELDS",
    "MEASURED_BASES",
    "RECOMMEND_DEFAULTS",
    "SIDE_KEYS",
    "SUMMARY_KEYS",
    "TUNER_ACTIONS",
    "AcceptanceTest",
    "Baseline",
    "Basis",
    "BatchTiming",
    "Break",
    "BreakKind",
    "BucketBasis",
    "BucketChoice",
    "BucketThroughput",
    "Cause",
    "Change",
    "ChangePoint",
    "Comparison",
    "ConfigCheck",
    "Configuration",
    "ConfigurationComparison",
    "ContextTrend",
    "Crossover",
    "Difference",
    "Finding",
    "FlaggedRequest",
    "GroupSummary",
    "IntegrityIssue",
    "KBand",
    "LengthBin",
    "LoadAdvice",
    "LoadRatio",
    "LoadRecommendation",
    "MeasureRatio",
    "MethodFacts",
    "MethodWin",
    "ModelNote",
    "NoteKind",
    "Pitfall",
    "PositionBound",
    "PositionChange",
    "PositionRate",
    "Prediction",
    "RecommendOptions",
    "Recommendation",
    "Recommended",
    "Report",
    "RequestAcceptance",
    "RequestGroup",
    "Result",
    "RunMetadata",
    "RunRef",
    "ScheduleTax",
    "ServedSpeedup",
    "Serving",
    "ServingLevel",
    "SideTiming",
    "Slo",
    "SpeedupBand",
    "Split",
    "SplitBest",
    "SplitRow",
    "Summary",
    "Target",
    "Throughput",
    "Truncation",
    "TuneBucket",
    "TuneMeasurement",
    "TuneNoise",
    "TuneResult",
    "TuneVerification",
    "TunerDecision",
]
