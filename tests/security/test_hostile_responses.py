"""A hostile endpoint's answers: an endless body, a gzip bomb, a chunked stream that never
ends, megabytes of headers, a header trickle past the timeout, invalid UTF-8. Each attempt
ends within its timeout with a bounded read (the endpoint counts what it managed to send),
and is still journaled, with a bounded, text-safe body.

The endpoint is a raw loopback socket server; the deliveries go through a real engine into a
real SQLite journal."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.engine.attempt_log import BODY_LIMIT, HEADERS_LIMIT
from otel_lifecycle_hooks.journal import Journal
from tests.reliability.test_reliability_replay import deliver, write_template

# Bytes any answer below is willing to write: far more than a bounded reader ever takes.
OFFERED = 256 * 1024 * 1024


class RawEndpoint:
    """Accepts connections on 127.0.0.1 and runs `answer(connection)` for each, counting the
    bytes it manages to send before the client goes away."""

    def __init__(self, answer: Callable[[socket.socket, RawEndpoint], None]) -> None:
        self.answer = answer
        self.sent = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)  # so that the accept loop sees `stopped`
        self.stopped = threading.Event()
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with connection:
                connection.settimeout(60)
                try:
                    read_request(connection)
                    self.answer(connection, self)
                except OSError:
                    pass  # the client closed: what it read is counted

    def send(self, connection: socket.socket, data: bytes) -> None:
        connection.sendall(data)
        self.sent += len(data)

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()
        self.thread.join(10)


def read_request(connection: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n")
         if line.lower().startswith(b"content-length:")), 0,
    )  # fmt: skip
    while len(rest) < length:
        rest += connection.recv(65536)


def endless_body(connection: socket.socket, endpoint: RawEndpoint) -> None:
    endpoint.send(connection, b"HTTP/1.1 500 Oops\r\nContent-Type: text/plain\r\n\r\n")
    while endpoint.sent < OFFERED:
        endpoint.send(connection, b"x" * 65536)


def endless_chunks(connection: socket.socket, endpoint: RawEndpoint) -> None:
    endpoint.send(
        connection,
        b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n",
    )
    while endpoint.sent < OFFERED:
        endpoint.send(connection, b"10000\r\n" + b"y" * 65536 + b"\r\n")


BOMB = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)


def gzip_bomb(connection: socket.socket, endpoint: RawEndpoint) -> None:
    endpoint.send(
        connection,
        b"HTTP/1.1 500 Oops\r\nContent-Encoding: gzip\r\nContent-Type: text/plain\r\n"
        b"Content-Length: %d\r\n\r\n" % len(BOMB) + BOMB,
    )


def huge_headers(connection: socket.socket, endpoint: RawEndpoint) -> None:
    endpoint.send(connection, b"HTTP/1.1 500 Oops\r\n")
    while endpoint.sent < OFFERED:
        endpoint.send(connection, b"X-Filler: " + b"z" * 8000 + b"\r\n")


def header_trickle(connection: socket.socket, endpoint: RawEndpoint) -> None:
    endpoint.send(connection, b"HTTP/1.1 500 Oops\r\n")
    for _ in range(600):  # one byte a tenth of a second: a minute in all
        endpoint.send(connection, b"a")
        time.sleep(0.1)


def invalid_utf8(connection: socket.socket, endpoint: RawEndpoint) -> None:
    body = b"\xff\xfe\xc3(\xed\xa0\x80 \x1b]0;owned\x07 ok"
    endpoint.send(
        connection,
        b"HTTP/1.1 500 Oops\r\nContent-Type: text/plain; charset=utf-8\r\nX-Bad: \xff\xfe\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body,
    )


@pytest.fixture
def endpoint(request: pytest.FixtureRequest) -> Iterator[RawEndpoint]:
    server = RawEndpoint(request.param)
    yield server
    server.close()


HOOK = """
- name: hostile
  on: [task-completed]
  action:
    type: http
    url: "http://127.0.0.1:{port}/hook"
    body: '{{"summary": "${{TASK_SUMMARY}}"}}'
  timeout: 3s
  blocking: true
"""


@pytest.mark.parametrize(
    "endpoint",
    [endless_body, endless_chunks, gzip_bomb, huge_headers, header_trickle, invalid_utf8],
    indirect=True,
)
def test_a_hostile_answer_is_read_bounded_and_still_journaled(
    endpoint: RawEndpoint, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(tmp_path, HOOK.format(port=endpoint.port))
    deliver(template, journal)

    # The client stopped reading long before the endpoint ran out of what it offered.
    assert endpoint.sent < OFFERED // 4
    records = Journal(journal)
    try:
        [row] = records.recent(limit=10)
        assert row.outcome in ("failed", "timeout")
        [attempt] = records.attempts(row.row_uid)
    finally:
        records.close()
    assert attempt.outcome in ("failed", "timeout")
    body = attempt.response_body or ""
    assert len(body.encode("utf-8")) <= BODY_LIMIT + 200  # the cut marker
    assert "\0" not in body
    headers = attempt.response_headers or []
    assert sum(len(n) + len(v) for n, v in headers) <= HEADERS_LIMIT + 200
