"""specobs metrics for Prometheus, on a ``prometheus_client`` registry (pass a fresh one in tests).

Names and labels are a contract (docs/exporters.md, rules in exporters/prometheus/):

- counters ``specobs_steps_total``, ``specobs_drafts_total``, ``specobs_draft_tokens_total``,
  ``specobs_accepted_tokens_total``, ``specobs_generated_tokens_total``,
  ``specobs_draft_positions_total`` (draft tokens ÷ batch size of the steps whose draft time was
  observed: the cost ratio's denominator, so PromQL computes the ratio as the gauge does),
  ``specobs_accepted_tokens_per_position_total{position}`` and
  ``specobs_drafts_per_position_total{position}`` (drafts that reached the position: the
  denominator of the per-position rate), each with its ``_created``;
- summaries ``specobs_draft_seconds``, ``specobs_verify_seconds``, ``specobs_step_seconds``
  (``_sum`` and ``_count`` per ``batch_size_bucket``: the mean time per batch bucket, which is
  what the rules, the dashboards and the fleet path read);
- gauges ``specobs_predicted_speedup`` (of the configuration that runs now),
  ``specobs_recommended_num_speculative_tokens`` (both from the latest refit only: a collector
  yields them afresh, so a method or bucket that is no longer recommended disappears),
  ``specobs_cost_ratio`` with ``specobs_draft_share`` beside it (``analysis.cost.cost_ratio`` and
  ``draft_share`` of the running sums), ``specobs_speculative_config_info``;
- ``specobs_dropped_events_total``, ``specobs_hook_errors_total`` (read from the recorder at scrape).

Labels are ``model_name``, ``engine``, ``method`` (+ ``position``, ``batch_size_bucket``): all
bounded. Never request ids or prompt text. ``model_name``, ``engine`` and ``method`` come from
the input, so their values are capped (:data:`LABEL_BUDGET` distinct values per label, ``method``
limited to :data:`specobs.schema.KNOWN_METHODS`); a value over the budget, longer than
:data:`MAX_LABEL_LENGTH` or with whitespace or control characters is published as ``other``
and counted in ``specobs_label_overflow_total{label}``. Batch sizes from 2048 share one bucket.
Non-finite or negative values never reach a metric: such a timing is not observed, such a
count not added.

The series one engine may publish are a budget (:func:`series_budget`, at most
:data:`SERIES_PER_ENGINE`): per-position counters rather than a histogram of accepted tokens per
draft (the distribution follows from them), and no ``_created`` on the timing summaries (their
means are ratios of ``_sum`` and ``_count``, which a reader misses alike before the first scrape).
A step's numbers are plain additions under one lock (:class:`_StepSeries`); the families are
built from them at scrape. Every number published comes from the analysis and tuning functions
(bucket labels, drafts per position, a step's drafted positions, the cost ratio and draft share,
the traffic-weighted speedup): the
exporter only counts and publishes.
"""

from __future__ import annotations

import math
import operator
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from specobs import schema
from specobs.advice.recommend import traffic_speedup
from specobs.analysis.acceptance import drafts_per_position
from specobs.analysis.cost import cost_ratio, draft_positions, draft_share
from specobs.buckets import label as bucket_label
from specobs.buckets import label_of as bucket_of
from specobs.capture.sinks import is_step
from specobs.records import TUNER_ACTIONS, Recommendation

