"""The client side of the supervisor's event socket.

The supervisor (`otel-lifecycle-hooks run`) listens on a Unix stream socket whose path it puts
in `$LIFECYCLE_HOOKS_SOCKET` for the agent and its hooks. The name has no `OTEL_` prefix because
Claude Code removes every `OTEL_*` variable from its hooks' and tools' environment; the older
`$OTEL_LIFECYCLE_HOOKS_SOCKET` is still read, for one release. When no variable reaches the
client, it finds its supervisor through the pointer file that supervisor wrote for it (see
`find_pointer`), and sends only if the socket it names is served by that supervisor itself
(`_check_server`). Protocol, version 1:

- A client connects (timeout `CONNECT_TIMEOUT`, 200 ms; a full backlog is retried within
  it), writes one or more lines and closes its end. No reply is sent or awaited; the server reads
  until end of file.
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
- A client that could not deliver its lines (nothing accepted within its budget, or the write
  failed) appends one byte per line to `UNDELIVERED_FILE` beside the socket, in the socket's
  private directory (only the agent's user and the supervisor reach it). The supervisor counts
  that file's growth as lines refused for reason `undelivered`, so that what a sender lost is
  counted where its own refusals are.

Everything here is standard library: it runs inside `hook`, once per harness event.
"""

from __future__ import annotations

# `_socket`, the C module itself: `socket`'s enums and selectors cost 2.5 ms to import against
# 0.3 ms (-X importtime), of a hook process of 14.7 ms (bench_hook_path.py); none is needed.
import _socket
import errno
import json
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence

from ..errors import LifecycleHooksError
from .normalized import WIRE_VERSION, NormalizedEvent, clip

# On the hook path: `typing` (3 ms to import) is for checkers (bench_hook_path.py, 14.7 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The package's variables that must reach a hook command or a tool: no `OTEL_` prefix.
ENV_PREFIX = "LIFECYCLE_HOOKS_"
LEGACY_ENV_PREFIX = "OTEL_LIFECYCLE_HOOKS_"  # read as a fallback for one release
SOCKET_ENV = ENV_PREFIX + "SOCKET"
LEGACY_SOCKET_ENV = LEGACY_ENV_PREFIX + "SOCKET"
POINTER_DIR_NAME = "otel-lifecycle-hooks"
POINTER_VERSION = 1
PING_KIND = "ping"  # `harness doctor`'s probe: counted by the supervisor, fires nothing
MAX_POINTER_BYTES = 4096
MAX_ANCESTORS = 64  # how far up the process tree a client looks for its supervisor
CONNECT_TIMEOUT = 0.2  # seconds; a hook must never hold up its harness
SEND_TIMEOUT = 1.0  # seconds for the whole write, once connected
MAX_LINE_BYTES = 1024 * 1024
MAX_MESSAGE_CHARS = 4096
# Beside the socket: its size is how many lines senders could not deliver (one byte each).
UNDELIVERED_FILE = "undelivered"
# O_NONBLOCK: a FIFO at that name fails the open instead of holding the sender.
_UNDELIVERED_FLAGS = (
    os.O_WRONLY
    | os.O_APPEND
    | os.O_CREAT
    | os.O_NONBLOCK
    | getattr(os, "O_NOFOLLOW", 0)
    | os.O_CLOEXEC
)
_EAGAIN, _EWOULDBLOCK = errno.EAGAIN, errno.EWOULDBLOCK


class SupervisorUnavailable(OSError, LifecycleHooksError):
    """No supervisor socket is configured, or it did not accept the connection in time."""


class DecisionLate(SupervisorUnavailable):
    """The supervisor took the event but decided nothing on its gates in time (it was busy
    with earlier messages, or the gates are slower than the wait)."""


class NoSupervisor(SupervisorUnavailable):
    """No supervisor is configured at all (no variable, no pointer file): the agent is not
    under `run`, which for hooks installed at user level is a normal day, not a failure."""


def package_env(environ: Mapping[str, str], name: str) -> str:
    """`$LIFECYCLE_HOOKS_<name>`, else the older `$OTEL_LIFECYCLE_HOOKS_<name>`, else ""."""
    return environ.get(ENV_PREFIX + name) or environ.get(LEGACY_ENV_PREFIX + name) or ""


