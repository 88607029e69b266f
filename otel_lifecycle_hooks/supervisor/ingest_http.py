"""Claude Code's `http` hooks, posted straight to the supervisor: no process per event.

`HttpIngest` listens on 127.0.0.1 (an ephemeral port) and accepts `POST /claude` with the
header `Authorization: Bearer <token>`, the token being random per session. Each payload is
translated by the claude dialect, exactly as `hook --dialect claude` would (its transcript read
with the agent's rights: supervisor/agent_reader.py), and its messages go to the same delivery
function as the Unix socket's, in the order the payloads arrived.

An event Claude Code lets a hook refuse (harness/refusals.py: PreToolUse, PermissionRequest,
UserPromptSubmit, Stop) is asked for its gates' decision, as `hook` asks on the socket (the
supervisor's `ask`: answered allow at once when the template has no gate on it): its connection
waits, at most `GATE_WAIT` seconds, and is answered `200` with the decision in Claude Code's
own hook-output JSON (empty for allow). When no decision came in time (the supervisor busy
with what the agent sent before, a slow gate), the gate's own policy answers: deny where the
event has a fail-closed gate (`fail_closed`, the template's `on_error: fail`), else empty,
and Claude Code goes on.
Every other event is answered at once, before delivery, with `200` and an empty body: Claude
Code reads that as success with nothing to say. A missing or wrong token
gets 401, a peer that is not loopback 403, a body over `MAX_BODY_BYTES` (or without a length)
413/411 before any of it is read, a body that is not a JSON object 400, JSON with more than
`MAX_JSON_TOKENS` tokens or deeper than `MAX_JSON_DEPTH` 413 before it is parsed, and no room
(bodies in flight, `MAX_QUEUED_PAYLOADS` or `MAX_QUEUED_BYTES` waiting) 503: Claude Code goes
on, the event is lost and counted. `GET /v1/status` (with the token) tells `harness doctor` how
many messages this session received.

Anyone on the machine can connect, so the route is bounded whoever connects (docs/security.md):
one thread serves every connection (a selector), one parses, one delivers; at most
`MAX_CONNECTIONS` are open, and when a new one comes the oldest that has not shown the token
is closed; a request has `REQUEST_DEADLINE` from its connection (or the previous answer) to
its body's last byte. Every refusal is counted through `refuse(reason)`, the counter the
event socket uses. Nothing a client sends raises out of here or prints a traceback.
"""

from __future__ import annotations

import contextlib
import hmac
import itertools
import json
import logging
import queue
import re
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..harness.dialects import claude
from ..harness.refusals import answer, style_for
from ..loopback import is_loopback_host
from .admission import IngressCounts
from .agent_reader import AgentIdentity, tail_reader
from .server import Reply

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

CLAUDE_PATH = "/claude"
STATUS_PATH = "/v1/status"