LABELS = ("model_name", "engine", "method")
MAX_POSITIONS = 16
#: The series one engine may publish at most, by design: :func:`series_budget` with every method an
#: engine could run at once, k = MAX_POSITIONS and every batch bucket (tests/test_exporters.py
#: holds a real scrape to it; docs/exporters.md shows the budget).
SERIES_PER_ENGINE = 500
#: ``specobs_speculative_config_info`` series per (model, engine, method): the k values seen
#: last (a schedule or a tuner switches between a few; each new one replaces the oldest).
MAX_K_SERIES = 4
#: Distinct values each input-derived label may take before the rest are folded into ``other``.
LABEL_BUDGET = {"model_name": 32, "engine": 16, "num_speculative_tokens": 16}
#: ``method`` takes vLLM's method names, ``none`` (no method in the input) and ``other``.
METHODS = frozenset((*schema.KNOWN_METHODS, "none"))
MAX_LABEL_LENGTH = 100
OTHER = "other"
#: Rows' (model, engine, method, k) whose published labels are remembered (past it they are capped row by row).
PUBLISHED_CACHE = 4096
#: Batch sizes from here on share the bucket ``2048+`` (steps that large are rare: one bucket bounds the label).
LARGEST_BATCH_BUCKET = 2048
#: Every ``batch_size_bucket`` a timing series can take: the analysis's power-of-two buckets up to
#: 1024-2047, ``2048+`` and ``unknown`` (a row without a batch size).
BATCH_BUCKETS = (
    *(bucket_of(2**e) or "" for e in range(LARGEST_BATCH_BUCKET.bit_length() - 1)),
    f"{LARGEST_BATCH_BUCKET}+",
    "unknown",
)
#: The counters of every (model_name, engine, method), in the order :meth:`_StepSeries.add` takes
#: their counts: steps, ``num_drafts``, ``num_draft_tokens``, ``num_accepted_tokens``, ``num_generated_tokens``,
#: and the drafted positions per request of a step with draft time (``analysis.cost.draft_positions``).
COUNTERS = (
    ("specobs_steps", "Engine steps observed."),
    ("specobs_drafts", "Drafts verified."),
    ("specobs_draft_tokens", "Draft tokens proposed and verified."),
    ("specobs_accepted_tokens", "Draft tokens accepted."),
    ("specobs_generated_tokens", "Tokens generated."),
    (
        "specobs_draft_positions",
        "Drafted positions per request (draft tokens / batch size) of the steps whose draft time was observed.",
    ),
)
#: Where the drafted positions are in :data:`COUNTERS` (the cost ratio's denominator).
_POSITIONS = 5
#: The timing summaries per batch bucket, in the order of their seconds: ``draft_seconds``,
#: ``verify_seconds``, ``step_seconds``.
TIMINGS = (
    ("specobs_draft_seconds", "Time in the proposer per step."),
    ("specobs_verify_seconds", "Target forward and rejection sampling per step."),
    ("specobs_step_seconds", "Whole engine step."),
)
_POSITION_LABELS = tuple(str(p) for p in range(MAX_POSITIONS))


def series_budget(
    methods: int = 3, batch_buckets: int = len(BATCH_BUCKETS), positions: int = MAX_POSITIONS
) -> list[tuple[tuple[str, ...], str, int]]:
    """The series one engine publishes at most, as ``(families, their samples, series)``: ``methods``
    methods at once, each with a fixed k of ``positions`` (every position reached) and timed steps in
    ``batch_buckets`` buckets, and :data:`MAX_K_SERIES` values of k seen."""
    per_position = ("specobs_accepted_tokens_per_position", "specobs_drafts_per_position")
    return [
        (tuple(name for name, _ in COUNTERS), "`_total`, `_created`", methods * len(COUNTERS) * 2),
        (per_position, f"`_total`, `_created` × {positions} positions", methods * len(per_position) * positions * 2),
        (tuple(name for name, _ in TIMINGS), f"`_sum`, `_count` × {batch_buckets} batch buckets",
         methods * len(TIMINGS) * batch_buckets * 2),
        (("specobs_cost_ratio", "specobs_draft_share"), "one", methods * 2),
        (("specobs_speculative_config_info",), f"one per k, the last {MAX_K_SERIES} seen", methods * MAX_K_SERIES),
    ]  # fmt: skip


