"""specobs metrics through OpenTelemetry: the Prometheus exporter's series, exported over OTLP/HTTP.

Enabled by the standard variables (:data:`OTEL_EXPORTER_OTLP_ENDPOINT` or
:data:`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, plus ``OTEL_EXPORTER_OTLP_HEADERS`` etc., read by the
OTLP exporter itself); nothing is set up when neither is set. The instruments (names, kinds,
units, attributes) and the variables are tabled in docs/exporters.md and docs/vllm.md, generated
from this module (``python docs/generate.py``).

A row goes through the same mapping as Prometheus (:mod:`specobs.exporters.mapping`): the same
label caps, count checks and NaN guard, the same sums. Counters, the cost ratio, the draft share
and the config info are observable instruments read from those sums at each export (one step
costs plain additions, not an SDK call per field); the three timings are histograms, recorded per
step (OpenTelemetry has no summary), whose ``sum`` and ``count`` are the Prometheus summaries'.
What the mapping leaves out is counted in ``specobs.label_overflow{label}`` and
``specobs.dropped_values{reason}``.

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

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from specobs import dimensions, schema
from specobs.capture.config import EnvironmentVariable
from specobs.capture.sinks import is_step, side_kind
from specobs.exporters.mapping import (
    COUNTER,
    ENGINE_INFO,
    HISTOGRAM,
    MAX_LABEL_LENGTH,
    REQUEST_ACCEPTANCE,
    REQUEST_ACCEPTANCE_BOUNDS,
    SPECS,
    STEP_SPECS,
    TIMING,
    TIMING_SPECS,
    EngineInfo,
    Spec,
    StepMapper,
    StepSums,
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


class OtelMetrics:
    """The specobs instruments on a meter; ``observe_step`` feeds them from a steps row."""

    def __init__(self, meter_provider: Any, label_budget: dict[str, int] | None = None) -> None:
        """``label_budget`` as :class:`~specobs.exporters.prometheus.PrometheusMetrics` takes it."""
        from opentelemetry.metrics import Observation  # the optional dependency (specobs[otel])

        self._observation = Observation
        meter = meter_provider.get_meter("specobs")
        self.provider = meter_provider
        self.mapper = StepMapper(label_budget)
        self.sums = StepSums()
        self.info = EngineInfo()
        #: timing spec → its histogram; (labels, bucket) → the attributes of a duration point
        self.histograms: dict[Spec, Any] = {}
        self._timed_attributes: dict[tuple[tuple[str, str, str], str], dict[str, str]] = {}
        #: labels → the attributes of a request point (bounded by the label caps)
        self._request_attributes: dict[tuple[str, str, str], dict[str, str]] = {}
        for spec in SPECS:
            if spec.kind == TIMING:
                self.histograms[spec] = meter.create_histogram(spec.otel, unit=spec.unit, description=spec.help)
                continue
            if spec.kind == HISTOGRAM:  # the Prometheus buckets, so both count the same requests per bucket
                self.histograms[spec] = meter.create_histogram(
                    spec.otel, unit=spec.unit, description=spec.help,
                    explicit_bucket_boundaries_advisory=list(REQUEST_ACCEPTANCE_BOUNDS),
                )  # fmt: skip
                continue
            create = meter.create_observable_counter if spec.kind == COUNTER else meter.create_observable_gauge
            create(spec.otel, callbacks=[self._callback(spec)], unit=spec.unit, description=spec.help)

    def _callback(self, spec: Spec) -> Callable[[Any], Iterable[Any]]:
        """What an observable instrument reports at export: its series in the mapping's sums."""
        source = (
            self.sums.points if spec in STEP_SPECS else self.info.points if spec is ENGINE_INFO else self.mapper.points
        )
        observation = self._observation

        def observe(_options: Any) -> Iterable[Any]:
            return [
                observation(point.value, dict(zip(spec.labels, point.labels, strict=True)))
                for point in source()
                if point.spec is spec
            ]

        return observe

    @classmethod
    def from_environment(cls, resource_attributes: dict[str, str] | None = None) -> OtelMetrics | None:
        """A provider exporting over OTLP/HTTP when the OTLP variables are set; else None (nothing
        is imported or started). ``resource_attributes``: attribute names as published (see
        :func:`resource_attributes`), added to ``service.name``."""
        if not otlp_configured():
            return None
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        interval = OTEL_METRIC_EXPORT_INTERVAL.number()
        reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=interval)
        resource = Resource.create({"service.name": SERVICE_NAME, **(resource_attributes or {})})
        return cls(MeterProvider(resource=resource, metric_readers=[reader]))

    def observe_step(self, row: dict[str, Any]) -> None:
        """One steps row (a capture row or an event-file record)."""
        self.observe_window(row, steps=1)

    def observe_window(self, row: dict[str, Any], steps: int | None = None) -> None:
        """A window of counts (a log interval) or a single step; timings only when timed."""
        update = self.mapper.map(row, steps)
        if update is None:
            return
        self.sums.add(update)
        if update.timing is not None:
            bucket, seconds = update.timing
            key = (update.labels, bucket)
            attributes = self._timed_attributes.get(key)
            if attributes is None:  # bounded: the label caps times the batch buckets
                attributes = self._timed_attributes[key] = dict(
                    zip(TIMING_SPECS[0].labels, (*update.labels, bucket), strict=True)
                )
            for spec, value in zip(TIMING_SPECS, seconds, strict=True):
                if value is not None:
                    self.histograms[spec].record(value, attributes)

    def observe_metadata(self, record: Any) -> bool:
        """An engine's run metadata: ``specobs.engine_info`` of its ``(model_name, engine)``
        becomes this one (False: older than the one published, ignored)."""
        return self.info.set(self.mapper.map_metadata(record))

    def observe_request(self, row: dict[str, Any]) -> None:
        """A finished request: one observation of ``specobs.request.acceptance_length``."""
        update = self.mapper.map_request(row)
        if update is None:
            return
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


class OtelSink:
    """Recorder sink feeding the OpenTelemetry instruments."""

    def __init__(self, metrics: OtelMetrics) -> None:
        self.metrics = metrics

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        for row in rows:
            if is_step(row):  # no per-request shares of a step, no decisions
                self.metrics.observe_step(row)
                continue
            kind = side_kind(row)
            if kind == schema.METADATA_KEY:
                self.metrics.observe_metadata(row)
            elif kind == schema.REQUEST_KEY:
                self.metrics.observe_request(row)

    def close(self) -> None:
        self.metrics.force_flush()
        self.metrics.shutdown()
