"""specobs metrics for Prometheus, on a ``prometheus_client`` registry (pass a fresh one in tests).

Names and labels are a contract (docs/exporters.md, rules in exporters/prometheus/):

- counters ``specobs_steps_total``, ``specobs_drafts_total``, ``specobs_draft_tokens_total``,
  ``specobs_accepted_tokens_total``, ``specobs_accepted_tokens_per_position_total{position}``,
  ``specobs_drafts_per_position_total{position}`` (drafts that reached the position: the
  denominator of the per-position rate), ``specobs_generated_tokens_total``;
- summaries ``specobs_draft_seconds``, ``specobs_verify_seconds``, ``specobs_step_seconds``
  (``_sum`` and ``_count`` with ``batch_size_bucket``: mean times per batch bucket, which is
  what the rules, the dashboards and the fleet path read; no quantile buckets, which would
  multiply every batch bucket by 13 series) and the histogram ``specobs_accepted_tokens_per_draft``;
- gauges ``specobs_predicted_speedup`` (of the configuration that runs now),
  ``specobs_recommended_num_speculative_tokens`` (both from the latest refit only: a collector
  yields them afresh, so a method or bucket that is no longer recommended disappears),
  ``specobs_cost_ratio``, ``specobs_speculative_config_info``;
- ``specobs_dropped_events_total``, ``specobs_hook_errors_total`` (read from the recorder at scrape).

Labels are ``model_name``, ``engine``, ``method`` (+ ``position``, ``batch_size_bucket``): all
bounded. Never request ids or prompt text. ``model_name``, ``engine`` and ``method`` come from
the input, so their values are capped (:data:`LABEL_BUDGET` distinct values per label, ``method``
limited to :data:`specobs.schema.KNOWN_METHODS`); a value over the budget, longer than
:data:`MAX_LABEL_LENGTH` or with whitespace or control characters is published as ``other``
and counted in ``specobs_label_overflow_total{label}``. Non-finite or negative values never
reach a metric: such a timing is not observed, such a count not added.

The accepted-tokens-per-draft histogram is rebuilt from per-position counts
(``analysis.acceptance.accepted_length_counts``) and kept by a snapshot collector, because
observing it draft by draft would cost a call per draft. Every number published here comes
from the analysis and tuning functions (bucket labels, drafts per position, the cost ratio,
the traffic-weighted speedup): the exporter only counts and publishes.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Summary
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from specobs import schema
from specobs.analysis.acceptance import accepted_length_counts, bucket_label, bucket_of, drafts_per_position
from specobs.analysis.cost import cost_ratio
from specobs.capture.sinks import is_step
from specobs.results import Recommendation
from specobs.tuning.recommend import traffic_speedup

LABELS = ("model_name", "engine", "method")
MAX_POSITIONS = 16
#: The series one engine may publish at most, by design (one method, k up to MAX_POSITIONS,
#: every batch bucket; tests/test_exporters.py holds the exporter to it; docs/exporters.md).
SERIES_PER_ENGINE = 500
#: Distinct values each input-derived label may take before the rest are folded into ``other``.
LABEL_BUDGET = {"model_name": 32, "engine": 16, "num_speculative_tokens": 16}
#: ``method`` takes vLLM's method names, ``none`` (no method in the input) and ``other``.
METHODS = frozenset((*schema.KNOWN_METHODS, "none"))
MAX_LABEL_LENGTH = 100
OTHER = "other"


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
    return value if _finite(value) and value > 0 else None


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


def batch_size_bucket(batch: int | None) -> str:
    """``1``, ``2-3``, ``4-7`` …: the analysis's power-of-two buckets (``unknown`` without a batch size)."""
    return bucket_of(batch) or "unknown"