def template_paths(given: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The templates a hook runs in-process when no supervisor is reachable: those named on
    its command line, else those of `$LIFECYCLE_HOOKS_TEMPLATE` (path-separated)."""
    if given:
        return list(given)
    return [path for path in package_env(environ, "TEMPLATE").split(os.pathsep) if path]


def socket_path(environ: Mapping[str, str] | None = None) -> str:
    """The supervisor socket's path: from the environment, else from the pointer file of the
    supervisor this process runs under; raises `SupervisorUnavailable` when there is neither."""
    return supervisor_address(environ)[0]


def supervisor_address(environ: Mapping[str, str] | None = None) -> tuple[str, int | None]:
    """The supervisor socket's path, and the pid that must serve it: None for a path from the
    environment (which only an ancestor could set), the supervisor's pid for one from its
    pointer file (which any process of the agent's user can rewrite: `send_lines` checks it).
    Raises `SupervisorUnavailable` when there is neither."""
    env = os.environ if environ is None else environ
    path = package_env(env, "SOCKET")
    if path:
        return path, None
    pointer = find_pointer(env)
    if pointer is not None and isinstance(pointer.get("socket"), str) and pointer["socket"]:
        return str(pointer["socket"]), int(pointer["pid"])
    raise NoSupervisor(
        f"${SOCKET_ENV} is not set and no supervisor's pointer file was found: "
        "no supervisor is running"
    )


def pointer_directories(environ: Mapping[str, str]) -> list[str]:
    """Where supervisors leave pointer files for their agent: the user's runtime directory
    when there is one, and the state directory under $HOME (both are read; the first is
    written)."""
    folders = []
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        folders.append(os.path.join(runtime, POINTER_DIR_NAME))
    home = environ.get("HOME") or os.path.expanduser("~")
    folders.append(os.path.join(home, ".local", "state", POINTER_DIR_NAME, "run"))
    return folders


def pointer_file_name(supervisor_pid: int) -> str:
    return f"supervisor-{supervisor_pid}.json"


def find_pointer(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The pointer file of the nearest supervisor among this process's ancestors, or None.

    A hook command or a tool runs somewhere below the supervisor in the process tree (shells
    and `setsid` change the group and session, never the parent chain), so the first ancestor
    that has a pointer file is the supervisor of this very session, even when several run
    under the same user at once.
    """
    env = os.environ if environ is None else environ
    folders = [f for f in pointer_directories(env) if os.path.isdir(f)]
    if not folders:
        return None
    for pid in _ancestors():
        name = pointer_file_name(pid)
        for folder in folders:
            pointer = _read_pointer(os.path.join(folder, name))
            if pointer is not None and type(pointer.get("pid")) is int and pointer["pid"] == pid:
                return pointer
    return None


def _ancestors() -> Iterable[int]:
    pid = os.getppid()
    for _ in range(MAX_ANCESTORS):
        if pid <= 1:
            return
        yield pid
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                # The command name (field 2) may hold spaces and parentheses: parse after it.
                fields = stat.read().rsplit(b")", 1)[1].split()
            pid = int(fields[1])
        except (OSError, IndexError, ValueError):
            return  # no /proc (macOS): only the direct parent is looked at


def _read_pointer(path: str) -> dict[str, Any] | None:
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if os.fstat(descriptor).st_uid != os.getuid():
            return None  # not written by a supervisor of ours
        data = os.read(descriptor, MAX_POINTER_BYTES + 1)
    finally:
        os.close(descriptor)
    if len(data) > MAX_POINTER_BYTES:
        return None
    try:
        pointer = json.loads(data)
    except ValueError:
        return None
    if not isinstance(pointer, dict) or pointer.get("v") != POINTER_VERSION:
        return None
    return pointer


def encode(obj: Mapping[str, Any]) -> bytes:
    """One wire line for `obj`."""
    try:
        line = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # a lone surrogate (from argv, say): sent as a JSON escape
        line = json.dumps(obj, separators=(",", ":")).encode("ascii") + b"\n"
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"wire line of {len(line)} bytes exceeds {MAX_LINE_BYTES}")
    return line


def send_lines(
    path: str, objects: Iterable[Mapping[str, Any]], served_by: int | None = None
) -> None:
    """Connect to `path`, write one line per object, close. With `served_by` (a pid, from a
    pointer file), nothing is written unless that very process serves the socket. When the
    connect or the write fails (an `OSError`, raised on), the lines are first recorded as
    undelivered (`record_undelivered`); not when the socket is another process's (nothing
    of this session's is kept beside it)."""
    lines = [encode(obj) for obj in objects]
    try:
        connection = _connect(path)
    except OSError:
        record_undelivered(path, len(lines))
        raise
    try:
        if served_by is not None:
            _check_server(connection, path, served_by)
        connection.settimeout(SEND_TIMEOUT)
        try:
            connection.sendall(b"".join(lines))
            connection.shutdown(_socket.SHUT_WR)
        except OSError:
            record_undelivered(path, len(lines))
            raise
    finally:
        connection.close()


def record_undelivered(path: str, lines: int) -> bool:
    """Append one byte per undelivered line to `UNDELIVERED_FILE` beside the socket at
    `path`, for its supervisor to count; False when that was not possible (no such
    directory: no supervisor left to count it).

    One append of a few bytes: cheap, atomic among concurrent senders (O_APPEND), and it
    survives the sender. Never through a link planted at the file's name (O_NOFOLLOW)."""
    if lines <= 0:
        return True
    name = os.path.join(os.path.dirname(path) or ".", UNDELIVERED_FILE)
    try:
        descriptor = os.open(name, _UNDELIVERED_FLAGS, 0o600)
    except OSError:
        return False
    try:
        return os.write(descriptor, b"." * lines) == lines
    except OSError:
        return False
    finally:
        os.close(descriptor)


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
                refused = SupervisorUnavailable(f"supervisor socket {path}: {reason}")
                refused.errno = exc.errno  # kept for `harness doctor`'s sandbox hint
                raise refused from None
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def _check_server(connection: _socket.socket, path: str, supervisor: int) -> None:
    """`SupervisorUnavailable` unless the process serving the connected socket is
    `supervisor`: a pointer file is the agent's user's to rewrite, and could name a socket of
    another process of that user, which would receive this session's events. The kernel
    says who listens (the peer's credentials), and a pid is one process while it lives: the
    supervisor, an ancestor of ours, is alive while we run."""
    peer = _peer_pid(connection)
    if peer != supervisor:
        served = "an unknown process" if peer is None else f"pid {peer}"
        raise SupervisorUnavailable(
            f"supervisor socket {path}: served by {served}, not by supervisor pid "
            f"{supervisor} whose pointer file names it; not used"
        )


def _peer_pid(connection: _socket.socket) -> int | None:
    """The pid of the process at the other end of a connected Unix socket, None where this
    system cannot tell (then no pointer file is trusted)."""
    if hasattr(_socket, "SO_PEERCRED"):  # Linux: struct ucred {pid, uid, gid}
        raw = connection.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    elif hasattr(_socket, "LOCAL_PEERPID"):  # macOS: a pid_t at level SOL_LOCAL (0)
        raw = connection.getsockopt(0, _socket.LOCAL_PEERPID, 4)
    else:
        return None
    return int.from_bytes(raw[:4], sys.byteorder, signed=True)


def send_events(
    events: Iterable[NormalizedEvent], environ: Mapping[str, str] | None = None
) -> None:
    """Deliver normalized events to the running supervisor."""
    path, served_by = supervisor_address(environ)
    send_lines(path, [event.to_wire() for event in events], served_by)


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
    path, served_by = supervisor_address(environ)
    send_lines(path, [status_message(status, message)], served_by)


# -- asking for a gate's decision ---------------------------------------------------------------

# How long `ask_decision` waits for the supervisor's answer by default: under the 10 s hook
# timeout `harness install` writes (install.HOOK_TIMEOUT_SECONDS), so that past it `hook`, not
# the harness, says what happens (`--on-unreachable`): a harness that ends a hook goes on, even
# past a fail-closed gate. `hook --decision-wait` sets another, for a longer harness timeout.
DECISION_WAIT = 8.0  # seconds
MAX_REPLY_BYTES = 64 * 1024
REPLY_KEY = "reply"  # set on the line whose event's gates the client waits for


def ask_decision(
    events: Sequence[NormalizedEvent],
    environ: Mapping[str, str] | None = None,
    timeout: float = DECISION_WAIT,
) -> dict[str, Any] | None:
    """Deliver `events` and wait for the supervisor's decision on the first one's gates: a
    JSON object `{"decision": "allow"|"deny"|"ask", "reason": ..., "gate": ...}`.

    An answer is taken only from a process this one runs under (the supervisor is an
    ancestor of every hook command of its agent), whose pid the kernel gives. A socket served
    by any other process (one the agent serves itself, named by a variable it set) still gets
    the events, as before, but is not asked: None, no decision. Raises
    `DecisionLate` (a `SupervisorUnavailable`, an `OSError`) when no answer came within
    `timeout`, `SupervisorUnavailable` when the supervisor cannot be reached."""
    path, served_by = supervisor_address(environ)
    wire = [event.to_wire() for event in events]
    try:
        connection = _connect(path)
    except OSError:
        record_undelivered(path, len(wire))
        raise
    try:
        if served_by is not None:
            _check_server(connection, path, served_by)
        peer = _peer_pid(connection)
        trusted = peer is not None and (peer == os.getpid() or peer in set(_ancestors()))
        if trusted:
            wire[0] = {**wire[0], REPLY_KEY: True}
        connection.settimeout(SEND_TIMEOUT)
        try:
            connection.sendall(b"".join(encode(obj) for obj in wire))
            connection.shutdown(_socket.SHUT_WR)
        except OSError:
            record_undelivered(path, len(wire))
            raise
        return _read_reply(connection, path, timeout) if trusted else None
    finally:
        connection.close()


def _read_reply(connection: _socket.socket, path: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data and len(data) <= MAX_REPLY_BYTES:
        left = deadline - time.monotonic()
        if left <= 0:
            raise DecisionLate(f"supervisor socket {path}: no decision within {timeout:g}s")
        connection.settimeout(left)
        try:
            chunk = connection.recv(65536)
        except TimeoutError:
            continue  # the deadline passed: said above
        if not chunk:
            break
        data += chunk
    line = data.split(b"\n", 1)[0]
    try:
        answer = json.loads(line) if line.strip() and len(line) <= MAX_REPLY_BYTES else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise SupervisorUnavailable(f"supervisor socket {path}: no decision was answered")
    return answer
