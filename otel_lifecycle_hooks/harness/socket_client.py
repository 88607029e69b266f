"""The client side of the supervisor's event socket.

The supervisor (`otel-lifecycle-hooks run`) listens on a Unix stream socket whose path it puts
in `$OTEL_LIFECYCLE_HOOKS_SOCKET` for the agent and its hooks. Protocol, version 1:

- A client connects (timeout `CONNECT_TIMEOUT`, 200 ms; a full backlog is retried within
  it), writes one or more lines and closes its end. No reply is sent or awaited; the server reads until end of file.
- Each line is one JSON object, UTF-8, ending in `\\n`, at most `MAX_LINE_BYTES`. Every object
  has `"v": 1` and a `"kind"`:
  - `{"v": 1, "kind": "event", "event": "tool-start", "dialect": "claude",
    "raw_event": "PreToolUse", "session_id": "...", "fields": {"TOOL_NAME": "Bash"}}`:
    a normalized harness event (`NormalizedEvent.to_wire`); `event` is a runtime event and
    `fields` maps variable names to strings.
  - `{"v": 1, "kind": "status", "status": "task_completed", "message": "..."}`: an explicit
    signal; `status` is one of ask_user, blocked, task_completed, limits_exceeded.
- The lines of one connection are in order and belong together (one harness payload can give
  two events); the server handles them in that order.
- A server ignores lines it cannot parse, or of a version or kind it does not know, logging
  them; it never answers, so a client can never block on it.

Everything here is standard library: it runs inside `hook`, once per harness event.
"""

from __future__ import annotations

# `_socket`, the C module itself: `socket` wraps it in enums and selectors that cost ~2 ms
# to import, on every harness event, and the client needs none of them.
import _socket
import errno
import json
import os
import time
from collections.abc import Iterable, Mapping

from .normalized import WIRE_VERSION, NormalizedEvent, clip

# The hook command runs this on every harness event: `typing` (milliseconds) is for checkers.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SOCKET_ENV = "OTEL_LIFECYCLE_HOOKS_SOCKET"
CONNECT_TIMEOUT = 0.2  # seconds; a hook must never hold up its harness
SEND_TIMEOUT = 1.0  # seconds for the whole write, once connected
MAX_LINE_BYTES = 1024 * 1024
MAX_MESSAGE_CHARS = 4096
_EAGAIN, _EWOULDBLOCK = errno.EAGAIN, errno.EWOULDBLOCK


class SupervisorUnavailable(OSError):
    """No supervisor socket is configured, or it did not accept the connection in time."""


def socket_path(environ: Mapping[str, str] | None = None) -> str:
    """The supervisor socket's path; raises `SupervisorUnavailable` when none is set."""
    path = (os.environ if environ is None else environ).get(SOCKET_ENV, "")
    if not path:
        raise SupervisorUnavailable(f"${SOCKET_ENV} is not set: no supervisor is running")
    return path


def encode(obj: Mapping[str, Any]) -> bytes:
    """One wire line for `obj`."""
    try:
        line = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # a lone surrogate (from argv, say): sent as a JSON escape
        line = json.dumps(obj, separators=(",", ":")).encode("ascii") + b"\n"
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"wire line of {len(line)} bytes exceeds {MAX_LINE_BYTES}")
    return line


def send_lines(path: str, objects: Iterable[Mapping[str, Any]]) -> None:
    """Connect to `path`, write one line per object, close."""
    payload = b"".join(encode(obj) for obj in objects)
    connection = _connect(path)
    try:
        connection.settimeout(SEND_TIMEOUT)
        connection.sendall(payload)
        connection.shutdown(_socket.SHUT_WR)
    finally:
        connection.close()


def _connect(path: str) -> _socket.socket:
    """A connection to `path` within `CONNECT_TIMEOUT`. A full listen backlog fails a Unix
    socket's connect at once (EAGAIN): the supervisor is busy, not gone, so that is retried
    until the budget is spent."""
    deadline = time.monotonic() + CONNECT_TIMEOUT
    pause = 0.002
    while True:
        connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        connection.settimeout(CONNECT_TIMEOUT)
        try:
            connection.connect(path)
            return connection
        except OSError as exc:
            connection.close()
            busy = exc.errno in (_EAGAIN, _EWOULDBLOCK)
            if not busy or time.monotonic() + pause >= deadline:
                reason = "busy (its backlog stayed full)" if busy else (exc.strerror or exc)
                raise SupervisorUnavailable(f"supervisor socket {path}: {reason}") from None
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def send_events(
    events: Iterable[NormalizedEvent], environ: Mapping[str, str] | None = None
) -> None:
    """Deliver normalized events to the running supervisor."""
    send_lines(socket_path(environ), [event.to_wire() for event in events])


def status_message(status: str, message: str) -> dict[str, Any]:
    """The wire object for an explicit status signal."""
    return {
        "v": WIRE_VERSION,
        "kind": "status",
        "status": status,
        "message": clip(message, MAX_MESSAGE_CHARS),
    }


def send_status(status: str, message: str, environ: Mapping[str, str] | None = None) -> None:
    """Deliver an explicit status signal to the running supervisor."""
    send_lines(socket_path(environ), [status_message(status, message)])
