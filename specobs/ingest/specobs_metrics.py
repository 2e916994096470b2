"""specobs' own metric families, in one table: what both exporters publish, and what the
Prometheus API reader (:mod:`~specobs.ingest.prometheus_api`) reads back.

Every family is one :class:`Family`: its Prometheus name, its OpenTelemetry instrument, kind,
labels, unit, help, the input that feeds it (:data:`SOURCES`) and how its value follows from that
input. The Prometheus collector and the OpenTelemetry instruments are both built by looping over
:data:`FAMILIES` (:mod:`specobs.exporters.families`), so a family added here is published by
both; the reader, the rule and dashboard tests and the docs take the names from here too.

The table lives in this layer, below the exporters that publish it and beside the reader that
reads it back, as :mod:`~specobs.vllm.metric_series` holds vLLM's names (docs/architecture.md:
a concept two rooms share sits in the lower one). It is data only: the exporters' mapping
(:mod:`specobs.exporters.mapping`) does the checking, capping and adding.

Names differ only by each system's conventions: ``specobs_drafts`` is sampled as
``specobs_drafts_total`` and is the instrument ``specobs.drafts``; a TIMING is a Prometheus
summary (``_sum`` and ``_count``) and an OpenTelemetry histogram with the same sum and count::

    DRAFTS.total == "specobs_drafts_total"
    DRAFT_SECONDS.samples == ("specobs_draft_seconds_sum", "specobs_draft_seconds_count")
"""

from __future__ import annotations

from dataclasses import dataclass

from specobs import dimensions

#: The labels of every step series: the engine's identity (``dimensions.SERIES``).
LABELS = tuple(d.prometheus for d in dimensions.having(dimensions.SERIES) if d.prometheus)
#: Run-metadata fields (:class:`specobs.records.RunMetadata`) that ``specobs_engine_info`` publishes
#: as labels, beside the identity labels and ``num_speculative_tokens``.
INFO_FIELDS = dimensions.fields_of(dimensions.INFO)
#: Upper bounds (``le``) of ``specobs_request_acceptance_length``'s buckets, in tokens per verify
#: step (``+Inf`` follows): 1.1 and below is a request whose drafts were all but rejected.
REQUEST_ACCEPTANCE_BOUNDS = (1.1, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)

#: Kinds: a counter; a TIMING (Prometheus summary without quantiles, OpenTelemetry histogram); a
#: gauge; a HISTOGRAM (both, with :data:`REQUEST_ACCEPTANCE_BOUNDS`).
COUNTER, TIMING, GAUGE, HISTOGRAM = "counter", "timing", "gauge", "histogram"

#: What feeds a family (``Family.source``):
#: steps rows and log windows (``StepSums``), run metadata (``EngineInfo``), finished requests
#: (``RequestSums``), the mapping's own counts of what it left out, the latest recommendation per
#: model, the online tuner's decision log, the recorder's health counters (the in-engine exporter
#: only) and the sidecar's own counts (``specobs exporter`` only).
STEPS, METADATA, REQUESTS, MAPPING, TUNING, DECISIONS, RECORDER, SIDECAR = (
    "steps", "metadata", "requests", "mapping", "tuning", "decisions", "recorder", "sidecar",
)  # fmt: skip
SOURCES = (STEPS, METADATA, REQUESTS, MAPPING, TUNING, DECISIONS, RECORDER, SIDECAR)