# -- the bounds (docs/security.md states them) -------------------------------------------------
MAX_BODY_BYTES = 8 * 1024 * 1024  # as `hook` reads at most from stdin
MAX_HEADER_BYTES = 16 * 1024  # the request line and headers together
# Connections open at once (descriptors and buffers: at most this many header buffers).
MAX_CONNECTIONS = 128
# From a connection's accept (or its previous answer) to its request's last byte: a trickling
# client is cut off, whatever it sends, and its slot is free again.
REQUEST_DEADLINE = 10.0  # seconds
# Body bytes being received or waiting for the parser, over all connections. A body over
# LARGE_BODY_BYTES may not take the last BODY_RESERVE_BYTES: ordinary posts (a few KiB) still
# fit while large ones arrive.
MAX_BODIES_BYTES = 32 * 1024 * 1024
LARGE_BODY_BYTES = 1024 * 1024
BODY_RESERVE_BYTES = 8 * 1024 * 1024
# What a parse may build: JSON's structural tokens and strings (each a value, or what holds
# one), counted before `json.loads` runs. An 8 MiB body of empty objects would be ~2.8 million
# dicts (~200 MB); at 200,000 tokens a parse builds about its body's size plus 10 MB at most
# (measured: 5 MB for empty objects, 14 MB for 4 MB of short strings or long numbers), while a
# Write of a 10,000-line file (its patch a list of lines) is ~20,000 tokens.
MAX_JSON_TOKENS = 200_000
MAX_JSON_DEPTH = 64
# A body up to this size is parsed by the serving thread itself when no other waits for the
# parser (bounded by MAX_JSON_TOKENS as any other): two parses at most at once.
INLINE_PARSE_BYTES = 64 * 1024
# What may wait for delivery at once: a flood of large bodies is refused (503), not buffered.
# A payload is charged its body's size plus `TOKEN_CHARGE` per token (what parsing built).
MAX_QUEUED_PAYLOADS = 1024
MAX_QUEUED_BYTES = 32 * 1024 * 1024
TOKEN_CHARGE = 64
# Lingering after an error answer (before closing): the client reads the answer instead of a
# reset caused by what it still sends.
LINGER_SECONDS = 1.0
LINGER_BYTES = 64 * 1024
LISTEN_BACKLOG = 128
ACCEPT_PAUSE = 0.25  # seconds without accepting after an accept failed (out of descriptors)
# How long a refusable event's connection waits for its gates' decision: under the 10 s
# timeout the Claude Code settings give each http hook (claude_hooks.HOOK_TIMEOUT_SECONDS), so
# that the route, not Claude Code, says what happens when none comes (the agent goes on).
GATE_WAIT = 8.0  # seconds
# The lifecycle event of each post Claude Code lets a hook refuse, known before its payload is
# translated (the claude dialect's names, pinned by a test): its policy past `GATE_WAIT`.
REFUSABLE_EVENTS = {
    "PreToolUse": "tool-start",
    "PermissionRequest": "notification",
    "UserPromptSubmit": "prompt-submit",
    "Stop": "agent-end",
}
MAX_DECISION_BYTES = 64 * 1024  # the supervisor's answer line (a decision and its reason)
_READ_SIZE = 65536
_POLL_INTERVAL = 0.25  # seconds between deadline sweeps when nothing arrives

_REASONS = {
    200: "OK",
    100: "Continue",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}
# Content-Length: ASCII digits only (str.isdigit would take "²"), and never a huge number.
_LENGTH = re.compile(r"[0-9]{1,12}")
# A header name: RFC 9110's token.
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# One JSON string (whole, escapes included) or one structural character: what
# `json_token_count` counts. A string is matched at once, so brackets inside strings are not
# counted. Its closing quote is optional, so that a string left open matches to the end once
# (linear), instead of failing and being tried again from every later quote (quadratic).
_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{},:]', re.DOTALL)


class RequestRefused(Exception):
    """A request answered with an error: its status and the refusal's counted reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def json_token_count(body: bytes | bytearray) -> int | None:
    """How many JSON tokens (strings and structural characters) `body` holds, counted without
    parsing it; None as soon as it is over `MAX_JSON_TOKENS` or nests deeper than
    `MAX_JSON_DEPTH`. Whether it is JSON at all is the parser's to say."""
    depth = 0
    count = 0
    for match in _JSON_TOKEN.finditer(body):
        count += 1
        if count > MAX_JSON_TOKENS:
            return None
        token = match.group()
        if token[:1] == b'"':
            if len(token) == 1 or token[-1:] != b'"' or _escapes_closing_quote(token):
                return count  # a string left open: not JSON, which the parser will say
            continue
        if token in (b"[", b"{"):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return None
        elif token in (b"]", b"}"):
            depth -= 1
    return count


def _escapes_closing_quote(token: bytes) -> bool:
    """Whether the last quote of a matched string is escaped (the string ran to the end)."""
    backslashes = len(token) - 1 - len(token[:-1].rstrip(b"\\"))
    return backslashes % 2 == 1


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    keep_alive: bool


