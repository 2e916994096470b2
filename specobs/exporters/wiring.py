"""The sinks a capture inside vLLM sends rows to when ``SPECOBS_PROMETHEUS`` or
``SPECOBS_OTEL`` ask for exporters (``Wiring.sinks`` of :mod:`specobs.vllm.hooks`)."""

from __future__ import annotations

from typing import Any

from specobs.capture.config import CaptureConfig
from specobs.exporters.otel import OtelMetrics, OtelSink, resource_attributes
from specobs.exporters.prometheus import PrometheusMetrics, PrometheusSink, serve


def capture_sinks(
    config: CaptureConfig, engine: int = 0, health: Any = None, resource: dict[str, str] | None = None
) -> list:
    """Every sink ``config`` asks for: event files, and the exporters when configured.

    ``health`` (the recorder's counters) feeds ``specobs_dropped_events_total``,
    ``specobs_hook_errors_total`` and ``specobs_untimed_steps_total`` on both exporters; the
    Prometheus port is offset by the engine index so that data-parallel engine cores on one host do
    not collide. ``resource``: the engine's labels and
    run-metadata fields (``RunMetadata`` names), which OpenTelemetry carries as resource attributes
    (:data:`specobs.exporters.otel.RESOURCE_ATTRIBUTES`). The run-metadata record and finished
    requests reach both exporters as rows (``specobs_engine_info``, ``specobs_request_acceptance_length``).
    """
    sinks: list = [config.sink()]
    if config.prometheus:
        host, _, port = config.prometheus.rpartition(":")
        metrics = PrometheusMetrics(health=health)
        serve(metrics, f"{host or '127.0.0.1'}:{int(port) + engine}")
        sinks.append(PrometheusSink(metrics))
    if config.otel:
        otel = OtelMetrics.from_environment(resource_attributes(resource or {}), health=health)
        if otel is not None:
            sinks.append(OtelSink(otel))
    return sinks
