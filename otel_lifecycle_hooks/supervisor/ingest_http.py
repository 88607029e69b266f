"""Claude Code's `http` hooks, posted straight to the supervisor: no process per event.

`HttpIngest` listens on 127.0.0.1 (an ephemeral port) and accepts `POST /claude` with the
header `Authorization: Bearer <token>`, the token being random per session. Each payload is
translated by the claude dialect, exactly as `hook --dialect claude` would, and its messages go
to the same delivery function as the Unix socket's, in the order the payloads arrived.

It answers at once, before delivery, with `200` and an empty body: Claude Code reads that as
success with nothing to say, so the agent is never held up or steered. A missing or wrong token
gets 401, a peer that is not loopback 403, a body over `MAX_BODY_BYTES` (or without a length)
413/411, a body that is not a JSON object 400, and a full queue (`MAX_QUEUED_PAYLOADS`, or
`MAX_QUEUED_BYTES` waiting) 503: Claude Code goes on, the event is lost and logged. `GET /v1/status` (with the token) tells `harness doctor` how many
messages this session received.
"""

from __future__ import annotations

import hmac
import json
import logging
import queue
import secrets
import socketserver
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..loopback import is_loopback_host

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

MAX_BODY_BYTES = 8 * 1024 * 1024  # as `hook` reads at most from stdin
MAX_QUEUED_PAYLOADS = 1024
# What may wait for delivery at once: a flood of large bodies is refused (503), not buffered.
MAX_QUEUED_BYTES = 32 * 1024 * 1024
CLIENT_TIMEOUT = 2.0  # seconds a connection may stay silent
CLAUDE_PATH = "/claude"
STATUS_PATH = "/v1/status"


class _LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True  # a stalled client never holds up the supervisor's exit

    def server_bind(self) -> None:
        # HTTPServer's own looks the host's name up (DNS, and the idna codec): not needed.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


class HttpIngest:
    """The loopback HTTP route into one session. `start()`, then `close()`."""

    def __init__(
        self,
        deliver: Callable[[dict[str, Any]], None],
        received: Callable[[], int] | None = None,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
    ) -> None:
        """`deliver`: the socket's delivery function; `received`: how many messages the
        session got so far (for `GET /v1/status`)."""
        self._deliver = deliver
        self._received = received or (lambda: 0)
        self._max_queued_bytes = max_queued_bytes
        self._queued_bytes = 0
        self._queued_lock = threading.Lock()
        self.token = secrets.token_urlsafe(32)
        self._payloads: queue.Queue[tuple[dict[str, Any], int] | None] = queue.Queue(
            MAX_QUEUED_PAYLOADS
        )
        self._server = _LoopbackServer(("127.0.0.1", 0), _handler(self))
        self._serving = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
            name="http-ingest", daemon=True,
        )
        self._worker = threading.Thread(target=self._deliver_in_order, name="http-ingest-deliver",
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> HttpIngest:
        self._serving.start()
        self._worker.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        try:
            self._payloads.put_nowait(None)
        except queue.Full:
            pass

    def token_matches(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[len("Bearer "):].encode(), self.token.encode())

    def accept(self, payload: dict[str, Any], size: int) -> bool:
        """Queue one payload (of `size` bytes) for delivery; False when the queue is full."""
        with self._queued_lock:
            if self._queued_bytes + size > self._max_queued_bytes:
                log.warning("HTTP event route: %d bytes waiting, a payload dropped",
                            self._queued_bytes)
                return False
            try:
                self._payloads.put_nowait((payload, size))
            except queue.Full:
                log.warning("HTTP event route: %d payloads waiting, one dropped",
                            MAX_QUEUED_PAYLOADS)
                return False
            self._queued_bytes += size
        return True

    def received(self) -> int:
        return self._received()

    def _deliver_in_order(self) -> None:
        from ..harness.dialects import get_dialect

        dialect = get_dialect("claude")
        while True:
            item = self._payloads.get()
            if item is None:
                return
            payload, size = item
            with self._queued_lock:
                self._queued_bytes -= size
            try:
                events = dialect.translate(payload, [])
            except Exception as exc:  # noqa: BLE001 - one bad payload never stops the route
                # The type only: the payload is the agent's, and may hold anything.
                log.warning("HTTP event route: a payload not translated (%s)", type(exc).__name__)
                continue
            for event in events:
                try:
                    self._deliver(event.to_wire())
                except Exception:
                    log.exception("HTTP event route: delivering a message failed")


def _handler(ingest: HttpIngest) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = CLIENT_TIMEOUT

        def log_message(self, format: str, *args: object) -> None:
            pass  # request lines could carry what an agent chose; nothing to log

        def _answer(self, status: int, body: bytes = b"", content_type: str = "") -> None:
            self.send_response(status)
            if content_type:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if status >= 400:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if body:
                self.wfile.write(body)

        def _allowed(self) -> bool:
            if not is_loopback_host(self.client_address[0]):
                self._answer(403)
                return False
            if not ingest.token_matches(self.headers.get("Authorization")):
                self._answer(401)
                return False
            return True

        def do_POST(self) -> None:
            if not self._allowed():
                return
            if self.path.split("?", 1)[0] != CLAUDE_PATH:
                self._answer(404)
                return
            length_header = self.headers.get("Content-Length")
            if length_header is None or self.headers.get("Transfer-Encoding"):
                self._answer(411)
                return
            try:
                length = int(length_header)
            except ValueError:
                self._answer(400)
                return
            if length < 0 or length > MAX_BODY_BYTES:
                self._answer(413)
                return
            try:
                payload = json.loads(self.rfile.read(length))
            except (ValueError, UnicodeDecodeError):
                self._answer(400)
                return
            except OSError:
                self.close_connection = True
                return
            if not isinstance(payload, dict):
                self._answer(400)
                return
            self._answer(200 if ingest.accept(payload, length) else 503)

        def do_GET(self) -> None:
            if not self._allowed():
                return
            if self.path.split("?", 1)[0] != STATUS_PATH:
                self._answer(404)
                return
            body = json.dumps({"received": ingest.received()}).encode()
            self._answer(200, body, "application/json")

        def _not_allowed(self) -> None:
            if self._allowed():
                self._answer(405)

        do_PUT = do_DELETE = do_PATCH = _not_allowed

    return Handler
