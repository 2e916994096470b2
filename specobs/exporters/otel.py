"""specobs metrics through OpenTelemetry: the Prometheus exporter's series, exported over OTLP/HTTP.

Enabled by the standard variables (:data:`OTEL_EXPORTER_OTLP_ENDPOINT` or
:data:`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, plus ``OTEL_EXPORTER_OTLP_HEADERS`` etc., read by the
OTLP exporter itself); nothing is set up when neither is set. The instruments (names, kinds,
units, attributes) and the variables are tabled in docs/exporters.md and docs/vllm.md, generated
from this module (``python docs/generate.py``).

Every family of the one table (:data:`specobs.ingest.specobs_metrics.FAMILIES`) is one instrument,
fed through the same dispatch and the same mapping as Prometheus
(:class:`~specobs.exporters.families.Exported`, :mod:`specobs.exporters.mapping`): the same
label caps, count checks and NaN guard, the same sums. Counters and gauges (the step counters, the
cost ratio, draft share and config info, the tuning gauges, the online tuner's families, the
recorder's and the sidecar's health counters) are observable instruments read from that state at
each export (one step costs plain additions, not an SDK call per field); the three timings are
histograms, recorded per step (OpenTelemetry has no summary), whose ``sum`` and ``count`` are the
Prometheus summaries'. What the mapping leaves out is counted in ``specobs.label_overflow{label}``
and ``specobs.dropped_values{reason}``.

Data-point attributes: ``model_name``, ``engine``, ``method`` (``position`` on the per-position
counters, ``batch_size_bucket`` on the durations, ``num_speculative_tokens`` on the config info,
the run-metadata labels on ``specobs.engine_info``). A run-metadata record feeds
``specobs.engine_info`` (an observable gauge of 1 per engine, replaced when the engine's
configuration changes) and a finished request ``specobs.request.acceptance_length`` (a histogram
with the Prometheus buckets, :data:`~specobs.exporters.mapping.REQUEST_ACCEPTANCE_BOUNDS`).

Resource attributes (:data:`RESOURCE_ATTRIBUTES`, from the engine's run metadata where the
capture knows it; a field it lacks is left out): ``service.name`` = specobs, ``specobs.model``,
``specobs.platform``, ``specobs.device``, ``specobs.device.arch``, ``vllm.version``,
``vllm.engine.index``, ``vllm.attention.backend``, ``vllm.graph_mode``, ``vllm.model_runner``,
``vllm.speculative.method``, ``vllm.speculative.num_speculative_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from specobs import dimensions
from specobs.capture.config import EnvironmentVariable
from specobs.exporters.families import Counts, Exported, Sink
from specobs.exporters.mapping import MAX_LABEL_LENGTH, TIMING_SPECS, RequestUpdate, StepUpdate
from specobs.ingest.specobs_metrics import (
    COUNTER,
    FAMILIES,
    HISTOGRAM,
    REQUEST_ACCEPTANCE,
    REQUEST_ACCEPTANCE_BOUNDS,
    TIMING,
    Family,
)

OTEL_EXPORTER_OTLP_ENDPOINT = EnvironmentVariable(
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    None,
    "OTLP/HTTP base URL (metrics go to `/v1/metrics`); set, with capture on, it turns OpenTelemetry export "
    "on in the engine-core process (headers and the rest: the standard `OTEL_EXPORTER_OTLP_*` variables)",
)
OTEL_EXPORTER_OTLP_METRICS_ENDPOINT = EnvironmentVariable(
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    None,
    "full URL for metrics only; turns export on like `OTEL_EXPORTER_OTLP_ENDPOINT`",
)
OTEL_METRIC_EXPORT_INTERVAL = EnvironmentVariable(
    "OTEL_METRIC_EXPORT_INTERVAL", "10000", "milliseconds between OTLP exports"
)
#: The OpenTelemetry variables specobs reads itself, in the order docs/vllm.md lists them.
VARIABLES: tuple[EnvironmentVariable, ...] = (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
    OTEL_METRIC_EXPORT_INTERVAL,
)


SERVICE_NAME = "specobs"
#: Run-metadata field (:class:`specobs.records.RunMetadata`, or a label of the capture) → the
#: resource attribute that carries it: the engine's identity and configuration, so a backend can
#: group and filter every series of one engine by what it ran.
RESOURCE_ATTRIBUTES = {d.field: d.otel for d in dimensions.having(dimensions.RESOURCE) if d.field and d.otel}


def resource_attributes(metadata: dict[str, Any]) -> dict[str, str]:
    """The resource attributes of an engine from its run-metadata fields (names as in
    :class:`specobs.records.RunMetadata`): a field that is missing, not a string or integer, longer
    than 100 characters or with control characters is left out (a space is fine: one process
    has one resource, and a device is named ``AMD Instinct MI300X``)::

        resource_attributes({"vllm_version": "0.32.0", "num_speculative_tokens": 3, "pid": 7})
        == {"vllm.version": "0.32.0", "vllm.speculative.num_speculative_tokens": "3"}
    """
    out = {}
    for field, attribute in RESOURCE_ATTRIBUTES.items():
        value = metadata.get(field)
        if isinstance(value, bool) or not isinstance(value, str | int):
            continue
        text = str(value)
        if text and len(text) <= MAX_LABEL_LENGTH and text.isprintable():
            out[attribute] = text
    return out


def otlp_configured() -> bool:
    """Whether the standard OTLP endpoint variables ask for metrics export."""
    return bool(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT.raw() or OTEL_EXPORTER_OTLP_ENDPOINT.raw())


class OtelMetrics(Exported):
    """The specobs families as instruments on a meter (one per row of the family table); the
    ``observe_*`` methods and :meth:`write` (the one dispatch) feed them."""

    def __init__(
        self, meter_provider: Any, label_budget: dict[str, int] | None = None, health: Counts | None = None
    ) -> None:
        """``label_budget`` and ``health`` as :class:`~specobs.exporters.prometheus.PrometheusMetrics`
        takes them."""
        from opentelemetry.metrics import Observation  # the optional dependency (specobs[otel])

        super().__init__(label_budget, health)
        self._observation = Observation
        meter = meter_provider.get_meter("specobs")
        self.provider = meter_provider
        #: timing or histogram family → its histogram; (labels, bucket) → the attributes of a duration point
        self.histograms: dict[Family, Any] = {}
        self._timed_attributes: dict[tuple[tuple[str, str, str], str], dict[str, str]] = {}
        #: labels → the attributes of a request point (bounded by the label caps)
        self._request_attributes: dict[tuple[str, str, str], dict[str, str]] = {}
        for family in FAMILIES:
            if family.kind == TIMING:
                self.histograms[family] = meter.create_histogram(family.otel, unit=family.unit, description=family.help)
                continue
            if family.kind == HISTOGRAM:  # the Prometheus buckets, so both count the same requests per bucket
                self.histograms[family] = meter.create_histogram(
                    family.otel, unit=family.unit, description=family.help,
                    explicit_bucket_boundaries_advisory=list(REQUEST_ACCEPTANCE_BOUNDS),
                )  # fmt: skip
                continue
            create = meter.create_observable_counter if family.kind == COUNTER else meter.create_observable_gauge
            create(family.otel, callbacks=[self._callback(family)], unit=family.unit, description=family.help)

    def _callback(self, family: Family) -> Callable[[Any], Iterable[Any]]:
        """What an observable instrument reports at export: its series among its source's points."""
        observation = self._observation
        source = family.source

        def observe(_options: Any) -> Iterable[Any]:
            return [
                observation(point.value, dict(zip(family.labels, point.labels, strict=True)))
                for point in self.points(source)
                if point.spec is family
            ]

        return observe

    @classmethod
    def from_environment(
        cls, resource_attributes: dict[str, str] | None = None, health: Counts | None = None
    ) -> OtelMetrics | None:
        """A provider exporting over OTLP/HTTP when the OTLP variables are set; else None (nothing
        is imported or started). ``resource_attributes``: attribute names as published (see
        :func:`resource_attributes`), added to ``service.name``; ``health``: the recorder's counters."""
        if not otlp_configured():
            return None
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        interval = OTEL_METRIC_EXPORT_INTERVAL.number()
        reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=interval)
        resource = Resource.create({"service.name": SERVICE_NAME, **(resource_attributes or {})})
        return cls(MeterProvider(resource=resource, metric_readers=[reader]), health=health)

    def _timed(self, update: StepUpdate) -> None:
        """A single step's durations, one histogram record each."""
        timing = update.timing
        if timing is None:
            return
        bucket, seconds = timing
        key = (update.labels, bucket)
        attributes = self._timed_attributes.get(key)
        if attributes is None:  # bounded: the label caps times the batch buckets
            attributes = self._timed_attributes[key] = dict(
                zip(TIMING_SPECS[0].labels, (*update.labels, bucket), strict=True)
            )
        for family, value in zip(TIMING_SPECS, seconds, strict=True):
            if value is not None:
                self.histograms[family].record(value, attributes)

    def _requested(self, update: RequestUpdate) -> None:
        """A finished request's acceptance length, one histogram record."""
        attributes = self._request_attributes.get(update.labels)
        if attributes is None:
            attributes = self._request_attributes[update.labels] = dict(
                zip(REQUEST_ACCEPTANCE.labels, update.labels, strict=True)
            )
        self.histograms[REQUEST_ACCEPTANCE].record(update.length, attributes)

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        return bool(self.provider.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self.provider.shutdown()


class OtelSink(Sink):
    """Recorder sink feeding the OpenTelemetry instruments (:meth:`Exported.write`); closing it
    flushes and shuts the provider down."""

    metrics: OtelMetrics

    def close(self) -> None:
        self.metrics.force_flush()
        self.metrics.shutdown()
