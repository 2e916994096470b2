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
- ``specobs_engine_info`` (value 1): one series per ``(model_name, engine)`` labelled with the
  engine's latest run metadata (``method``, ``num_speculative_tokens`` and
  :data:`~specobs.exporters.mapping.INFO_FIELDS`); a record with another configuration replaces
  the series, so a PromQL join on ``model_name, engine`` sees the current one only;
- histogram ``specobs_request_acceptance_length`` (fixed buckets
  :data:`~specobs.exporters.mapping.REQUEST_ACCEPTANCE_BOUNDS`): each finished request's acceptance
  length, when request capture (``SPECOBS_REQUESTS``) hands ``requests`` rows over;
- ``specobs_dropped_events_total``, ``specobs_hook_errors_total``, ``specobs_untimed_steps_total``
  (read from the recorder at scrape);
- ``specobs_label_overflow_total{label}`` and ``specobs_dropped_values_total{reason}``: what the
  mapping folded into ``other`` or left out.

A row becomes metric updates in :mod:`specobs.exporters.mapping`, the one mapping the
OpenTelemetry exporter uses too (the same series, label caps, checks and sums). Labels are
``model_name``, ``engine``, ``method`` (+ ``position``, ``batch_size_bucket``): all bounded. Never
request ids or prompt text. ``model_name``, ``engine`` and ``method`` come from the input, so their
values are capped (:data:`LABEL_BUDGET` distinct values per label, ``method`` limited to
:data:`specobs.schema.KNOWN_METHODS`); a value over the budget, longer than
:data:`MAX_LABEL_LENGTH` or with whitespace or control characters is published as ``other`` and
counted in ``specobs_label_overflow_total{label}``. Batch sizes from 2048 share one bucket. A count
that is not a non-negative integer, or a timing that is negative or not finite, never reaches a
metric, and a row whose counts contradict each other is left out whole; each is counted in
``specobs_dropped_values_total{reason}``.

The series one engine may publish are a budget (:func:`series_budget`, at most
:data:`SERIES_PER_ENGINE`): per-position counters rather than a histogram of accepted tokens per
draft (the distribution follows from them), and no ``_created`` on the timing summaries (their
means are ratios of ``_sum`` and ``_count``, which a reader misses alike before the first scrape).
A step's numbers are plain additions under one lock (:class:`~specobs.exporters.mapping.StepSums`);
the families are built from them at scrape. Every number published comes from the analysis and
tuning functions (bucket labels, drafts per position, a step's drafted positions, the cost ratio
and draft share, the traffic-weighted speedup): the exporter only counts and publishes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from specobs import buckets, schema
from specobs.advice.recommend import traffic_speedup
from specobs.capture.sinks import DECISION_KEY, is_step, side_kind
from specobs.exporters.mapping import (
    COUNTER,
    COUNTER_SPECS,
    ENGINE_SPECS,
    HEALTH_SPECS,
    HISTOGRAM,
    LABEL_BUDGET,
    LABELS,
    MAX_K_SERIES,
    MAX_LABEL_LENGTH,
    MAX_POSITIONS,
    METHODS,
    OTHER,
    PUBLISHED_CACHE,
    REQUEST_ACCEPTANCE_BOUNDS,
    STEP_SPECS,
    TIMING,
    TIMING_SPECS,
    EngineInfo,
    RequestSums,
    Spec,
    StepMapper,
    StepSums,
)
from specobs.records import TUNER_ACTIONS, Recommendation

__all__ = [
    "COUNTERS", "LABELS", "LABEL_BUDGET", "MAX_K_SERIES", "MAX_LABEL_LENGTH",
    "MAX_POSITIONS", "METHODS", "OTHER", "PUBLISHED_CACHE", "SERIES_PER_ENGINE", "TIMINGS", "PrometheusMetrics",
    "PrometheusSink", "series_budget", "series_of", "serve",
]  # fmt: skip

#: The series one engine may publish at most, by design: :func:`series_budget` with every method an
#: engine could run at once, k = MAX_POSITIONS and every batch bucket (tests/test_exporters.py
#: holds a real scrape to it; docs/exporters.md shows the budget).
SERIES_PER_ENGINE = 550
#: The counters of every (model_name, engine, method) as ``(family, help)``, in the order of
#: :data:`specobs.exporters.mapping.COUNTER_SPECS`.
COUNTERS = tuple((spec.name, spec.help) for spec in COUNTER_SPECS)
#: The timing summaries per batch bucket as ``(family, help)``: draft, verify, step seconds.
TIMINGS = tuple((spec.name, spec.help) for spec in TIMING_SPECS)


def series_budget(
    methods: int = 3, batch_buckets: int = len(buckets.BOUNDED_LABELS), positions: int = MAX_POSITIONS
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
        (("specobs_request_acceptance_length",), f"`_bucket` × {len(REQUEST_ACCEPTANCE_BOUNDS) + 1}, `_sum`, `_count`",
         methods * (len(REQUEST_ACCEPTANCE_BOUNDS) + 3)),
        (("specobs_engine_info",), "one: the latest run metadata", 1),
    ]  # fmt: skip


def series_of(registry: CollectorRegistry) -> int:
    """How many series a scrape of ``registry`` holds (samples, ``_created`` included)."""
    return sum(len(family.samples) for family in registry.collect())


def _family(spec: Spec) -> Metric:
    if spec.kind == COUNTER:
        return CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
    if spec.kind == TIMING:
        return SummaryMetricFamily(spec.name, spec.help, labels=spec.labels)
    if spec.kind == HISTOGRAM:
        return HistogramMetricFamily(spec.name, spec.help, labels=spec.labels)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)


