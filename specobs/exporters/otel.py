"""specobs metrics through OpenTelemetry: the same instruments, exported over OTLP/HTTP.

Enabled by the standard variables (:data:`OTEL_EXPORTER_OTLP_ENDPOINT` or
:data:`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, plus ``OTEL_EXPORTER_OTLP_HEADERS`` etc., read by the
OTLP exporter itself); nothing is set up when neither is set. The instruments (names, kinds,
units, attributes) and the variables are tabled in docs/exporters.md and docs/vllm.md, generated
from this module (``python docs/generate.py``).

Data-point attributes: ``model_name``, ``engine``, ``method`` (``position`` on the per-position
counters, ``batch_size_bucket`` on the durations); resource attributes: ``service.name`` =
specobs, ``specobs.platform``, ``specobs.device``, ``specobs.model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specobs.capture.config import EnvironmentVariable
from specobs.capture.sinks import is_step
from specobs.exporters.prometheus import MAX_POSITIONS, batch_size_bucket, drafts_per_position

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


def otlp_configured() -> bool:
    """Whether the standard OTLP endpoint variables ask for metrics export."""
    return bool(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT.raw() or OTEL_EXPORTER_OTLP_ENDPOINT.raw())


class OtelMetrics:
    """The specobs instruments on a meter; ``observe_step`` feeds them from a steps row."""

    def __init__(self, meter_provider: Any) -> None:
        meter = meter_provider.get_meter("specobs")
        self.provider = meter_provider
        self.steps = meter.create_counter("specobs.steps", unit="{step}", description="Engine steps observed.")
        self.drafts = meter.create_counter("specobs.drafts", unit="{draft}", description="Drafts verified.")
        self.draft_tokens = meter.create_counter(
            "specobs.draft_tokens", unit="{token}", description="Draft tokens proposed and verified."
        )
        self.accepted = meter.create_counter("specobs.accepted_tokens", unit="{token}", description="Accepted tokens.")
        self.per_position = meter.create_counter(
            "specobs.accepted_tokens.position", unit="{draft}",
            description="Drafts whose first position+1 tokens were accepted.",
        )  # fmt: skip
        self.drafts_per_position = meter.create_counter(
            "specobs.drafts.position", unit="{draft}",
            description="Drafts that reached the position (drafted more than position tokens).",
        )  # fmt: skip
        self.generated = meter.create_counter(
            "specobs.generated_tokens", unit="{token}", description="Tokens generated."
        )
        self.draft = meter.create_histogram(
            "specobs.draft.duration", unit="s", description="Time in the proposer per step."
        )
        self.verify = meter.create_histogram(
            "specobs.verify.duration", unit="s", description="Target forward and rejection sampling per step."
        )
        self.step = meter.create_histogram("specobs.step.duration", unit="s", description="Whole engine step.")

    @classmethod
    def from_environment(cls, resource_attributes: dict[str, str] | None = None) -> OtelMetrics | None:
        """A provider exporting over OTLP/HTTP when the OTLP variables are set; else None."""
        if not otlp_configured():
            return None
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        interval = OTEL_METRIC_EXPORT_INTERVAL.number()
        reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=interval)
        resource = Resource.create({"service.name": "specobs", **(resource_attributes or {})})
        return cls(MeterProvider(resource=resource, metric_readers=[reader]))

    def observe_step(self, row: dict[str, Any]) -> None:
        engine = row.get("engine")
        attrs = {
            "model_name": str(row.get("model") or ""),
            "engine": "" if engine is None else str(engine),
            "method": str(row.get("method") or "none"),
        }
        self.steps.add(1, attrs)
        counters = (
            (self.drafts, "num_drafts"),
            (self.draft_tokens, "num_draft_tokens"),
            (self.accepted, "num_accepted_tokens"),
            (self.generated, "num_generated_tokens"),
        )
        for counter, key in counters:
            value = row.get(key)
            if value:
                counter.add(value, attrs)
        per_pos = row.get("num_accepted_tokens_per_pos") or []
        for position, count in enumerate(per_pos[:MAX_POSITIONS]):
            if count:
                self.per_position.add(count, {**attrs, "position": str(position)})
        drafts = row.get("num_drafts") or 0
        if drafts:
            reached = drafts_per_position(row, drafts, row.get("num_spec_tokens"))
            for position, count in enumerate(reached[:MAX_POSITIONS]):
                if count:
                    self.drafts_per_position.add(count, {**attrs, "position": str(position)})
        timed = {**attrs, "batch_size_bucket": batch_size_bucket(row.get("batch_size"))}
        for histogram, key in ((self.draft, "draft_seconds"), (self.verify, "verify_seconds"),
                               (self.step, "step_seconds")):  # fmt: skip
            value = row.get(key)
            if value is not None:
                histogram.record(value, timed)

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
            if is_step(row):  # steps only: no per-request shares, decisions or metadata
                self.metrics.observe_step(row)

    def close(self) -> None:
        self.metrics.force_flush()
        self.metrics.shutdown()
