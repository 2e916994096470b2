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

Every family is one row of the family table (:mod:`specobs.ingest.specobs_metrics`), built at
scrape by one collector from the state :class:`~specobs.exporters.families.Exported` holds; rows
reach it through that class's one dispatch and become metric updates in
:mod:`specobs.exporters.mapping`, both shared with the OpenTelemetry exporter (the same series,
label caps, checks and sums). Labels are
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

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from specobs import buckets
from specobs.exporters.families import Counts, Exported, Sink
from specobs.exporters.mapping import (
    COUNTER_SPECS,
    LABEL_BUDGET,
    LABELS,
    MAX_K_SERIES,
    MAX_LABEL_LENGTH,
    MAX_POSITIONS,
    METHODS,
    OTHER,
    PUBLISHED_CACHE,
    TIMING_SPECS,
    Point,
)
from specobs.ingest import specobs_metrics as table
from specobs.ingest.specobs_metrics import COUNTER, HISTOGRAM, REQUEST_ACCEPTANCE_BOUNDS, TIMING, Family

__all__ = [
    "COUNTERS", "LABELS", "LABEL_BUDGET", "MAX_K_SERIES", "MAX_LABEL_LENGTH",
    "MAX_POSITIONS", "METHODS", "OTHER", "PUBLISHED_CACHE", "SERIES_PER_ENGINE", "TIMINGS", "PrometheusMetrics",
    "PrometheusSink", "families", "series_budget", "series_of", "serve",
]  # fmt: skip

#: The series one engine may publish at most, by design: :func:`series_budget` with every method an
#: engine could run at once, k = MAX_POSITIONS and every batch bucket (tests/exporters/test_exporters.py
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
    per_position = (table.ACCEPTED_PER_POSITION.name, table.DRAFTS_PER_POSITION.name)
    return [
        (tuple(name for name, _ in COUNTERS), "`_total`, `_created`", methods * len(COUNTERS) * 2),
        (per_position, f"`_total`, `_created` × {positions} positions", methods * len(per_position) * positions * 2),
        (tuple(name for name, _ in TIMINGS), f"`_sum`, `_count` × {batch_buckets} batch buckets",
         methods * len(TIMINGS) * batch_buckets * 2),
        ((table.COST_RATIO.name, table.DRAFT_SHARE.name), "one", methods * 2),
        ((table.CONFIG_INFO.name,), f"one per k, the last {MAX_K_SERIES} seen", methods * MAX_K_SERIES),
        ((table.REQUEST_ACCEPTANCE.name,), f"`_bucket` × {len(REQUEST_ACCEPTANCE_BOUNDS) + 1}, `_sum`, `_count`",
         methods * (len(REQUEST_ACCEPTANCE_BOUNDS) + 3)),
        ((table.ENGINE_INFO.name,), "one: the latest run metadata", 1),
    ]  # fmt: skip


def series_of(registry: CollectorRegistry) -> int:
    """How many series a scrape of ``registry`` holds (samples, ``_created`` included)."""
    return sum(len(family.samples) for family in registry.collect())


#: Kind → the ``prometheus_client`` family a scrape builds (a TIMING is a summary without quantiles).
_FAMILY_CLASSES: dict[str, Callable[..., Metric]] = {
    COUNTER: CounterMetricFamily,
    TIMING: SummaryMetricFamily,
    HISTOGRAM: HistogramMetricFamily,
    table.GAUGE: GaugeMetricFamily,
}
#: ``le`` of each bucket of ``specobs_request_acceptance_length``, as the text format writes it.
_REQUEST_LE = (*map(floatToGoString, REQUEST_ACCEPTANCE_BOUNDS), "+Inf")


def families(published: Iterable[Family], points: Iterable[Point]) -> list[Metric]:
    """One ``prometheus_client`` family per table row in ``published``, holding its ``points``: a
    counter's value with its ``_created``, a timing's ``(count, sum)`` as a summary's, a histogram's
    ``(cumulative counts, sum, count)`` as its ``_bucket`` series, a gauge's value."""
    out = {family: _FAMILY_CLASSES[family.kind](family.name, family.help, labels=family.labels) for family in published}
    for spec, labels, value, created in points:
        family = out.get(spec)
        if family is None:
            continue
        if spec.kind == HISTOGRAM:
            cumulative, total, _ = value
            family.add_metric(labels, list(zip(_REQUEST_LE, cumulative, strict=True)), total)  # type: ignore[attr-defined]
        elif spec.kind == TIMING:
            family.add_metric(labels, value[0], value[1])  # type: ignore[attr-defined]
        elif created is not None:
            family.add_metric(labels, value, created=created)  # type: ignore[attr-defined]
        else:
            family.add_metric(labels, value)  # type: ignore[attr-defined]
    return list(out.values())


class _Families(Collector):
    """Every published family of the table, built afresh at each scrape from the exporter's state
    (client_python's idiom: a family no longer fed, such as an earlier refit's, disappears)."""

    def __init__(self, metrics: Exported) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return families(self.metrics.published(), self.metrics.all_points())


class PrometheusMetrics(Exported):
    """The specobs families on one ``prometheus_client`` registry (a fresh one unless passed in);
    the ``observe_*`` methods and :meth:`write` (the one dispatch) feed them.

        registry = CollectorRegistry()
        metrics = PrometheusMetrics(registry)
        metrics.observe_step({"model": "m", "engine": 0, "method": "ngram", "num_drafts": 4, ...})
        registry.get_sample_value("specobs_drafts_total", {"model_name": "m", "engine": "0", "method": "ngram"})
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        health: Counts | None = None,
        label_budget: dict[str, int] | None = None,
    ) -> None:
        """``health``: the recorder's counters, read at scrape (``specobs_dropped_events_total``,
        ``specobs_hook_errors_total``, ``specobs_untimed_steps_total``); ``label_budget``: distinct
        values per label (``model_name``, ``engine``, ``num_speculative_tokens``) before the rest
        become ``other``; :data:`LABEL_BUDGET` by default."""
        super().__init__(label_budget, health)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.collector = _Families(self)
        self.registry.register(self.collector)


class PrometheusSink(Sink):
    """Recorder sink: every captured row updates the metrics (:meth:`Exported.write`)."""


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
