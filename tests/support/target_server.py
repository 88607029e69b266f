"""A real HTTP server on 127.0.0.1 for tests: it records every request and answers from a
script of replies per path.

    with TargetServer() as server:
        server.on("/hook", Reply(503, headers={"Retry-After": "1"}), Reply(201))
        ... send to server.url("/hook") ...
        assert server.wait_for(2)[1].headers["x-scion-hook-id"] == ...

Replies queued with `on` are used once each, in order; after that the path's `always` reply
(or the server default, 200 "ok") answers. Hanging and dripping handlers end when the server
stops, so teardown never hangs.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, Self

Behaviour = Literal["respond", "hang", "reset", "close_mid_body", "drip", "drip_all", "huge"]


@dataclass(frozen=True)
class Reply:
    """How the server answers one request."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay: float = 0.0  # seconds to wait before answering
    behaviour: Behaviour = "respond"
    drip_interval: float = 0.0  # seconds between dripped bytes
    size: int = 0  # bytes of a huge body
    released_by: threading.Event | None = None  # answer only once the test sets it

    @classmethod
    def json(cls, status: int, text: str, **headers: str) -> Reply:
        return cls(status, {"Content-Type": "application/json", **headers}, text.encode())

    @classmethod
    def hang(cls) -> Reply:
        """Read the request, never answer (until the server stops)."""
        return cls(behaviour="hang")

    @classmethod
    def reset(cls) -> Reply:
        """Send the status line and a few headers, then reset the connection (RST)."""
        return cls(behaviour="reset")

    @classmethod
    def close_mid_body(cls, status: int = 200) -> Reply:
        """Announce 1000 body bytes, send 10, then close the connection cleanly."""
        return cls(status, behaviour="close_mid_body")

    @classmethod
    def drip(cls, body: bytes, interval: float, status: int = 200) -> Reply:
        """Send the headers at once, then the body one byte every `interval` seconds."""
        return cls(
            status, {"Content-Type": "text/plain"}, body, behaviour="drip", drip_interval=interval
        )

    @classmethod
    def drip_all(cls, body: bytes, interval: float, status: int = 200) -> Reply:
        """Send the whole response - status line and headers too - a byte at a time."""
        return cls(
            status,
            {"Content-Type": "text/plain"},
            body,
            behaviour="drip_all",
            drip_interval=interval,
        )

    @classmethod
    def huge(cls, size: int, content_type: str = "text/plain") -> Reply:
        """Stream a body of `size` bytes, generated as it is sent (never held in memory)."""
        return cls(200, {"Content-Type": content_type}, behaviour="huge", size=size)

    @classmethod
    def redirect(cls, location: str, status: int = 302) -> Reply:
        return cls(status, {"Location": location})


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # with the query string
    headers: Mapping[str, str]  # names lower-cased; the last of repeated names
    body: bytes
    received_at: float  # time.monotonic()
    header_list: tuple[tuple[str, str], ...] = ()  # as sent, repeats included


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True  # a hanging handler never holds up shutdown

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that hang up, reset or refuse our certificate are what tests provoke.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _QuietServer6(_QuietServer):
    address_family = socket.AF_INET6