def series_of(registry: CollectorRegistry) -> int:
    """How many series a scrape of ``registry`` holds (samples, ``_created`` included)."""
    return sum(len(family.samples) for family in registry.collect())


def _plain(value: str) -> bool:
    """A label value fit to publish: short, printable, no whitespace (never prompt-like text)."""
    return len(value) <= MAX_LABEL_LENGTH and value.isprintable() and not any(c.isspace() for c in value)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> Any:
    """``value`` when it can be added to a counter (finite, positive), else None."""
    if type(value) is int:  # what capture and the validated readers give: checked fast
        return value if value > 0 else None
    return value if _finite(value) and value > 0 else None


def _counts_ok(values: Sequence[Any]) -> bool:
    """Per-position counts fit to add: integers (what capture and the validated readers give,
    checked fast) or other finite non-negative numbers."""
    return (set(map(type, values)) == {int} and min(values) >= 0) or all(
        _count(v) is not None or v == 0 for v in values
    )


def _seconds(value: Any) -> bool:
    """A timing fit to observe: finite and not negative (a NaN would poison the sum for good)."""
    if type(value) is float:
        return 0.0 <= value < math.inf
    return _finite(value) and value >= 0


class _LabelCap:
    """Folds input-derived label values into ``other`` past a budget of distinct values."""

    def __init__(self, budget: dict[str, int], overflow: Any) -> None:
        self.budget = dict(budget)
        self._kept: dict[str, set[str]] = defaultdict(set)
        self._overflow = overflow
        self._overflow_children: dict[str, Any] = {}
        self._lock = threading.Lock()

    def published(self, label: str, value: str) -> str:
        """What ``value`` is published as, without counting or keeping it."""
        return value if value in self._kept[label] else OTHER

    def __call__(self, label: str, value: str) -> str:
        kept = self._kept[label]
        if value in kept:
            return value
        with self._lock:
            if value in kept:
                return value
            if _plain(value) and (value in METHODS if label == "method" else len(kept) < self.budget.get(label, 32)):
                kept.add(value)
                return value
            child = self._overflow_children.get(label)
            if child is None:
                child = self._overflow_children[label] = self._overflow.labels(label)
            child.inc()
        return OTHER


def batch_size_bucket(batch: Any) -> str:
    """``1``, ``2-3``, ``4-7`` …: the analysis's power-of-two buckets, up to ``2048+`` (``unknown``
    without a batch size)."""
    if (type(batch) is not int and not _finite(batch)) or batch < 1:
        return "unknown"
    if batch >= LARGEST_BATCH_BUCKET:
        return BATCH_BUCKETS[-2]
    return bucket_of(int(batch)) or "unknown"


class _Group:
    """One (model_name, engine, method)'s running sums, as plain numbers."""

    __slots__ = ("accepted", "accepted_created", "complete", "ks", "reached", "reached_created", "timings",
                 "totals", "totals_created")  # fmt: skip

    def __init__(self) -> None:
        self.totals: list[Any] = [0] * len(COUNTERS)
        self.totals_created = [0.0] * len(COUNTERS)
        self.accepted: list[Any] = [0] * MAX_POSITIONS
        self.reached: list[Any] = [0] * MAX_POSITIONS
        self.accepted_created = [0.0] * MAX_POSITIONS
        self.reached_created = [0.0] * MAX_POSITIONS
        self.complete = 0  #: positions below this have both per-position series (and their creation time)
        #: batch bucket → [sum, count] of each timing in TIMINGS, one after the other
        self.timings: dict[str, list[Any]] = {}
        #: the k labels seen last, oldest first (a dict as an ordered set), at most MAX_K_SERIES
        self.ks: dict[str, None] = {}

    def add_positions(self, accepted: Sequence[Any], reached: Sequence[Any]) -> None:
        """Add one row's per-position counts. A reached position gets its accepted series too, at 0
        if need be (a rate of 0 must be a sample that raises SpecDecodeWastedPositions, not a
        missing series)."""
        width = max(min(len(accepted), MAX_POSITIONS), min(len(reached), MAX_POSITIONS))
        if accepted:
            self.accepted[: min(len(accepted), MAX_POSITIONS)] = map(operator.add, self.accepted, accepted)
        if reached:
            self.reached[: min(len(reached), MAX_POSITIONS)] = map(operator.add, self.reached, reached)
        if width > self.complete:  # a position may have got its first series: read the clock
            now = time.time()
            for position in range(self.complete, width):
                if self.reached[position] and not self.reached_created[position]:
                    self.reached_created[position] = now
                if (self.accepted[position] or self.reached[position]) and not self.accepted_created[position]:
                    self.accepted_created[position] = now
            while (
                self.complete < MAX_POSITIONS
                and self.reached_created[self.complete]
                and self.accepted_created[self.complete]
            ):
                self.complete += 1


