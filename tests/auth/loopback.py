"""A small base for loopback HTTP stand-ins: a ThreadingHTTPServer on 127.0.0.1, port 0."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackServer:
    """Runs `handle(handler)` for every request, in a background thread, until `stop()`."""

    def __init__(self, handle: Callable[[BaseHTTPRequestHandler], None]) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                handle(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        """host:port"""
        return f"127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> LoopbackServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def reply(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: bytes,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


def read_body(handler: BaseHTTPRequestHandler) -> bytes:
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


class RecordingTarget:
    """The service a hook calls: records each request's headers and body, answers 204."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self._lock = threading.Lock()
        self.server = LoopbackServer(self._handle)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = read_body(handler)
        with self._lock:
            self.requests.append((dict(handler.headers.items()), body))
        reply(handler, 204, b"")

    @property
    def url(self) -> str:
        return self.server.url + "/hook"
