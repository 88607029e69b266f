"""A small OTLP/HTTP receiver on 127.0.0.1 for tests: it decodes what exporters send
(protobuf, gzip or not) with opentelemetry-proto and keeps it, so a test can ask which spans,
metrics and log records arrived.

    with OtlpHttpReceiver() as receiver:
        ... export to receiver.endpoint ...
        receiver.wait_for_span("agent.lifecycle_hook")
"""

from __future__ import annotations

import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_MESSAGES = {
    "/v1/traces": ExportTraceServiceRequest,
    "/v1/metrics": ExportMetricsServiceRequest,
    "/v1/logs": ExportLogsServiceRequest,
}


class OtlpHttpReceiver:
    """Accepts OTLP/HTTP protobuf exports and keeps the decoded requests by path."""

    def __init__(self) -> None:
        self.received: dict[str, list[Any]] = {path: [] for path in _MESSAGES}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def keep(self, path: str, body: bytes) -> bool:
        message_type = _MESSAGES.get(path)
        if message_type is None:
            return False
        message = message_type()
        message.ParseFromString(body)
        with self._lock:
            self.received[path].append(message)
        return True

    def spans(self) -> list[tuple[str, Any]]:
        """(instrumentation scope name, span) of every span received."""
        with self._lock:
            requests = list(self.received["/v1/traces"])
        return [
            (scope_spans.scope.name, span)
            for request in requests
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]

    def metric_names(self) -> set[str]:
        with self._lock:
            requests = list(self.received["/v1/metrics"])
        return {
            metric.name
            for request in requests
            for resource_metrics in request.resource_metrics
            for scope_metrics in resource_metrics.scope_metrics
            for metric in scope_metrics.metrics
        }

    def wait_for(self, done: Any, timeout: float = 60.0) -> None:
        """Until `done()` is true; AssertionError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done():
                return
            time.sleep(0.05)
        raise AssertionError(
            f"not received within {timeout}s: spans {[s.name for _, s in self.spans()]}, "
            f"metrics {sorted(self.metric_names())}"
        )

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler(receiver: OtlpHttpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            kept = receiver.keep(self.path, body)
            self.send_response(200 if kept else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler
