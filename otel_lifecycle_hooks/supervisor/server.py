"""The supervisor's event socket: a Unix stream socket through which `hook --dialect` and
`status` hand runtime events to the running session (one JSON object per line).

The socket lives in a private directory of the supervisor's, which nobody else can write
(mode 0700; 0711 when a root supervisor serves an agent of another user), and the socket
itself (mode 0600) is the agent's user's, so that only that user can feed events in: the
agent can reach the socket but never rename or replace anything beside it, so nothing root
does there can be turned by a planted link (private_files.py). Its path reaches the child as
`LIFECYCLE_HOOKS_SOCKET`. Whatever writes to it is
the agent, so it is untrusted: no client can stall the others, and nothing a client sends can
raise out of the server (docs/security.md).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import random
import selectors
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..harness.socket_client import REPLY_KEY, UNDELIVERED_FILE

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

SOCKET_ENV = "OTEL_LIFECYCLE_HOOKS_SOCKET"
# One line, as the client writes it (harness/socket_client.py MAX_LINE_BYTES), plus its newline.
MAX_LINE_BYTES = 1024 * 1024 + 1
# Connections served at once; more wait in the listen backlog, so that a flood of connections
# cannot hold memory or descriptors.
MAX_CONNECTIONS = 64
# A client has this long from its first byte of a line to that line's end, and a connection
# that sends nothing is closed after it: a trickling or stalled client is cut off, and never
# holds up the others (connections are served concurrently).
MESSAGE_DEADLINE = 5.0  # seconds
LISTEN_BACKLOG = 128
SOCKET_NAME = "events.sock"
_POLL_INTERVAL = 0.5  # seconds between deadline sweeps when nothing arrives
_READ_SIZE = 65536
STOPPING = "session_stopping"  # lines left unread in the backlog when the server closes
# How often the senders' count of undelivered lines is read while the server runs (and once
# more at close): one fstatat, never the file's content.
UNDELIVERED_CHECK_INTERVAL = 1.0  # seconds
REPLY_SEND_TIMEOUT = 1.0  # seconds: an answer is one short line to a client that waits for it


class Reply:
    """The answer a client waits for (a line that asked for one: `socket_client.REPLY_KEY`),
    sent at most once, on a duplicate of its connection, from whichever thread decided it.
    `close()` without sending says "no decision": the client applies its own policy."""

    __slots__ = ("_lock", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        self._sock: socket.socket | None = sock
        self._lock = threading.Lock()

    def send(self, answer: dict[str, str]) -> None:
        """Send `answer` as one JSON line and close; never raises, never waits long."""
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is None:
            return
        try:
            sock.settimeout(REPLY_SEND_TIMEOUT)
            sock.sendall(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
        except OSError:
            pass  # the client gave up: its own policy answers its harness
        finally:
            sock.close()

    def close(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    @property
    def pending(self) -> bool:
        return self._sock is not None


class _Connection:
    __slots__ = ("buffer", "deadline", "order", "registered", "sock")

    def __init__(self, sock: socket.socket, order: int, deadline: float) -> None:
        self.sock = sock
        self.order = order  # accept order: ready connections are read in this order
        self.buffer = bytearray()
        self.deadline = deadline
        self.registered = False  # in the selector: it outlived the round that accepted it


class EventServer:
    """Serves connections concurrently on one thread (a selector loop) and hands each decoded
    message to `deliver`; the lines of one connection in order.

    What cannot be a message is refused here and counted through `refuse(reason)`: bytes that
    are not JSON, JSON that is not an object, a line over `MAX_LINE_BYTES`, a line not finished
    within `MESSAGE_DEADLINE`, a connection idle for as long. At most `MAX_CONNECTIONS` are
    served at once; the others wait in the listen backlog. Bytes that are not UTF-8
    are replaced (U+FFFD), so a stray byte never costs the event. `deliver` may block
    (backpressure): senders then wait in the listen backlog, and retry when it is full.
    """

    def __init__(
        self,
        deliver: Callable[[dict[str, Any]], None],
        directory: str | None = None,
        owner: tuple[int, int] | None = None,
        refuse: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        undelivered: Callable[[int], None] | None = None,
        ask: Callable[[dict[str, Any], Reply], None] | None = None,
    ) -> None:
        """`owner`: (uid, gid) to hand the socket to, when the agent runs as another user
        than the supervisor (root); the directory stays the supervisor's. `refuse(reason)`
        counts what was refused (default: a log line). `undelivered(total)` is given the
        senders' running count of lines they could not deliver
        (`harness.socket_client.record_undelivered`), read every `UNDELIVERED_CHECK_INTERVAL`
        and at close, from a file made here for the agent's user. `ask(message, reply)`
        takes a message whose sender waits for an answer (a gate's decision) instead of
        `deliver`; without it, such a sender gets none (its connection just ends)."""
        self._deliver = deliver
        self._ask = ask
        self._refuse = refuse or _log_refusal
        self._undelivered = undelivered
        self._owner_uid = owner[0] if owner is not None else os.getuid()
        self._clock = clock
        self._next_loss_check = clock() + UNDELIVERED_CHECK_INTERVAL
        self._dir, self._dir_fd = _private_directory(directory, reachable=owner is not None)
        self._dir_lock = threading.Lock()  # the descriptor is closed at close()
        self.path = str(self._dir / SOCKET_NAME)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(self.path)
            _hand_socket_to(self._dir_fd, owner)
            if undelivered is not None:
                _create_counter(self._dir_fd, owner)
        except BaseException:
            self._sock.close()
            _remove_private_directory(self._dir, self._dir_fd)
            raise
        self._sock.listen(LISTEN_BACKLOG)
        self._sock.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._sock, selectors.EVENT_READ, None)
        self._connections: dict[int, _Connection] = {}
        self._paused = False  # the listener is out of the selector while at MAX_CONNECTIONS
        self._order = itertools.count()
        self._stopped = threading.Event()
        # Callers of settle() waiting for a round that finds nothing left to read.
        self._settling: list[threading.Event] = []
        self._settling_lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._loop, name="event-socket", daemon=True)

    def start(self) -> EventServer:
        self._thread.start()
        return self

    def _loop(self) -> None:
        try:
            while not self._stopped.is_set():
                # Taken before the select: what was sent before settle() was called is in
                # the kernel's buffers by now, so a round that finds nothing proves it read.
                with self._settling_lock:
                    settling, self._settling = self._settling, []
                ready = self._selector.select(timeout=0 if settling else _POLL_INTERVAL)
                connections = []
                woken = False
                for key, _ in ready:
                    if key.data == "wake":
                        if self._stopped.is_set():
                            return
                        woken = True
                        self._drain_wake()
                        continue
                    if key.data is None:
                        # A client writes as soon as it is connected: a new connection is
                        # read in this round (after the older ones, as it was accepted
                        # after them), not after another wait in the selector.
                        connections.extend(self._accept())
                    else:
                        connections.append(key.data)
                started = self._clock()
                for connection in sorted(connections, key=lambda c: c.order):
                    self._read(connection)
                    if not connection.registered and connection.sock.fileno() >= 0:
                        # Still open after its first round: the selector tells of what
                        # comes next. One that ended in that round (a `hook` client's
                        # usual whole life) never enters it: two system calls fewer.
                        self._selector.register(connection.sock, selectors.EVENT_READ, connection)
                        connection.registered = True
                # Time spent delivering (the supervisor applying backpressure) is ours, not the
                # clients': it does not count against their deadlines.
                busy = self._clock() - started
                if busy > _POLL_INTERVAL:
                    for connection in self._connections.values():
                        connection.deadline += busy
                self._expire()
                if self._undelivered is not None and self._clock() >= self._next_loss_check:
                    self._next_loss_check = self._clock() + UNDELIVERED_CHECK_INTERVAL
                    self.check_undelivered()
                if settling:
                    if len(ready) - woken == 0:
                        for waiter in settling:
                            waiter.set()
                    else:
                        with self._settling_lock:
                            self._settling.extend(settling)
        except Exception:  # the loop must never die silently: every later event would be lost
            if not self._stopped.is_set():  # (after close, its sockets are gone: expected)
                log.exception("event socket: the server loop failed")
        finally:
            for connection in list(self._connections.values()):
                self._drop(connection)

    def _accept(self) -> list[_Connection]:
        """Accept what waits in the backlog, up to the bound; the new connections."""
        accepted: list[_Connection] = []
        while len(self._connections) < MAX_CONNECTIONS:
            try:
                sock, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return accepted
            except OSError:
                return accepted  # closed, or out of descriptors: the backlog keeps the rest
            sock.setblocking(False)
            connection = _Connection(sock, next(self._order), self._clock() + MESSAGE_DEADLINE)
            self._connections[sock.fileno()] = connection
            accepted.append(connection)
        # At the bound: further clients wait in the listen backlog (and, when it is full,
        # retry within their budget) until a connection ends; each idle one ends at its
        # deadline, so a client holding many open delays the others by at most that.
        if not self._paused:
            self._selector.unregister(self._sock)
            self._paused = True
        return accepted

    def _read(self, connection: _Connection) -> None:
        # A client writes its lines and closes at once: when what it wrote fitted in one
        # read, its end of file is very likely there too, and is taken now rather than
        # after another round of the selector (one more read at most, never a loop).
        for _ in range(2):
            if connection.sock.fileno() < 0:  # dropped by the first read
                return
            size = self._read_once(connection)
            if size == 0 or size >= _READ_SIZE:
                return

    def _read_once(self, connection: _Connection) -> int:
        """One read and what it completes; the bytes read (0 when nothing was there, or the
        connection ended and was dropped)."""
        try:
            chunk = connection.sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            chunk = b""
        if not chunk:  # end of file: a last line without its newline still counts
            if connection.buffer.strip():
                self._decode(bytes(connection.buffer), connection)
            self._drop(connection)
            return 0
        was_empty = not connection.buffer
        connection.buffer += chunk
        if b"\n" in chunk:
            # Every complete line at once: splitting one line at a time would copy the rest
            # of the buffer for each line.
            *lines, rest = connection.buffer.split(b"\n")
            connection.buffer = bytearray(rest)
            for line in lines:
                if len(line) >= MAX_LINE_BYTES:
                    self._refuse("line_too_long")
                else:
                    self._decode(bytes(line), connection)
            was_empty = True
        if len(connection.buffer) >= MAX_LINE_BYTES:
            self._refuse("line_too_long")
            self._drop(connection)
            return 0
        if was_empty:  # a new line began: it gets its own deadline
            connection.deadline = self._clock() + MESSAGE_DEADLINE
        return len(chunk)

    def _expire(self) -> None:
        now = self._clock()
        for connection in [c for c in self._connections.values() if c.deadline <= now]:
            self._refuse("message_deadline" if connection.buffer else "idle_connection")
            self._drop(connection)

    def _drop(self, connection: _Connection) -> None:
        self._connections.pop(connection.sock.fileno(), None)
        if connection.registered:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(connection.sock)
        connection.sock.close()
        if self._paused and len(self._connections) < MAX_CONNECTIONS:
            self._selector.register(self._sock, selectors.EVENT_READ, None)
            self._paused = False

    def _decode(self, line: bytes, connection: _Connection | None = None) -> None:
        if not line.strip():
            return
        try:
            # Invalid UTF-8 is replaced rather than refused: the event still arrives.
            message = json.loads(line.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            self._refuse("not_json")
            return
        if not isinstance(message, dict):
            self._refuse("not_an_object")
            return
        reply, ask = None, self._ask
        if message.get(REPLY_KEY) is True and connection is not None and ask is not None:
            try:
                reply = Reply(connection.sock.dup())  # outlives the connection's end of file
            except OSError:
                reply = None
        try:
            if reply is None or ask is None:
                self._deliver(message)
            else:
                ask(message, reply)
        except Exception:
            if reply is not None:
                reply.close()  # never leave a sender waiting on a failed delivery
            log.exception("event socket: delivering a message failed")
            self._refuse("delivery_failed")

    def settle(self, timeout: float) -> bool:
        """Wait until every line sent before this call has been handed to `deliver` (a round
        of the loop found nothing more to read); False when `timeout` ran out first (a client
        still sending). The supervisor calls it when the agent exits: the agent's last
        event may still be in the socket, unread."""
        if not self._thread.is_alive():
            return False
        waiter = threading.Event()
        with self._settling_lock:
            self._settling.append(waiter)
        try:
            self._wake_w.send(b"s")
        except OSError:
            return False
        return waiter.wait(timeout)

    def _count_backlog(self) -> None:
        """Connections still waiting in the listen backlog when the server closes are never
        read: each line they hold (as much as is already there, up to `_READ_SIZE` each) is
        counted as refused, reason `session_stopping`, instead of vanishing unseen."""
        for _ in range(LISTEN_BACKLOG + 1):
            try:
                sock, _ = self._sock.accept()
            except OSError:  # none left (BlockingIOError), or closed
                return
            try:
                sock.setblocking(False)
                data = sock.recv(_READ_SIZE)
            except OSError:
                data = b""
            finally:
                sock.close()
            lines = data.count(b"\n") + (1 if data.rsplit(b"\n", 1)[-1].strip() else 0)
            for _ in range(lines):
                self._refuse(STOPPING)

    def check_undelivered(self) -> None:
        """Hand the senders' count of undelivered lines to `undelivered`, when it can be read.

        The file was made here, in the supervisor's own directory, for the agent's user, who
        may write it (and so set its size) but not replace it. It is looked at through the
        directory's descriptor with an lstat (never opened, never followed) and taken only as
        a regular file of the agent's user (or ours). Its size is the count; the agent can
        only make its own count wrong."""
        if self._undelivered is None:
            return
        with self._dir_lock:
            if self._dir_fd < 0:
                return  # closed
            try:
                info = os.stat(UNDELIVERED_FILE, dir_fd=self._dir_fd, follow_symlinks=False)
            except OSError:
                return
        if not stat.S_ISREG(info.st_mode) or info.st_uid not in (self._owner_uid, os.getuid()):
            return
        try:
            self._undelivered(info.st_size)
        except Exception:  # counting must never stop the server
            log.debug("event socket: counting undelivered lines failed", exc_info=True)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass

    def close(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            # Not long: the loop may be waiting for room in a supervisor that stopped reading.
            self._thread.join(timeout=1.0)
        with contextlib.suppress(OSError, ValueError):
            self._selector.close()
        if not self._thread.is_alive():  # else the loop may still accept: not ours to take
            self._count_backlog()
        self._sock.close()
        self._wake_r.close()
        self._wake_w.close()
        # The last count: senders that gave up while the agent was ending.
        self.check_undelivered()
        with self._dir_lock:
            _remove_private_directory(self._dir, self._dir_fd)  # the counter's file with it
            self._dir_fd = -1


def _create_counter(directory: int, owner: tuple[int, int] | None) -> None:
    """An empty `UNDELIVERED_FILE` in `directory` (a descriptor) that the agent's user may
    append to, made here since senders may not create files beside the socket: exclusive,
    never through a link, handed over through its descriptor."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(UNDELIVERED_FILE, flags, 0o600, dir_fd=directory)
    try:
        if owner is not None:
            os.fchown(descriptor, *owner)
    finally:
        os.close(descriptor)


def _log_refusal(reason: str) -> None:
    log.warning("event socket: a message was refused: %s", reason)


def _private_directory(parent: str | None, reachable: bool) -> tuple[Path, int]:
    """A new directory of ours under `parent` or the temporary directory, and a descriptor of
    it: mode 0700, or 0711 when `reachable` (root serving another user's agent, who may go
    through it to the socket but neither list nor change what is in it).

    What `tempfile.mkdtemp` does; importing tempfile (and the shutil, bz2 and lzma it pulls
    in) would cost every `run` about 2 ms.
    """
    base = parent or os.environ.get("TMPDIR") or "/tmp"
    for _ in range(100):
        path = Path(base, f"olh-{random.getrandbits(48):012x}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            # What we opened is what mkdir made: ours, and changed through its descriptor.
            if os.fstat(descriptor).st_uid != os.geteuid():
                raise PermissionError(f"{path}: not the directory this process just made")
            os.fchmod(descriptor, 0o711 if reachable else 0o700)  # whatever the umask
        except BaseException:
            os.close(descriptor)
            raise
        return path, descriptor
    raise FileExistsError(f"no free directory name under {base}")


def _hand_socket_to(directory: int, owner: tuple[int, int] | None) -> None:
    """Make the socket just bound in `directory` (a descriptor) usable by `owner` alone.

    Only this process can change what is in the directory (it is ours and writable by no
    one else), so the name is the socket bind made; still, nothing here follows a link."""
    info = os.stat(SOCKET_NAME, dir_fd=directory, follow_symlinks=False)
    if not stat.S_ISSOCK(info.st_mode):
        raise PermissionError(f"{SOCKET_NAME} in the socket directory is not the bound socket")
    if owner is not None:
        os.chown(SOCKET_NAME, *owner, dir_fd=directory, follow_symlinks=False)
    # Connecting takes write permission on the socket: its owner's alone.
    os.chmod(SOCKET_NAME, 0o600, dir_fd=directory)


def _remove_private_directory(path: Path, directory: int) -> None:
    """Empty the directory through its descriptor (only this process wrote in it: the
    socket, the Claude Code settings file and the undelivered count), remove it, close the
    descriptor."""
    try:
        for name in os.listdir(directory):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=directory)
        os.rmdir(path)
    except OSError:
        pass
    finally:
        os.close(directory)
