"""Shared pieces for the hook-system tests: spans in memory, the supervisor's real event
socket, and a loopback JSON-RPC 2.0 executor."""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_lifecycle_hooks.supervisor.server import EventServer


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


class Inbox:
    """What the supervisor's event socket delivered."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._cond = threading.Condition()

    def deliver(self, message: dict[str, Any]) -> None:
        with self._cond:
            self.messages.append(message)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        with self._cond:
            self._cond.wait_for(lambda: len(self.messages) >= count, timeout)
            return list(self.messages)


@pytest.fixture
def supervisor_socket() -> Iterator[tuple[str, Inbox]]:
    """The supervisor's own event socket server, delivering into an Inbox."""
    inbox = Inbox()
    # A short directory: a Unix socket path must stay under ~100 bytes.
    with tempfile.TemporaryDirectory(prefix="olh-") as directory:
        server = EventServer(inbox.deliver, directory=directory).start()
        yield server.path, inbox
        server.close()


Answer = Callable[[str, dict[str, Any]], Any]


class JsonRpcServer:
    """A loopback JSON-RPC 2.0 executor: `answer(method, params)` gives the `result`; returning
    `RAW` + bytes answers those bytes instead; `HANG` never answers (until the server stops)."""

    HANG = object()

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.answer: Answer = lambda method, params: None
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = json.loads(body)
                server.calls.append((request["method"], request["params"], dict(self.headers)))
                answer = server.answer(request["method"], request["params"])
                if answer is JsonRpcServer.HANG:
                    server._stop.wait(30)
                    return
                if isinstance(answer, bytes):
                    payload = answer
                else:
                    payload = json.dumps(
                        {"jsonrpc": "2.0", "id": request["id"], "result": answer}
                    ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/the-loop"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def methods(self) -> list[str]:
        return [method for method, _, _ in self.calls]

    def close(self) -> None:
        self._stop.set()
        self._http.shutdown()
        self._http.server_close()


@pytest.fixture
def jsonrpc_server() -> Iterator[JsonRpcServer]:
    server = JsonRpcServer()
    yield server
    server.close()