@dataclass(frozen=True, eq=False)
class Family:
    """One metric family as both exporters publish it."""

    name: str  #: Prometheus family name (a counter's samples add ``_total`` and ``_created``)
    otel: str  #: OpenTelemetry instrument name
    kind: str  #: COUNTER, TIMING, GAUGE or HISTOGRAM
    labels: tuple[str, ...]
    unit: str  #: OpenTelemetry unit (Prometheus names carry theirs)
    help: str
    source: str  #: one of :data:`SOURCES`
    derived: str  #: how the value follows from the source
    key: str = ""  #: RECORDER and SIDECAR: the key of the source's counts that holds the value

    @property
    def total(self) -> str:
        """A counter's sample name (``specobs_drafts_total``)."""
        if self.kind != COUNTER:
            raise ValueError(f"{self.name} is a {self.kind}, not a counter: it has no _total sample")
        return f"{self.name}_total"

    @property
    def samples(self) -> tuple[str, ...]:
        """The sample names a Prometheus scrape of this family may hold (a counter's ``_created``
        only where its series appeared while the process ran)."""
        if self.kind == COUNTER:
            return (f"{self.name}_total", f"{self.name}_created")
        if self.kind == TIMING:
            return (f"{self.name}_sum", f"{self.name}_count")
        if self.kind == HISTOGRAM:
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)


def _step_counter(name: str, otel: str, unit: str, help: str, derived: str, labels: tuple[str, ...] = LABELS) -> Family:
    return Family(name, otel, COUNTER, labels, unit, help, STEPS, derived)


STEPS_OBSERVED = _step_counter(
    "specobs_steps", "specobs.steps", "{step}", "Engine steps observed.",
    "1 per steps row; a log window's num_timed_steps",
)  # fmt: skip
DRAFTS = _step_counter("specobs_drafts", "specobs.drafts", "{draft}", "Drafts verified.", "sum of num_drafts")
DRAFT_TOKENS = _step_counter(
    "specobs_draft_tokens", "specobs.draft_tokens", "{token}", "Draft tokens proposed and verified.",
    "sum of num_draft_tokens",
)  # fmt: skip
ACCEPTED_TOKENS = _step_counter(
    "specobs_accepted_tokens", "specobs.accepted_tokens", "{token}", "Draft tokens accepted.",
    "sum of num_accepted_tokens",
)  # fmt: skip
GENERATED_TOKENS = _step_counter(
    "specobs_generated_tokens", "specobs.generated_tokens", "{token}", "Tokens generated.",
    "sum of num_generated_tokens",
)  # fmt: skip
DRAFT_POSITIONS = _step_counter(
    "specobs_draft_positions", "specobs.draft_positions", "{position}",
    "Drafted positions per request (draft tokens / batch size) of the steps whose draft time was observed.",
    "sum of analysis.cost.draft_positions(num_draft_tokens, batch_size) over single steps with draft_seconds",
)  # fmt: skip
ACCEPTED_PER_POSITION = _step_counter(
    "specobs_accepted_tokens_per_position", "specobs.accepted_tokens.position", "{draft}",
    "Drafts whose first position+1 tokens were accepted.",
    "sum of num_accepted_tokens_per_pos[position]", (*LABELS, "position"),
)  # fmt: skip
DRAFTS_PER_POSITION = _step_counter(
    "specobs_drafts_per_position", "specobs.drafts.position", "{draft}",
    "Drafts that reached the position (drafted more than position tokens).",
    "sum of analysis.acceptance.drafts_per_position(row)[position]", (*LABELS, "position"),
)  # fmt: skip
_TIMED = (*LABELS, "batch_size_bucket")
DRAFT_SECONDS = Family(
    "specobs_draft_seconds", "specobs.draft.duration", TIMING, _TIMED, "s", "Time in the proposer per step.",
    STEPS, "one observation of draft_seconds per single step, by buckets.bounded_label(batch_size)",
)  # fmt: skip
VERIFY_SECONDS = Family(
    "specobs_verify_seconds", "specobs.verify.duration", TIMING, _TIMED, "s",
    "Target forward and rejection sampling per step.",
    STEPS, "one observation of verify_seconds per single step, by buckets.bounded_label(batch_size)",
)  # fmt: skip
STEP_SECONDS = Family(
    "specobs_step_seconds", "specobs.step.duration", TIMING, _TIMED, "s", "Whole engine step.",
    STEPS, "one observation of step_seconds per single step, by buckets.bounded_label(batch_size)",
)  # fmt: skip
COST_RATIO = Family(
    "specobs_cost_ratio", "specobs.cost_ratio", GAUGE, LABELS, "1",
    "Draft seconds per drafted position per request over verify seconds per step: one drafter pass "
    "against one target forward (Leviathan's c).",
    STEPS, "analysis.cost.cost_ratio of the running timing sums and specobs_draft_positions",
)  # fmt: skip
DRAFT_SHARE = Family(
    "specobs_draft_share", "specobs.draft_share", GAUGE, LABELS, "1",
    "Share of step time spent drafting: mean draft seconds over mean step seconds.",
    STEPS, "analysis.cost.draft_share of the running timing sums",
)  # fmt: skip
CONFIG_INFO = Family(
    "specobs_speculative_config_info", "specobs.speculative_config_info", GAUGE,
    (*LABELS, "num_speculative_tokens"), "1", "1 while a speculative engine is observed.",
    STEPS, "1 per value of num_spec_tokens among the last ones the rows reported",
)  # fmt: skip
ENGINE_INFO = Family(
    "specobs_engine_info", "specobs.engine_info", GAUGE, (*LABELS, "num_speculative_tokens", *INFO_FIELDS), "1",
    "1 per engine (model_name, engine): what it runs on and with, from its latest run metadata (a restart with "
    "another configuration replaces the series; an empty label is a value the metadata did not have).",
    METADATA, "1 per (model_name, engine), labelled with its latest run-metadata record",
)  # fmt: skip
REQUEST_ACCEPTANCE = Family(
    "specobs_request_acceptance_length", "specobs.request.acceptance_length", HISTOGRAM, LABELS, "{token}",
    "Acceptance length of each finished request that verified drafts: 1 + its accepted draft tokens / its "
    "verify steps (vLLM's per-request mean acceptance length, bonus token included).",
    REQUESTS, "one observation of 1 + num_accepted_tokens / num_spec_steps per finished request",
)  # fmt: skip
LABEL_OVERFLOW = Family(
    "specobs_label_overflow", "specobs.label_overflow", COUNTER, ("label",), "{observation}",
    'Observations whose label value was published as "other" (over the budget of distinct values, '
    "too long, or with whitespace).",
    MAPPING, "label values folded into other, per label",
)  # fmt: skip
DROPPED_VALUES = Family(
    "specobs_dropped_values", "specobs.dropped_values", COUNTER, ("reason",), "{value}",
    "Row values never added to a metric: not finite, negative, not a count (wrong_type), or a row whose counts "
    "contradict each other (inconsistent, the whole row).",
    MAPPING, "values (or whole rows: inconsistent) the mapping left out, per reason",
)  # fmt: skip
PREDICTED_SPEEDUP = Family(
    "specobs_predicted_speedup", "specobs.predicted_speedup", GAUGE, ("model_name", "method"), "1",
    "Predicted speedup over plain decoding of the k that runs now (traffic-weighted over batch buckets).",
    TUNING, "advice.recommend.traffic_speedup(recommendation, method, the k it runs now), latest refit per model",
)  # fmt: skip
RECOMMENDED_K = Family(
    "specobs_recommended_num_speculative_tokens", "specobs.recommended.num_speculative_tokens", GAUGE,
    ("model_name", "method", "batch_size_bucket"), "{token}", "Recommended k per batch-size bucket (0 = off).",
    TUNING, "the recommendation's num_speculative_tokens per batch bucket, latest refit per model",
)  # fmt: skip
DROPPED_EVENTS = Family(
    "specobs_dropped_events", "specobs.dropped_events", COUNTER, (), "{row}",
    "Rows specobs dropped instead of blocking the engine.",
    RECORDER, "the recorder's dropped_events", key="dropped_events",
)  # fmt: skip
HOOK_ERRORS = Family(
    "specobs_hook_errors", "specobs.hook_errors", COUNTER, (), "{error}",
    "Failures inside specobs hooks (counted, never raised into vLLM).",
    RECORDER, "the recorder's hook_errors", key="hook_errors",
)  # fmt: skip
UNTIMED_STEPS = Family(
    "specobs_untimed_steps", "specobs.untimed_steps", COUNTER, (), "{step}",
    "Engine steps that ran but whose draft/verify timing never reached the engine core (left untimed).",
    RECORDER, "the recorder's untimed_steps", key="untimed_steps",
)  # fmt: skip
TUNER_K = Family(
    "specobs_tuner_num_speculative_tokens", "specobs.tuner.num_speculative_tokens", GAUGE, ("batch_size_bucket",),
    "{token}",
    "k the online tuner (SPECOBS_ONLINE_TUNER=apply) runs in each batch bucket, from its latest decision there.",
    DECISIONS, "to_k of the latest apply or rollback per batch bucket",
)  # fmt: skip
TUNER_DECISIONS = Family(
    "specobs_tuner_decisions", "specobs.tuner.decisions", COUNTER, ("action",), "{decision}",
    "Decisions of the online tuner (suggest, apply, confirm, rollback, refuse).",
    DECISIONS, "decisions per tuner_action",
)  # fmt: skip
EXPORTER_ROWS = Family(
    "specobs_exporter_rows", "specobs.exporter.rows", COUNTER, (), "{row}", "Rows read by the exporter.",
    SIDECAR, "rows the sidecar read", key="rows",
)  # fmt: skip
EXPORTER_ERRORS = Family(
    "specobs_exporter_errors", "specobs.exporter.errors", COUNTER, (), "{input}", "Inputs the exporter could not read.",
    SIDECAR, "inputs the sidecar could not read", key="errors",
)  # fmt: skip
SKIPPED_RECORDS = Family(
    "specobs_skipped_records", "specobs.skipped_records", COUNTER, ("reason",), "{record}",
    "Event-file records skipped whole (invalid JSON, wrong type, negative, non-finite, inconsistent counts) "
    "or rows the metrics update could not take (error).",
    SIDECAR, "records the sidecar skipped, per reason", key="skipped",
)  # fmt: skip