def _parse_head(head: bytes) -> _Request:
    """The request line and headers (without the blank line); `RequestRefused` when they are
    not HTTP/1.x as this route takes it."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
        raise RequestRefused(400, "http_bad_request")
    method, target, version = parts
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise RequestRefused(505, "http_bad_request")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise RequestRefused(400, "http_bad_request")  # obsolete folding included
        key = name.decode("ascii").lower()
        text = value.strip(b" \t").decode("latin-1")
        if key in headers and key in ("content-length", "authorization", "transfer-encoding"):
            raise RequestRefused(400, "http_bad_request")  # two of them: ambiguous
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    connection = headers.get("connection", "").lower()
    keep_alive = version == b"HTTP/1.1" and "close" not in connection
    path = target.decode("latin-1").split("?", 1)[0]
    return _Request(method.decode("ascii"), path, headers, keep_alive)


class _BodyBudget:
    """Body bytes in flight over all connections (`MAX_BODIES_BYTES`, with the reserve)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.used = 0

    def take(self, size: int) -> bool:
        room = MAX_BODIES_BYTES - (BODY_RESERVE_BYTES if size > LARGE_BODY_BYTES else 0)
        with self._lock:
            if self.used + size > room:
                return False
            self.used += size
            return True

    def give_back(self, size: int) -> None:
        with self._lock:
            self.used -= size


# A connection's states.
_HEAD, _BODY, _PARSING, _WAITING, _LINGER = "head", "body", "parsing", "waiting", "linger"


class _Gate:
    """A refusable event's wait: the read end of the pair whose other end is the supervisor's
    `Reply`, and how Claude Code reads a decision for that event (refusals.answer)."""

    __slots__ = ("buffer", "connection", "event", "sock", "style")

    def __init__(self, sock: socket.socket, style: str, event: str) -> None:
        self.sock = sock
        self.style = style
        self.event = event  # the lifecycle event (REFUSABLE_EVENTS): its policy when late
        self.buffer = bytearray()
        self.connection: _Connection | None = None


class _Connection:
    __slots__ = (
        "authorized",
        "body",
        "buffer",
        "close_after",
        "deadline",
        "events",
        "gate",
        "keep_alive",
        "order",
        "outgoing",
        "received",
        "served",
        "sock",
        "state",
        "taken",
    )

    def __init__(self, sock: socket.socket, order: int, deadline: float) -> None:
        self.sock = sock
        self.order = order  # accept order: the oldest unauthorized connection goes first
        self.deadline = deadline
        self.state = _HEAD
        self.buffer = bytearray()  # the head being read
        self.body: bytearray | None = None
        self.received = 0  # body bytes read so far
        self.taken = 0  # body bytes taken from the budget
        self.authorized = False  # this request showed the token: never closed for room
        self.keep_alive = True
        self.served = 0  # requests answered on this connection
        self.outgoing = bytearray()
        self.close_after = False
        self.events = 0  # what the selector watches for
        self.gate: _Gate | None = None  # waiting for a decision (state _WAITING)