#: ``le`` of each bucket of ``specobs_request_acceptance_length``, as the text format writes it.
_REQUEST_LE = (*map(floatToGoString, REQUEST_ACCEPTANCE_BOUNDS), "+Inf")


class _StepSeries(Collector):
    """Every family a steps row, a run-metadata record or a finished request feeds, and what the
    mapping left out: built at scrape from the mapping's plain sums
    (:class:`~specobs.exporters.mapping.StepSums`, :class:`~specobs.exporters.mapping.EngineInfo`,
    :class:`~specobs.exporters.mapping.RequestSums`) and counts."""

    def __init__(self, mapper: StepMapper, sums: StepSums, info: EngineInfo, requests: RequestSums) -> None:
        self.mapper = mapper
        self.sums = sums
        self.info = info
        self.requests = requests

    def collect(self) -> Iterable[Metric]:
        families = {spec: _family(spec) for spec in (*STEP_SPECS, *ENGINE_SPECS, *HEALTH_SPECS)}
        points = (*self.sums.points(), *self.info.points(), *self.requests.points(), *self.mapper.points())
        for spec, labels, value, created in points:
            family = families[spec]
            if spec.kind == HISTOGRAM:
                cumulative, total, _ = value
                family.add_metric(labels, list(zip(_REQUEST_LE, cumulative, strict=True)), total)  # type: ignore[attr-defined]
            elif spec.kind == TIMING:
                family.add_metric(labels, value[0], value[1])  # type: ignore[attr-defined]
            elif created is not None:
                family.add_metric(labels, value, created=created)  # type: ignore[attr-defined]
            else:
                family.add_metric(labels, value)  # type: ignore[attr-defined]
        yield from families.values()


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
                bucket = buckets.label(row.batch_size_min, row.batch_size_max)
                recommended.add_metric([model, row.method or "none", bucket], row.num_speculative_tokens)
        yield speedup
        yield recommended


class _Health(Collector):
    """``specobs_dropped_events_total``, ``specobs_hook_errors_total`` and
    ``specobs_untimed_steps_total``, read at scrape time."""

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
        yield CounterMetricFamily(
            "specobs_untimed_steps",
            "Engine steps that ran but whose draft/verify timing never reached the engine core (left untimed).",
            value=values.get("untimed_steps", 0),
        )


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
        #: the one mapping from a row to metric updates (shared with OpenTelemetry), and its sums
        self.mapper = StepMapper(label_budget)
        self.cap = self.mapper.cap
        self.sums = StepSums()
        #: each engine's latest run metadata, and the per-request acceptance histogram
        self.info = EngineInfo()
        self.requests = RequestSums()
        self.series = _StepSeries(self.mapper, self.sums, self.info, self.requests)
        r.register(self.series)
        self.tuning = _Tuning()
        r.register(self.tuning)
        if health is not None:
            r.register(_Health(health))
        self.tuner_k = Gauge(
            "specobs_tuner_num_speculative_tokens",
            "k the online tuner (SPECOBS_ONLINE_TUNER=apply) runs in each batch bucket, from its latest "
            "decision there.",
            ["batch_size_bucket"], registry=r,
        )  # fmt: skip
        self.tuner_decisions = Counter(
            "specobs_tuner_decisions", "Decisions of the online tuner (suggest, apply, confirm, rollback, refuse).",
            ["action"], registry=r,
        )  # fmt: skip

    def labels_of(self, row: dict[str, Any]) -> tuple[str, str, str]:
        """``(model_name, engine, method)`` of a row, each capped (see :class:`~specobs.exporters.mapping.LabelCap`)."""
        return self.mapper.labels_of(row)

    def observe_step(self, row: dict[str, Any]) -> None:
        """One steps row (a capture row or an event-file record)."""
        update = self.mapper.map(row, 1)
        if update is not None:
            self.sums.add(update)

    def observe_metadata(self, record: Any) -> bool:
        """An engine's run metadata (the capture's record or a :class:`~specobs.records.RunMetadata`):
        ``specobs_engine_info`` of its ``(model_name, engine)`` becomes this one (False: the record
        is older than the one published, and ignored)."""
        return self.info.set(self.mapper.map_metadata(record))

    def observe_request(self, row: dict[str, Any]) -> None:
        """A finished request (a ``requests`` row): one observation of
        ``specobs_request_acceptance_length`` (none for a request without drafts)."""
        update = self.mapper.map_request(row)
        if update is not None:
            self.requests.add(update)

    def observe_decision(self, row: dict[str, Any]) -> None:
        """One row of the online tuner's decision log (``TunerDecision.to_row()``)."""

        action = row.get("tuner_action")
        if action not in TUNER_ACTIONS:
            return
        self.tuner_decisions.labels(action).inc()
        low = row.get("batch_size_min")
        if action in ("apply", "rollback") and isinstance(low, int) and isinstance(row.get("to_k"), int):
            self.tuner_k.labels(buckets.bounded_label(low)).set(row["to_k"])

    def observe_window(self, row: dict[str, Any], steps: int | None = None) -> None:
        """A window of counts (a log interval) or a single step; timings only when timed."""
        update = self.mapper.map(row, steps)
        if update is not None:
            self.sums.add(update)

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
            if is_step(row):  # per-request shares of a step would count steps twice
                self.metrics.observe_step(row)
                continue
            kind = side_kind(row)
            if kind == DECISION_KEY:
                self.metrics.observe_decision(row)
            elif kind == schema.METADATA_KEY:
                self.metrics.observe_metadata(row)
            elif kind == schema.REQUEST_KEY:
                self.metrics.observe_request(row)

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