#: Every family specobs exports, in the order a scrape lists them.
FAMILIES = (
    STEPS_OBSERVED, DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS, GENERATED_TOKENS, DRAFT_POSITIONS,
    ACCEPTED_PER_POSITION, DRAFTS_PER_POSITION, DRAFT_SECONDS, VERIFY_SECONDS, STEP_SECONDS, COST_RATIO, DRAFT_SHARE,
    CONFIG_INFO, ENGINE_INFO, REQUEST_ACCEPTANCE, LABEL_OVERFLOW, DROPPED_VALUES, PREDICTED_SPEEDUP, RECOMMENDED_K,
    DROPPED_EVENTS, HOOK_ERRORS, UNTIMED_STEPS, TUNER_K, TUNER_DECISIONS, EXPORTER_ROWS, EXPORTER_ERRORS,
    SKIPPED_RECORDS,
)  # fmt: skip
#: Prometheus family name → family.
BY_NAME = {family.name: family for family in FAMILIES}
if len(BY_NAME) != len(FAMILIES) or len({f.otel for f in FAMILIES}) != len(FAMILIES):
    raise ValueError("two metric families share a Prometheus or OpenTelemetry name: each must be one row")
#: Every sample name a scrape of specobs may hold.
SAMPLE_NAMES = frozenset(sample for family in FAMILIES for sample in family.samples)


def of_source(source: str) -> tuple[Family, ...]:
    """The families ``source`` feeds, in :data:`FAMILIES` order."""
    return tuple(family for family in FAMILIES if family.source == source)


def family_of_sample(sample: str) -> Family | None:
    """The family a sample name belongs to (``specobs_drafts_total`` → :data:`DRAFTS`); None: not specobs'."""
    for family in FAMILIES:
        if sample in family.samples:
            return family
    return None


__all__ = [
    "BY_NAME", "COUNTER", "FAMILIES", "GAUGE", "HISTOGRAM", "INFO_FIELDS", "LABELS", "REQUEST_ACCEPTANCE_BOUNDS",
    "SAMPLE_NAMES", "SOURCES", "TIMING", "Family", "family_of_sample", "of_source",
]  # fmt: skip