class HttpIngest:
    """The loopback HTTP route into one session. `start()`, then `close()`."""

    def __init__(
        self,
        deliver: Callable[[dict[str, Any]], None],
        received: Callable[[], int] | None = None,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        agent: tuple[int, int] | None = None,
        refuse: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        ask: Callable[[dict[str, Any], Reply], None] | None = None,
        fail_closed: Callable[[str], bool] | None = None,
    ) -> None:
        """`deliver`: the socket's delivery function; `received`: how many messages the
        session got so far (for `GET /v1/status`); `agent`: the (uid, gid) the agent runs as,
        when not as this process (transcripts are read with its rights); `refuse(reason)`:
        counts each refusal (default: a counter of its own that logs, rate-limited); `ask`: the
        delivery of a message whose gates' decision is awaited (without it, no event waits);
        `fail_closed(event)`: whether a lifecycle event has a fail-closed gate, so that no
        decision within `GATE_WAIT` denies there (without it, none does)."""
        self._deliver = deliver
        self._ask = ask
        self._fail_closed = fail_closed or (lambda event: False)
        self._received = received or (lambda: 0)
        self._refuse = refuse or IngressCounts().refuse
        self._read_tail = tail_reader(AgentIdentity(*agent) if agent else None)
        self._clock = clock
        self._max_queued_bytes = max_queued_bytes
        self._queued_bytes = 0
        self._queued_lock = threading.Lock()
        self._bodies = _BodyBudget()
        self._accepting_again = 0.0  # when accepting failed: the time to try again
        self._parses_waiting = 0  # bodies handed to the parser and not yet queued for delivery
        self._parses_lock = threading.Lock()
        self.token = secrets.token_urlsafe(32)
        self._payloads: queue.Queue[tuple[dict[str, Any], int, Reply | None] | None] = queue.Queue(
            MAX_QUEUED_PAYLOADS
        )
        # Bodies waiting for the parser: at most one per connection, so at most MAX_CONNECTIONS.
        self._to_parse: queue.Queue[tuple[_Connection, int, bytearray] | None] = queue.Queue()
        self._answers: queue.Queue[tuple[_Connection, int, int, _Gate | None]] = queue.Queue()
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=LISTEN_BACKLOG)
        self._sock.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._sock, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._connections: dict[int, _Connection] = {}  # by accept order, oldest first
        self._order = itertools.count()
        self._stopped = threading.Event()
        self._threads = [
            threading.Thread(target=self._serve, name="http-ingest", daemon=True),
            threading.Thread(target=self._parse_in_order, name="http-ingest-parse", daemon=True),
            threading.Thread(
                target=self._deliver_in_order, name="http-ingest-deliver", daemon=True
            ),
        ]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def start(self) -> HttpIngest:
        for thread in self._threads:
            thread.start()
        return self

    def close(self) -> None:
        """Stop serving: open connections are closed (a request cut off is counted); what was
        already queued is still delivered, then the delivering thread ends."""
        self._stopped.set()
        self._wake()
        self._to_parse.put(None)
        with contextlib.suppress(queue.Full):
            self._payloads.put_nowait(None)
        serving = self._threads[0]
        if serving.is_alive() and threading.current_thread() is not serving:
            serving.join(timeout=2.0)
        for closing in (self._selector, self._sock, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError, ValueError):
                closing.close()

    def token_matches(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[len("Bearer ") :].encode(), self.token.encode())

    def accept(self, payload: dict[str, Any], size: int, reply: Reply | None = None) -> bool:
        """Queue one payload (charged `size` bytes) for delivery, its first message asked for a
        decision on `reply` if given; False when there is no room. A large one may not take the
        last `BODY_RESERVE_BYTES` of room, as a large body."""
        reserve = BODY_RESERVE_BYTES if size > LARGE_BODY_BYTES else 0
        with self._queued_lock:
            if self._queued_bytes + size > self._max_queued_bytes - reserve:
                self._refuse("http_queue_full")
                return False
            try:
                self._payloads.put_nowait((payload, size, reply))
            except queue.Full:
                self._refuse("http_queue_full")
                return False
            self._queued_bytes += size
        return True

    def received(self) -> int:
        return self._received()

    # -- delivery (one thread: in order) -------------------------------------------------------

    def _deliver_in_order(self) -> None:
        while True:
            item = self._payloads.get()
            if item is None:
                return
            payload, size, reply = item
            with self._queued_lock:
                self._queued_bytes -= size
            try:
                events = claude.translate_hook_payload(payload, claude.NAME, self._read_tail)
            except Exception as exc:  # noqa: BLE001 - one bad payload never stops the route
                # The type only: the payload is the agent's, and may hold anything.
                self._refuse("http_not_translated")
                log.debug("HTTP event route: a payload not translated (%s)", type(exc).__name__)
                events = []
            del payload, item
            for event in events:
                try:
                    if reply is not None and self._ask is not None:
                        # The first message is the event its gates decide on (as `hook` asks).
                        asked, reply = reply, None
                        self._ask(event.to_wire(), asked)
                    else:
                        self._deliver(event.to_wire())
                except Exception as exc:  # noqa: BLE001 - nor one failed delivery
                    self._refuse("delivery_failed")
                    log.warning(
                        "HTTP event route: delivering a message failed (%s)", type(exc).__name__
                    )
            if reply is not None:
                reply.close()  # nothing was asked: no decision, Claude Code goes on

    # -- parsing (one thread: one parse at a time, in arrival order) --------------------------

    def _parse_in_order(self) -> None:
        while True:
            item = self._to_parse.get()
            if item is None:
                return
            connection, taken, body = item
            del item
            status, gate = self._parsed(body)
            del body
            self._bodies.give_back(taken)
            with self._parses_lock:
                self._parses_waiting -= 1  # after `accept`: the delivery order is kept
            self._answers.put((connection, connection.served, status, gate))
            self._wake()

    def _parsed(self, body: bytearray) -> tuple[int, _Gate | None]:
        """Parse one body and queue it for delivery; the status to answer, and the wait for
        its gates' decision when it is an event Claude Code lets a hook refuse."""
        try:
            return self._parse_and_queue(body)
        except MemoryError:
            self._refuse("http_out_of_memory")
            return 503, None
        except Exception as exc:  # noqa: BLE001 - the route outlives any one body
            self._refuse("http_bad_request")
            log.debug("HTTP event route: a body failed (%s)", type(exc).__name__)
            return 400, None

    def _parse_and_queue(self, body: bytearray) -> tuple[int, _Gate | None]:
        tokens = json_token_count(body)
        if tokens is None:
            self._refuse("http_json_too_large")
            return 413, None
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            self._refuse("http_not_json")
            return 400, None
        if not isinstance(payload, dict):
            self._refuse("http_not_an_object")
            return 400, None
        charge = len(body) + TOKEN_CHARGE * tokens
        style = style_for(claude.NAME, payload) if self._ask is not None else None
        if style is None:
            return (200 if self.accept(payload, charge) else 503), None
        # The supervisor answers on one end of a pair; the serving thread's selector reads
        # the other, so the decision comes back to it like any readable connection.
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        if not self.accept(payload, charge, Reply(theirs)):
            theirs.close()
            ours.close()
            return 503, None
        raw = payload.get("hook_event_name")
        return 200, _Gate(
            ours, style, REFUSABLE_EVENTS.get(raw, "") if isinstance(raw, str) else ""
        )

    # -- serving (one thread: every connection, through a selector) ---------------------------

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # already awake (the buffer is full), or closed
            self._wake_w.send(b"w")

    def _serve(self) -> None:
        try:
            while not self._stopped.is_set():
                waiting = False
                for key, mask in self._selector.select(timeout=_POLL_INTERVAL):
                    if key.data == "wake":
                        self._drain_wake()
                    elif key.data is None:
                        waiting = True
                    elif isinstance(key.data, _Gate):
                        self._read_decision(key.data)
                    else:
                        self._step(key.data, mask)
                self._answer_parsed()
                # New connections after what the open ones sent: a request that has arrived
                # is read before its connection could be closed to make room.
                if waiting:
                    self._accept_waiting()
                if self._accepting_again and time.monotonic() >= self._accepting_again:
                    self._selector.register(self._sock, selectors.EVENT_READ, None)
                    self._accepting_again = 0.0
                self._expire()
        except Exception as exc:  # noqa: BLE001 - a line, never a traceback on the terminal
            if not self._stopped.is_set():
                log.error("HTTP event route stopped: %s", type(exc).__name__)
        finally:
            for connection in list(self._connections.values()):
                if connection.state == _BODY or connection.buffer:
                    self._refuse("http_route_closed")  # a request cut off: lost, so counted
                self._drop(connection)

    def _accept_waiting(self) -> None:
        for _ in range(LISTEN_BACKLOG):
            try:
                sock, address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                # Out of descriptors (the process's limit, not ours): the backlog keeps them,
                # and the listener, readable still, is left out of the selector a moment
                # rather than tried again at once, round after round.
                self._refuse("http_accept_failed")
                self._selector.unregister(self._sock)
                self._accepting_again = time.monotonic() + ACCEPT_PAUSE
                return
            if len(self._connections) >= MAX_CONNECTIONS and not self._make_room():
                self._refuse("http_too_many_connections")
                sock.close()
                continue
            sock.setblocking(False)
            connection = _Connection(sock, next(self._order), self._clock() + REQUEST_DEADLINE)
            self._connections[connection.order] = connection
            if not is_loopback_host(str(address[0])):
                self._fail(connection, RequestRefused(403, "http_not_loopback"))
                continue
            self._watch(connection, selectors.EVENT_READ)

    def _make_room(self) -> bool:
        """Close the oldest connection whose request has not shown the token (one already
        answered first); False when every open one has (the agent itself holds them all)."""
        candidates = [c for c in self._connections.values() if not c.authorized]  # oldest first
        if not candidates:
            return False
        answered = [c for c in candidates if not _unfinished(c)]
        closed = (answered or candidates)[0]
        if _unfinished(closed):
            self._refuse("http_too_many_connections")
        self._drop(closed)
        return True

    def _step(self, connection: _Connection, mask: int) -> None:
        if self._connections.get(connection.order) is not connection:
            return  # closed earlier in this round
        try:
            if mask & selectors.EVENT_WRITE:
                self._flush(connection)
            if (
                mask & selectors.EVENT_READ
                and connection.order in self._connections
                and connection.state not in (_PARSING, _WAITING)
            ):
                self._read(connection)
        except RequestRefused as refused:
            self._fail(connection, refused)
        except OSError:
            self._drop(connection)
        except MemoryError:
            self._refuse("http_out_of_memory")
            self._drop(connection)
        except Exception as exc:  # noqa: BLE001 - one client's bytes never stop the route
            self._refuse("http_bad_request")
            log.debug("HTTP event route: a request failed (%s)", type(exc).__name__)
            self._drop(connection)

    def _read(self, connection: _Connection) -> None:
        if connection.state == _LINGER:
            chunk = connection.sock.recv(_READ_SIZE)
            connection.received += len(chunk)
            if not chunk or connection.received > LINGER_BYTES:
                self._drop(connection)
            return
        if connection.state == _BODY:
            self._read_body(connection)
            return
        chunk = connection.sock.recv(min(_READ_SIZE, MAX_HEADER_BYTES + 4 - len(connection.buffer)))
        if not chunk:
            if connection.buffer:
                self._refuse("http_incomplete_request")
            self._drop(connection)
            return
        searched = max(0, len(connection.buffer) - 3)  # a trickled head is not searched again
        connection.buffer += chunk
        end = connection.buffer.find(b"\r\n\r\n", searched)
        if end < 0:
            if len(connection.buffer) > MAX_HEADER_BYTES:
                raise RequestRefused(431, "http_header_too_large")
            return
        head, rest = bytes(connection.buffer[:end]), connection.buffer[end + 4 :]
        connection.buffer = bytearray()
        self._begin(connection, _parse_head(head), rest)

    def _begin(self, connection: _Connection, request: _Request, rest: bytearray) -> None:
        """Decide on a request from its head alone: answer it, or begin reading its body."""
        connection.keep_alive = request.keep_alive
        if not self.token_matches(request.headers.get("authorization")):
            raise RequestRefused(401, "http_unauthorized")
        connection.authorized = True
        if request.method == "GET" and request.path == STATUS_PATH:
            if rest or "content-length" in request.headers:
                raise RequestRefused(400, "http_bad_request")
            body = json.dumps({"received": self.received()}).encode()
            self._respond(connection, 200, body, "application/json")
            return
        if request.path not in (CLAUDE_PATH, STATUS_PATH):
            raise RequestRefused(404, "http_not_found")
        if request.method != "POST" or request.path != CLAUDE_PATH:
            raise RequestRefused(405, "http_method_not_allowed")
        length_header = request.headers.get("content-length")
        if length_header is None or "transfer-encoding" in request.headers:
            raise RequestRefused(411, "http_length_required")
        if not _LENGTH.fullmatch(length_header):
            raise RequestRefused(400, "http_bad_request")
        length = int(length_header)
        if length > MAX_BODY_BYTES:
            raise RequestRefused(413, "http_body_too_large")
        if len(rest) > length:
            raise RequestRefused(400, "http_bad_request")  # pipelining: not for this route
        if not self._bodies.take(length):
            raise RequestRefused(503, "http_bodies_in_flight")
        connection.taken = length
        connection.body = bytearray(length)
        connection.body[: len(rest)] = rest
        connection.received = len(rest)
        connection.state = _BODY
        if request.headers.get("expect", "").lower() == "100-continue" and not rest:
            connection.outgoing += b"HTTP/1.1 100 Continue\r\n\r\n"
            self._flush(connection)
        if connection.received == length:
            self._to_parser(connection)

    def _read_body(self, connection: _Connection) -> None:
        assert connection.body is not None
        view = memoryview(connection.body)[connection.received :]
        size = connection.sock.recv_into(view, min(len(view), _READ_SIZE))
        view.release()
        if size == 0:
            self._refuse("http_incomplete_request")
            self._drop(connection)
            return
        connection.received += size
        if connection.received == len(connection.body):
            self._to_parser(connection)

    def _to_parser(self, connection: _Connection) -> None:
        body, connection.body = connection.body, None
        assert body is not None
        taken, connection.taken = connection.taken, 0
        connection.state = _PARSING
        with self._parses_lock:
            inline = len(body) <= INLINE_PARSE_BYTES and not self._parses_waiting
            if not inline:
                self._parses_waiting += 1
        if inline:
            # A usual post, with no body before it still waiting: parsed here, which saves
            # two thread hand-offs on every event.
            status, gate = self._parsed(body)
            self._bodies.give_back(taken)
            self._answer(connection, status, gate)
            return
        self._watch(connection, 0)  # nothing more is read until this body is answered
        self._to_parse.put((connection, taken, body))

    def _answer_parsed(self) -> None:
        while True:
            try:
                connection, served, status, gate = self._answers.get_nowait()
            except queue.Empty:
                return
            if (
                self._connections.get(connection.order) is not connection
                or connection.served != served
                or connection.state != _PARSING
            ):
                if gate is not None:
                    gate.sock.close()  # closed while its body was parsed (the supervisor stopping)
                continue
            try:
                self._answer(connection, status, gate)
            except OSError:
                self._drop(connection)

    def _answer(self, connection: _Connection, status: int, gate: _Gate | None = None) -> None:
        if gate is not None:
            # Answered once the supervisor decides (`_read_decision`), or at `GATE_WAIT`.
            gate.connection, connection.gate = connection, gate
            connection.state = _WAITING
            connection.deadline = self._clock() + GATE_WAIT
            self._selector.register(gate.sock, selectors.EVENT_READ, gate)
            return
        if status != 200:
            connection.close_after = True
        self._respond(connection, status)

    def _respond(
        self, connection: _Connection, status: int, body: bytes = b"", content_type: str = ""
    ) -> None:
        close = connection.close_after or not connection.keep_alive or status >= 400
        head = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
            f"Content-Length: {len(body)}",
        ]
        if content_type:
            head.append(f"Content-Type: {content_type}")
        if close:
            head.append("Connection: close")
        else:
            # A client that keeps the connection closes it before we would (Node's HTTP
            # client reads this): a post is never sent on a connection we are closing.
            head.append(f"Keep-Alive: timeout={int(REQUEST_DEADLINE // 2)}")
        connection.outgoing += ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body
        connection.served += 1
        connection.close_after = close
        connection.authorized = False  # the next request shows the token again
        connection.state = _LINGER if close else _HEAD
        connection.received = 0
        connection.deadline = self._clock() + (LINGER_SECONDS if close else REQUEST_DEADLINE)
        self._flush(connection)

    def _flush(self, connection: _Connection) -> None:
        if connection.outgoing:
            sent = connection.sock.send(connection.outgoing)
            del connection.outgoing[:sent]
        if connection.outgoing:
            reading = 0 if connection.state in (_PARSING, _WAITING) else selectors.EVENT_READ
            self._watch(connection, reading | selectors.EVENT_WRITE)
            return
        if connection.state == _LINGER:
            connection.sock.shutdown(socket.SHUT_WR)  # the answer is out; what comes is drained
        self._watch(
            connection, 0 if connection.state in (_PARSING, _WAITING) else selectors.EVENT_READ
        )

    def _fail(self, connection: _Connection, refused: RequestRefused) -> None:
        self._refuse(refused.reason)
        if connection.taken:
            self._bodies.give_back(connection.taken)
            connection.taken = 0
        connection.body = None
        connection.close_after = True
        try:
            self._respond(connection, refused.status)
        except OSError:
            self._drop(connection)

    def _watch(self, connection: _Connection, events: int) -> None:
        if events == connection.events:
            return
        if connection.events and events:
            self._selector.modify(connection.sock, events, connection)
        elif events:
            self._selector.register(connection.sock, events, connection)
        else:
            self._selector.unregister(connection.sock)
        connection.events = events

    def _expire(self) -> None:
        now = self._clock()
        for connection in [c for c in self._connections.values() if c.deadline <= now]:
            if connection.state == _PARSING:
                continue  # the parser answers it; the parse is bounded, not the client
            if connection.state == _WAITING and connection.gate is not None:
                self._decided(connection.gate, self._late(connection.gate))
                continue
            if connection.state == _LINGER:
                self._drop(connection)
            elif connection.state == _BODY or connection.buffer:
                self._refuse("http_request_deadline")
                self._drop(connection)
            else:
                if not connection.served:  # a connection that never sent a request
                    self._refuse("http_idle_connection")
                self._drop(connection)

    def _drop(self, connection: _Connection) -> None:
        if self._connections.pop(connection.order, None) is None:
            return
        if connection.taken:
            self._bodies.give_back(connection.taken)
            connection.taken = 0
        connection.body = None
        self._end_wait(connection)
        if connection.events:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(connection.sock)
            connection.events = 0
        connection.sock.close()

    # -- a refusable event's decision ----------------------------------------------------------

    def _read_decision(self, gate: _Gate) -> None:
        """Read the supervisor's answer line (or its end: no decision) and answer the hook."""
        try:
            chunk = gate.sock.recv(_READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        gate.buffer += chunk
        if chunk and b"\n" not in gate.buffer and len(gate.buffer) <= MAX_DECISION_BYTES:
            return
        decision: object = None
        if b"\n" in gate.buffer:
            with contextlib.suppress(ValueError):
                decision = json.loads(gate.buffer.split(b"\n", 1)[0])
        self._decided(gate, decision if isinstance(decision, dict) else None)

    def _late(self, gate: _Gate) -> dict[str, Any] | None:
        """No decision within `GATE_WAIT`: deny where the event has a fail-closed gate, else
        none (Claude Code goes on). A decision the supervisor makes later is not told."""
        try:
            closed = bool(gate.event) and self._fail_closed(gate.event)
        except Exception:  # noqa: BLE001 - a late gate never fails open by an error here
            log.exception("HTTP event route: the gate's policy could not be read")
            closed = True
        if not closed:
            log.warning(
                "HTTP event route: no gate decision within %gs; Claude Code goes on", GATE_WAIT
            )
            return None
        log.warning("HTTP event route: no gate decision within %gs; fail-closed: deny", GATE_WAIT)
        reason = f"no decision within {GATE_WAIT:g}s for this gate, which is fail-closed"
        return {"decision": "deny", "reason": f"otel-lifecycle-hooks: {reason}"}

    def _decided(self, gate: _Gate, decision: dict[str, Any] | None) -> None:
        """Answer the waiting hook with `decision` in Claude Code's protocol (refusals.answer:
        nothing for allow or no decision, so Claude Code goes on)."""
        connection = gate.connection
        if connection is None:
            return
        self._end_wait(connection)
        text = answer(gate.style, decision) if decision is not None else None
        connection.state = _HEAD
        try:
            if text is None:
                self._respond(connection, 200)
            else:
                self._respond(connection, 200, text.encode("utf-8"), "application/json")
        except OSError:
            self._drop(connection)

    def _end_wait(self, connection: _Connection) -> None:
        gate, connection.gate = connection.gate, None
        if gate is None:
            return
        gate.connection = None
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(gate.sock)
        gate.sock.close()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass


def _unfinished(connection: _Connection) -> bool:
    """Whether closing `connection` now loses a request: one begun, or a connection that has
    sent nothing yet (not one answered and idle, or lingering after its answer)."""
    if connection.state in (_BODY, _PARSING, _WAITING) or connection.buffer:
        return True
    return connection.state == _HEAD and not connection.served
