"""Capture settings from the environment (read once, when capture starts).

| variable | default | meaning |
|---|---|---|
| ``SPECOBS_ENABLE`` | off | ``1``/``true``/``yes`` turns capture on in every vLLM process |
| ``SPECOBS_DIR`` | ``./specobs-events`` | folder for event files |
| ``SPECOBS_FORMAT`` | ``jsonl`` | ``jsonl`` or ``parquet`` |
| ``SPECOBS_RUN_ID`` | time + random | labels every row of this serving run |
| ``SPECOBS_WORKLOAD`` | unset | a label for the traffic (chat, code, …) |
| ``SPECOBS_PER_REQUEST`` | off | also write one row per request per step (request id, drafted, accepted) |
| ``SPECOBS_PER_REQUEST_SAMPLE`` | ``1.0`` | share of requests that get per-request rows (chosen by request id) |
| ``SPECOBS_QUEUE_SIZE`` | ``65536`` | rows held before new ones are dropped (and counted) |
| ``SPECOBS_ROTATE_MB`` | ``64`` | JSONL file size before rotating |
| ``SPECOBS_ROTATE_SECONDS`` | ``3600`` | JSONL file age before rotating |
| ``SPECOBS_PARQUET_SECONDS`` | ``60`` | seconds per Parquet part |
| ``SPECOBS_PROMETHEUS`` | unset | ``host:port``: serve specobs metrics from the engine-core process (port + DP rank) |
| ``SPECOBS_OTEL`` | ``1`` | ``0`` keeps OpenTelemetry export off even when ``OTEL_EXPORTER_OTLP_*`` is set |
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field

_TRUE = {"1", "true", "yes", "on"}


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def _number(name: str, default: float) -> float:
    value = os.environ.get(name, "").strip()
    try:
        return float(value) if value else default
    except ValueError:
        return default


def default_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


@dataclass(frozen=True)
class CaptureConfig:
    enabled: bool = False
    directory: str = "specobs-events"
    format: str = "jsonl"
    run_id: str = field(default_factory=default_run_id)
    workload: str | None = None
    per_request: bool = False
    per_request_sample: float = 1.0
    queue_size: int = 65536
    rotate_bytes: int = 64 * 1024 * 1024
    rotate_seconds: float = 3600.0
    parquet_seconds: float = 60.0
    prometheus: str | None = None
    otel: bool = True

    @classmethod
    def from_env(cls) -> CaptureConfig:
        fmt = os.environ.get("SPECOBS_FORMAT", "jsonl").strip().lower()
        return cls(
            enabled=_flag("SPECOBS_ENABLE"),
            directory=os.environ.get("SPECOBS_DIR", "specobs-events"),
            format=fmt if fmt in ("jsonl", "parquet") else "jsonl",
            # The front-end and engine-core processes start apart; a run id set by the user
            # (or inherited from the parent through the environment) keeps them together.
            run_id=os.environ.get("SPECOBS_RUN_ID") or default_run_id(),
            workload=os.environ.get("SPECOBS_WORKLOAD") or None,
            per_request=_flag("SPECOBS_PER_REQUEST"),
            per_request_sample=min(max(_number("SPECOBS_PER_REQUEST_SAMPLE", 1.0), 0.0), 1.0),
            queue_size=int(_number("SPECOBS_QUEUE_SIZE", 65536)),
            rotate_bytes=int(_number("SPECOBS_ROTATE_MB", 64) * 1024 * 1024),
            rotate_seconds=_number("SPECOBS_ROTATE_SECONDS", 3600.0),
            parquet_seconds=_number("SPECOBS_PARQUET_SECONDS", 60.0),
            prometheus=os.environ.get("SPECOBS_PROMETHEUS") or None,
            otel=os.environ.get("SPECOBS_OTEL", "1").strip().lower() not in ("0", "false", "no", "off"),
        )

    def sinks(self, engine: int = 0, health=None, resource: dict[str, str] | None = None) -> list:
        """Every sink these settings ask for: event files, and the exporters when configured.

        ``health`` (the recorder's counters) feeds ``specobs_dropped_events_total`` and
        ``specobs_hook_errors_total``; the Prometheus port is offset by the engine index so that
        data-parallel engine cores on one host do not collide.
        """
        sinks = [self.sink()]
        if self.prometheus:
            from specobs.exporters.prometheus import PrometheusMetrics, PrometheusSink, serve

            host, _, port = self.prometheus.rpartition(":")
            metrics = PrometheusMetrics(health=health)
            serve(metrics, f"{host or '127.0.0.1'}:{int(port) + engine}")
            sinks.append(PrometheusSink(metrics))
        if self.otel:
            from specobs.exporters.otel import OtelMetrics, OtelSink

            otel = OtelMetrics.from_environment(resource)
            if otel is not None:
                sinks.append(OtelSink(otel))
        return sinks

    def sink(self):
        """The event-file sink these settings ask for."""
        from specobs.capture.sinks import JsonlSink, ParquetSink

        if self.format == "parquet":
            return ParquetSink(self.directory, self.run_id, part_seconds=self.parquet_seconds)
        return JsonlSink(
            self.directory, self.run_id, rotate_bytes=self.rotate_bytes, rotate_seconds=self.rotate_seconds
        )