class _AcceptedPerDraft(Collector):
    """Histogram of accepted tokens per draft, from per-position counts (snapshot collector)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0] * (MAX_POSITIONS + 2))
        self._sums: dict[tuple[str, ...], int] = defaultdict(int)

    def add(self, labels: tuple[str, ...], drafts: int, per_pos: Sequence[int]) -> None:
        by_length = accepted_length_counts(drafts, per_pos, MAX_POSITIONS + 1)
        with self._lock:
            counts = self._counts[labels]
            for j, n in enumerate(by_length):
                counts[j] += n
            self._sums[labels] += sum(per_pos)

    def collect(self) -> Iterable[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "specobs_accepted_tokens_per_draft",
            "Accepted draft tokens per draft (bonus token not counted).",
            labels=LABELS,
        )
        with self._lock:
            for labels, counts in self._counts.items():
                cumulative, buckets = 0, []
                for j in range(MAX_POSITIONS + 1):
                    cumulative += counts[j]
                    buckets.append((str(j), cumulative))
                buckets.append(("+Inf", cumulative + counts[MAX_POSITIONS + 1]))
                family.add_metric(list(labels), buckets, self._sums[labels])
        yield family


class _PerPosition(Collector):
    """``specobs_accepted_tokens_per_position_total`` and ``specobs_drafts_per_position_total``
    kept as plain sums and yielded afresh at scrape (with each series' ``_created``): 32
    ``Counter.inc`` calls per step cost more than all the rest of a step's export."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # labels → (accepted, reached, accepted created, reached created), one slot a position
        self._series: dict[tuple[str, ...], tuple[list[int], list[int], list[float], list[float]]] = {}

    def add(self, labels: tuple[str, ...], accepted: Sequence[int], reached: Sequence[int]) -> None:
        """Add one row's per-position counts; a reached position gets its accepted series too,
        at 0 if need be (a rate of 0 must be a sample that raises SpecDecodeWastedPositions, not
        a missing series)."""
        now = 0.0  # read the clock only when a series appears
        with self._lock:
            entry = self._series.get(labels)
            if entry is None:
                entry = self._series[labels] = (
                    [0] * MAX_POSITIONS, [0] * MAX_POSITIONS, [0.0] * MAX_POSITIONS, [0.0] * MAX_POSITIONS
                )  # fmt: skip
            sums, tried, sums_created, tried_created = entry
            for position in range(min(max(len(accepted), len(reached)), MAX_POSITIONS)):
                a = accepted[position] if position < len(accepted) else 0
                n = reached[position] if position < len(reached) else 0
                if a or n:
                    sums[position] += a
                    if not sums_created[position]:
                        now = sums_created[position] = now or time.time()
                if n:
                    tried[position] += n
                    if not tried_created[position]:
                        now = tried_created[position] = now or time.time()

    def collect(self) -> Iterable[CounterMetricFamily]:
        labels = [*LABELS, "position"]
        accepted = CounterMetricFamily(
            "specobs_accepted_tokens_per_position", "Drafts whose first position+1 tokens were accepted.", labels=labels
        )
        reached = CounterMetricFamily(
            "specobs_drafts_per_position",
            "Drafts that reached the position (drafted more than position tokens).",
            labels=labels,
        )
        with self._lock:
            for key, (sums, tried, sums_created, tried_created) in self._series.items():
                for position in range(MAX_POSITIONS):
                    if sums_created[position]:
                        accepted.add_metric([*key, str(position)], sums[position], created=sums_created[position])
                    if tried_created[position]:
                        reached.add_metric([*key, str(position)], tried[position], created=tried_created[position])
        yield accepted
        yield reached


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

    _counter_cls = Counter
    _summary_cls = Summary
    _gauge_cls = Gauge

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

        def counter(name: str, doc: str, labels: Sequence[str] = LABELS) -> Counter:
            return self._counter_cls(name, doc, list(labels), registry=r)

        def timing(name: str, doc: str) -> Summary:
            return self._summary_cls(name, doc, [*LABELS, "batch_size_bucket"], registry=r)

        self.steps = counter("specobs_steps", "Engine steps observed.")
        self.drafts = counter("specobs_drafts", "Drafts verified.")
        self.draft_tokens = counter("specobs_draft_tokens", "Draft tokens proposed and verified.")
        self.accepted = counter("specobs_accepted_tokens", "Draft tokens accepted.")
        self.per_position = _PerPosition()
        r.register(self.per_position)
        self.generated = counter("specobs_generated_tokens", "Tokens generated.")
        self.draft_seconds = timing("specobs_draft_seconds", "Time in the proposer per step.")
        self.verify_seconds = timing("specobs_verify_seconds", "Target forward and rejection sampling per step.")
        self.step_seconds = timing("specobs_step_seconds", "Whole engine step.")
        self.cost_ratio = self._gauge_cls(
            "specobs_cost_ratio", "Mean draft seconds per drafted token over mean verify seconds per step.",
            list(LABELS), registry=r,
        )  # fmt: skip
        self.config_info = self._gauge_cls(
            "specobs_speculative_config_info", "1 while a speculative engine is observed.",
            [*LABELS, "num_speculative_tokens"], registry=r,
        )  # fmt: skip
        self.accepted_per_draft = _AcceptedPerDraft()
        r.register(self.accepted_per_draft)
        self.tuning = _Tuning()
        r.register(self.tuning)
        if health is not None:
            r.register(_Health(health))
        self.label_overflow = self._counter_cls(
            "specobs_label_overflow",
            'Observations whose label value was published as "other" (over the budget of distinct values, '
            "too long, or with whitespace).",
            ["label"], registry=r,
        )  # fmt: skip
        for label in ("model_name", "engine", "method"):
            self.label_overflow.labels(label)
        self.cap = _LabelCap({**LABEL_BUDGET, **(label_budget or {})}, self.label_overflow)
        self.tuner_k = self._gauge_cls(
            "specobs_tuner_num_speculative_tokens",
            "k the online tuner (SPECOBS_TUNE=apply) runs in each batch bucket, from its latest decision there.",
            ["batch_size_bucket"], registry=r,
        )  # fmt: skip
        self.tuner_decisions = counter(
            "specobs_tuner_decisions", "Decisions of the online tuner (suggest, apply, confirm, rollback, refuse).",
            ["action"],
        )  # fmt: skip
        self._timing: dict[tuple[str, ...], list[float]] = defaultdict(lambda: [0.0, 0, 0.0, 0])
        self._children: dict[tuple, Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached: the lookup costs more than the increment."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

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
        from specobs.tuning.online import ACTIONS

        action = row.get("tuner_action")
        if action not in ACTIONS:
            return
        self._child(self.tuner_decisions, action).inc()
        low = row.get("batch_size_min")
        if action in ("apply", "rollback") and isinstance(low, int) and isinstance(row.get("to_k"), int):
            self._child(self.tuner_k, batch_size_bucket(low)).set(row["to_k"])

    def observe_window(self, row: dict[str, Any], steps: int | None = None) -> None:
        """A window of counts (a log interval) or a single step; timings only when timed."""
        labels = self.labels_of(row)
        k = _count(row.get("num_spec_tokens"))
        if k:
            self._child(self.config_info, *labels, self.cap("num_speculative_tokens", str(k))).set(1)
        timed = _count(row.get("num_timed_steps")) if steps is None else steps
        if timed:
            self._child(self.steps, *labels).inc(timed)
        drafts = _count(row.get("num_drafts")) or 0
        per_pos = row.get("num_accepted_tokens_per_pos") or []
        # Integers (what capture and the validated readers give) are checked fast; anything
        # else must be a finite non-negative number.
        per_pos_ok = all(type(v) is int and v >= 0 for v in per_pos) or all(
            _count(v) is not None or v == 0 for v in per_pos
        )
        if drafts and per_pos_ok:
            self._child(self.drafts, *labels).inc(drafts)
            self.per_position.add(labels, per_pos, drafts_per_position(row, drafts, k))
            if per_pos:
                self.accepted_per_draft.add(labels, drafts, per_pos)
        for counter, key in ((self.draft_tokens, "num_draft_tokens"), (self.accepted, "num_accepted_tokens"),
                             (self.generated, "num_generated_tokens")):  # fmt: skip
            value = _count(row.get(key))
            if value:
                self._child(counter, *labels).inc(value)
        if timed == 1:  # a single step: its timings are one observation each
            bucket = batch_size_bucket(row.get("batch_size"))
            for summary, key in ((self.draft_seconds, "draft_seconds"), (self.verify_seconds, "verify_seconds"),
                                 (self.step_seconds, "step_seconds")):  # fmt: skip
                value = row.get(key)
                if _finite(value) and value >= 0:  # type: ignore[operator]  # a NaN would poison the sum for good
                    self._child(summary, *labels, bucket).observe(value)
            self._update_cost_ratio(labels, row)

    def _update_cost_ratio(self, labels: tuple[str, ...], row: dict[str, Any]) -> None:
        draft, tokens, verify = row.get("draft_seconds"), row.get("num_draft_tokens"), row.get("verify_seconds")
        if not (_finite(draft) and _finite(verify) and _count(tokens)):
            return
        assert draft is not None and verify is not None and tokens is not None
        if draft < 0 or verify < 0:
            return
        t = self._timing[labels]
        t[0] += draft
        t[1] += tokens
        t[2] += verify
        t[3] += 1
        if t[1] and t[2]:
            self._child(self.cost_ratio, *labels).set(cost_ratio(t[0], t[1], t[2], t[3]))

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