class TargetServer:
    """A ThreadingHTTPServer on 127.0.0.1 (port 0) in a daemon thread. Context manager.
    `host` may be another loopback address (127.0.0.2 plays an attacker's server, ::1 the
    IPv6 loopback)."""

    def __init__(self, tls: tuple[Path, Path] | None = None, host: str = "127.0.0.1") -> None:
        self.requests: list[RecordedRequest] = []
        self._replies: dict[str, deque[Reply]] = {}
        self._always: dict[str, Reply] = {}
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self.host = host
        server_class = _QuietServer6 if ":" in host else _QuietServer
        self._server = server_class((host, 0), _handler_class(self))
        self.scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            # The handshake happens in the handler thread, so a failed one never stalls accept().
            self._server.socket = context.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
            self.scheme = "https"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str = "/", host: str | None = None) -> str:
        host = host or (f"[{self.host}]" if ":" in self.host else self.host)
        return f"{self.scheme}://{host}:{self.port}{path}"

    def on(self, path: str, *replies: Reply) -> None:
        """Queue replies for `path` (without query string), used once each in order."""
        with self._lock:
            self._replies.setdefault(path, deque()).extend(replies)

    def always(self, path: str, reply: Reply) -> None:
        """The reply for `path` once its queue is empty."""
        with self._lock:
            self._always[path] = reply

    def wait_for(self, count: int, timeout: float = 60.0) -> list[RecordedRequest]:
        """Block until `count` requests were recorded; AssertionError after `timeout`."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(
                    f"expected {count} requests within {timeout}s, got {len(self.requests)}"
                )
            return list(self.requests)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- used by the handler --

    def _record(self, request: RecordedRequest) -> Reply:
        path = request.path.split("?", 1)[0]
        with self._lock:
            self.requests.append(request)
            self._lock.notify_all()
            queue = self._replies.get(path)
            if queue:
                return queue.popleft()
            return self._always.get(path, Reply(200, {"Content-Type": "text/plain"}, b"ok"))


def _handler_class(server: TargetServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like real endpoints

        def log_message(self, format: str, *args: object) -> None:
            pass  # keep test output clean

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            recorded = RecordedRequest(
                method=self.command,
                path=self.path,
                headers={name.lower(): value for name, value in self.headers.items()},
                body=body,
                received_at=time.monotonic(),
                header_list=tuple(self.headers.items()),
            )
            reply = server._record(recorded)
            if reply.delay and server._stopping.wait(reply.delay):
                return
            while reply.released_by is not None and not reply.released_by.wait(0.05):
                if server._stopping.is_set():
                    return
            try:
                self._answer(reply)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
                self.close_connection = True  # the client went away: fine for a test server

        def _answer(self, reply: Reply) -> None:
            if reply.behaviour == "hang":
                server._stopping.wait()
                self.close_connection = True
                return
            if reply.behaviour == "reset":
                self.send_response(200)
                self.send_header("Content-Length", "100")
                self.end_headers()
                self.wfile.flush()
                # SO_LINGER with a zero timeout turns close() into a TCP reset.
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
                self.close_connection = True
                return
            if reply.behaviour == "close_mid_body":
                self.send_response(reply.status)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b"x" * 10)
                self.wfile.flush()
                self.close_connection = True
                return
            if reply.behaviour == "drip_all":
                self._drip_all(reply)
                return
            size = reply.size if reply.behaviour == "huge" else len(reply.body)
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if self.command == "HEAD":
                return
            if reply.behaviour == "drip":
                for index in range(len(reply.body)):
                    if server._stopping.wait(reply.drip_interval):
                        self.close_connection = True
                        return
                    self.wfile.write(reply.body[index : index + 1])
                    self.wfile.flush()
            elif reply.behaviour == "huge":
                chunk = b"z" * 65536
                remaining = size
                while remaining > 0 and not server._stopping.is_set():
                    piece = chunk[: min(remaining, len(chunk))]
                    self.wfile.write(piece)
                    remaining -= len(piece)
            else:
                self.wfile.write(reply.body)

        def _drip_all(self, reply: Reply) -> None:
            head = [f"HTTP/1.1 {reply.status} OK"]
            head += [f"{name}: {value}" for name, value in reply.headers.items()]
            head += [f"Content-Length: {len(reply.body)}", "", ""]
            raw = "\r\n".join(head).encode() + reply.body
            for index in range(len(raw)):
                if server._stopping.wait(reply.drip_interval):
                    break
                self.wfile.write(raw[index : index + 1])
                self.wfile.flush()
            self.close_connection = True

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

    return Handler


def self_signed_certificate(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A throwaway certificate and key for `host`, written to `directory` (cert, key)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / "cert.pem"
    key_path = directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
