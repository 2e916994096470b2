"""A step row and a real OTLP/HTTP receiver for the exporter tests."""

from __future__ import annotations

import gzip
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

ROW = {
    "ts": 1.0, "model": "tiny", "engine": 0, "method": "eagle", "batch_size": 4, "num_spec_tokens": 3,
    "num_drafts": 4, "num_draft_tokens": 12, "num_accepted_tokens": 6, "num_accepted_tokens_per_pos": [3, 2, 1],
    "num_generated_tokens": 10, "draft_seconds": 0.002, "verify_seconds": 0.010, "step_seconds": 0.013,
}  # fmt: skip


class _Receiver(BaseHTTPRequestHandler):
    """A real OTLP/HTTP metrics receiver: decodes ExportMetricsServiceRequest protobufs."""

    requests: ClassVar[list] = []

    def do_POST(self):
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        _Receiver.requests.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, *args):
        pass