class _StepSeries(Collector):
    """The counters, per-position counters, timing summaries, cost ratio, draft share and config info of every
    (model_name, engine, method): added to as plain numbers under one lock per row, and turned into
    metric families only at scrape (a ``Counter.inc`` or ``Summary.observe`` per field cost more
    than all the rest of a step's export)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[tuple[str, str, str], _Group] = {}

    def add(
        self,
        labels: tuple[str, str, str],
        counts: Sequence[Any],
        positions: tuple[Sequence[Any], Sequence[Any]] | None = None,
        timing: tuple[str, Sequence[Any]] | None = None,
        k: str | None = None,
    ) -> None:
        """One row: ``counts`` in :data:`COUNTERS` order (0 where the row has none), per-position
        ``(accepted, reached)``, ``(batch bucket, seconds in TIMINGS order or None)`` of a single
        step, and the k label."""
        with self._lock:
            group = self._groups.get(labels)
            if group is None:
                group = self._groups[labels] = _Group()
            group.totals[:] = map(operator.add, group.totals, counts)
            created = group.totals_created
            if 0.0 in created:  # a counter may have got its first series: read the clock
                for i, value in enumerate(counts):
                    if value and not created[i]:
                        created[i] = time.time()
            if positions is not None:
                group.add_positions(*positions)
            if timing is not None:
                bucket, seconds = timing
                sums = group.timings.get(bucket)
                if sums is None:
                    sums = group.timings[bucket] = [0.0, 0] * len(TIMINGS)
                for i, value in enumerate(seconds):
                    if value is not None:
                        sums[2 * i] += value
                        sums[2 * i + 1] += 1
            if k is not None and k not in group.ks:
                group.ks[k] = None
                if len(group.ks) > MAX_K_SERIES:  # a tuner trying many k: the oldest goes
                    del group.ks[next(iter(group.ks))]

    def collect(self) -> Iterable[Metric]:
        counters = [CounterMetricFamily(name, doc, labels=LABELS) for name, doc in COUNTERS]
        position_labels = [*LABELS, "position"]
        accepted = CounterMetricFamily(
            "specobs_accepted_tokens_per_position", "Drafts whose first position+1 tokens were accepted.",
            labels=position_labels,
        )  # fmt: skip
        reached = CounterMetricFamily(
            "specobs_drafts_per_position", "Drafts that reached the position (drafted more than position tokens).",
            labels=position_labels,
        )  # fmt: skip
        timings = [SummaryMetricFamily(name, doc, labels=[*LABELS, "batch_size_bucket"]) for name, doc in TIMINGS]
        ratio = GaugeMetricFamily(
            "specobs_cost_ratio",
            "Draft seconds per drafted position per request over verify seconds per step: one drafter pass "
            "against one target forward (Leviathan's c).",
            labels=LABELS,
        )
        share = GaugeMetricFamily(
            "specobs_draft_share", "Share of step time spent drafting: mean draft seconds over mean step seconds.",
            labels=LABELS,
        )  # fmt: skip
        config = GaugeMetricFamily(
            "specobs_speculative_config_info", "1 while a speculative engine is observed.",
            labels=[*LABELS, "num_speculative_tokens"],
        )  # fmt: skip
        with self._lock:
            for key, group in self._groups.items():
                labels = list(key)
                for family, total, created in zip(counters, group.totals, group.totals_created, strict=True):
                    if created:
                        family.add_metric(labels, total, created=created)
                for position in range(MAX_POSITIONS):
                    if group.accepted_created[position]:
                        accepted.add_metric(
                            [*key, _POSITION_LABELS[position]], group.accepted[position],
                            created=group.accepted_created[position],
                        )  # fmt: skip
                    if group.reached_created[position]:
                        reached.add_metric(
                            [*key, _POSITION_LABELS[position]], group.reached[position],
                            created=group.reached_created[position],
                        )  # fmt: skip
                for bucket, sums in group.timings.items():
                    for i, summary in enumerate(timings):
                        if sums[2 * i + 1]:
                            summary.add_metric([*key, bucket], sums[2 * i + 1], sums[2 * i])
                # Over every batch bucket: the sums the summaries publish, as the recording rule reads them.
                totals = [sum(column) for column in zip(*group.timings.values(), strict=True)]
                if totals:
                    draft, drafted, verify, verified, step, stepped = totals
                    positions = group.totals[_POSITIONS]
                    if positions and verify:
                        ratio.add_metric(labels, cost_ratio(draft, positions, verify, verified))
                    if step:
                        share.add_metric(labels, draft_share(draft, drafted, step, stepped) if drafted else 0.0)
                for k in sorted(group.ks):
                    config.add_metric([*key, k], 1)
        yield from counters
        yield accepted
        yield reached
        yield from timings
        yield ratio
        yield share
        yield config


class _Tuning(Collector):
    """``specobs_predicted_speedup`` and ``specobs_recommended_num_speculative_tokens`` from the
    latest recommendation per model, yielded afresh on every scrape (client_python's idiom)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[Recommendation, dict[str, int]]] = {}

    def set(self, model: str, recommendation: Recommendation, running: dict[str, int]) -> None:
        with self._lock:
            self._latest[model] = (recommendation, dict(running))

    def replace(self, latest: dict[str, tuple[Recommendation, dict[str, int]]]) -> None:
        """Every model's latest recommendation at once: models left out disappear."""
        with self._lock:
            self._latest = {m: (rec, dict(running)) for m, (rec, running) in latest.items()}

    def collect(self) -> Iterable[GaugeMetricFamily]:
        speedup = GaugeMetricFamily(
            "specobs_predicted_speedup",
            "Predicted speedup over plain decoding of the k that runs now (traffic-weighted over batch buckets).",
            labels=["model_name", "method"],
        )
        recommended = GaugeMetricFamily(
            "specobs_recommended_num_speculative_tokens",
            "Recommended k per batch-size bucket (0 = off).",
            labels=["model_name", "method", "batch_size_bucket"],
        )
        with self._lock:
            latest = list(self._latest.items())
        for model, (rec, running) in latest:
            for method, k in running.items():
                value = traffic_speedup(rec, method, k)
                if value is not None:
                    speedup.add_metric([model, method], value)
            for row in rec.by_batch_size:
                bucket = bucket_label(row.batch_size_min, row.batch_size_max)
                recommended.add_metric([model, row.method or "none", bucket], row.num_speculative_tokens)
        yield speedup
        yield recommended


class _Health(Collector):
    """``specobs_dropped_events_total`` and ``specobs_hook_errors_total``, read at scrape time."""

    def __init__(self, counters: Callable[[], dict[str, int]]) -> None:
        self._counters = counters

    def collect(self) -> Iterable[CounterMetricFamily]:
        values = self._counters() or {}
        yield CounterMetricFamily(
            "specobs_dropped_events", "Rows specobs dropped instead of blocking the engine.",
            value=values.get("dropped_events", 0),
        )  # fmt: skip
        yield CounterMetricFamily(
            "specobs_hook_errors", "Failures inside specobs hooks (counted, never raised into vLLM).",
            value=values.get("hook_errors", 0),
        )  # fmt: skip


class PrometheusMetrics:
    """The specobs instruments on one registry; ``observe_step`` feeds them from a steps row."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        health: Callable[[], dict[str, int]] | None = None,
        label_budget: dict[str, int] | None = None,
    ) -> None:
        """``label_budget``: distinct values per label (``model_name``, ``engine``,
        ``num_speculative_tokens``) before the rest become ``other``; :data:`LABEL_BUDGET` by default."""
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.series = _StepSeries()
        r.register(self.series)
        self.tuning = _Tuning()
        r.register(self.tuning)
        if health is not None:
            r.register(_Health(health))
        self.label_overflow = Counter(
            "specobs_label_overflow",
            'Observations whose label value was published as "other" (over the budget of distinct values, '
            "too long, or with whitespace).",
            ["label"], registry=r,
        )  # fmt: skip
        for label in ("model_name", "engine", "method"):
            self.label_overflow.labels(label)
        self.cap = _LabelCap({**LABEL_BUDGET, **(label_budget or {})}, self.label_overflow)
        self.tuner_k = Gauge(
            "specobs_tuner_num_speculative_tokens",
            "k the online tuner (SPECOBS_TUNE=apply) runs in each batch bucket, from its latest decision there.",
            ["batch_size_bucket"], registry=r,
        )  # fmt: skip
        self.tuner_decisions = Counter(
            "specobs_tuner_decisions", "Decisions of the online tuner (suggest, apply, confirm, rollback, refuse).",
            ["action"], registry=r,
        )  # fmt: skip
        #: a row's (model, engine, method, num_spec_tokens) → its labels, k and k label, for rows
        #: none of whose values was folded into ``other`` (a folded one is counted row by row)
        self._published: dict[tuple[Any, ...], tuple[tuple[str, str, str], Any, str | None]] = {}

    def _labels_and_k(self, row: dict[str, Any]) -> tuple[tuple[str, str, str], Any, str | None]:
        """The row's labels (:meth:`labels_of`), its k and k label, remembered per raw values."""
        raw = (row.get("model"), row.get("engine"), row.get("method"), row.get("num_spec_tokens"))
        try:
            published = self._published.get(raw)
            hashable = True
        except TypeError:  # an unhashable value (a list for a model name): capped, never remembered
            published, hashable = None, False
        if published is not None:
            return published
        labels = self.labels_of(row)
        k = _count(row.get("num_spec_tokens"))
        k_label = self.cap("num_speculative_tokens", str(k)) if k else None
        published = (labels, k, k_label)
        if hashable and OTHER not in labels and k_label != OTHER and len(self._published) < PUBLISHED_CACHE:
            self._published[raw] = published
        return published

    def labels_of(self, row: dict[str, Any]) -> tuple[str, str, str]:
        """``(model_name, engine, method)`` of a row, each capped (see :class:`_LabelCap`)."""
        engine = row.get("engine")
        cap = self.cap
        return (
            cap("model_name", str(row.get("model") or "")),
            "" if engine is None else cap("engine", str(engine)),
            cap("method", str(row.get("method") or "none")),
        )

    def observe_step(self, row: dict[str, Any]) -> None:
        """One steps row (a capture row or an event-file record)."""
        self.observe_window(row, steps=1)

    def observe_decision(self, row: dict[str, Any]) -> None:
        """One row of the online tuner's decision log (``TunerDecision.to_row()``)."""

        action = row.get("tuner_action")
        if action not in TUNER_ACTIONS:
            return
        self.tuner_decisions.labels(action).inc()
        low = row.get("batch_size_min")
        if action in ("apply", "rollback") and isinstance(low, int) and isinstance(row.get("to_k"), int):
            self.tuner_k.labels(batch_size_bucket(low)).set(row["to_k"])

    def observe_window(self, row: dict[str, Any], steps: int | None = None) -> None:
        """A window of counts (a log interval) or a single step; timings only when timed."""
        labels, k, k_label = self._labels_and_k(row)
        timed = _count(row.get("num_timed_steps")) if steps is None else steps
        drafts = _count(row.get("num_drafts")) or 0
        per_pos = row.get("num_accepted_tokens_per_pos") or []
        drafts = drafts if _counts_ok(per_pos) else 0
        reached = drafts_per_position(row, drafts, k) if drafts else ()
        get = row.get
        draft_tokens = _count(get("num_draft_tokens")) or 0
        positions = 0.0
        timing = None
        if timed == 1:  # a single step: its timings are one observation each
            draft, verify, step = get("draft_seconds"), get("verify_seconds"), get("step_seconds")
            draft_ok, batch = _seconds(draft), get("batch_size")
            verify = verify if _seconds(verify) else None
            seconds = (draft if draft_ok else None, verify, step if _seconds(step) else None)
            timing = (batch_size_bucket(batch), seconds)
            requests = _count(batch)
            if draft_ok and draft_tokens and requests is not None and requests >= 1:  # a step with draft time
                positions = draft_positions(draft_tokens, requests)
        counts = (timed or 0, drafts, draft_tokens, _count(get("num_accepted_tokens")) or 0,
                  _count(get("num_generated_tokens")) or 0, positions)  # fmt: skip
        self.series.add(
            labels,
            counts,
            (per_pos, reached) if drafts and _counts_ok(reached) else None,
            timing,
            k_label,
        )

    def set_recommendation(self, recommendation: Recommendation, model: str | None, running: dict[str, int]) -> None:
        """Publish one model's latest recommendation (``running``: method → the k it runs with now).

        ``specobs_predicted_speedup`` is the traffic-weighted speedup of what runs now
        (``tuning.recommend.traffic_speedup``: measured where the input measured it, else the
        model's, as the recommendation compares them); below 1 it says speculation, as
        configured, costs throughput. ``specobs_recommended_num_speculative_tokens`` is the
        recommended k per bucket (0 = off). Series of an earlier refit are gone after this one.
        """
        self.tuning.set(model or "", recommendation, running)

    def replace_recommendations(self, latest: dict[str, tuple[Recommendation, dict[str, int]]]) -> None:
        """Every model's latest recommendation at once (model → (recommendation, running)):
        models left out are no longer published."""
        self.tuning.replace(latest)


class PrometheusSink:
    """Recorder sink: every captured step updates the metrics."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self.metrics = metrics

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        for row in rows:
            if "tuner_action" in row:
                self.metrics.observe_decision(row)
            elif is_step(row):  # per-request rows would count steps twice; metadata is no step
                self.metrics.observe_step(row)

    def close(self) -> None:
        pass


def serve(metrics: PrometheusMetrics, address: str = "127.0.0.1:9464") -> str:
    """Expose ``metrics`` over HTTP (``/metrics``) on ``address`` (host:port; 127.0.0.1 by default;
    ``[::1]:9464`` for IPv6). Returns the address actually bound, ``host:port`` (port 0 asks the
    system for a free port, and this names it)."""
    from prometheus_client import start_http_server

    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    started = start_http_server(int(port), addr=host, registry=metrics.registry)
    server = started[0] if isinstance(started, tuple) else None  # prometheus_client >= 0.17
    if server is None:
        return f"{host}:{port}"
    bound = server.server_address
    bound_host = bound[0].decode() if isinstance(bound[0], bytes) else str(bound[0])
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return f"{shown}:{bound[1]}"
