"""Exporters: specobs metrics for Prometheus and OpenTelemetry, in the engine or beside it.

What the other rooms may use, by module:

- ``families``: every exported family fed through one dispatch (``Exported``, ``Sink``); the
  table itself (names, kinds, labels, help) is :mod:`specobs.ingest.specobs_metrics`, which the
  Prometheus reader shares.
- ``mapping``: one mapping from a steps row (or a window, a finished request, run metadata) to
  metric updates (``StepMapper``), with bounded labels (``LabelCap``).
- ``prometheus``: ``PrometheusMetrics`` (a ``Collector`` yielding fresh families), its sink and
  ``serve`` (127.0.0.1 unless told).
- ``otel``: ``OtelMetrics`` and ``OtelSink`` over OTLP/HTTP (a no-op unless configured).
- ``sidecar``: ``specobs exporter``, following event files or vLLM logs (``follow``).
- ``wiring``: the sinks a capture inside vLLM sends rows to (``capture_sinks``).
"""
