"""One attempt of a `script` action: argv (never a shell), stdin bytes, bounded output capture,
and process-group timeouts.

The script leads a new session, so its own process group, so that everything it starts can
be ended with it:
- on timeout the group gets SIGTERM, then SIGKILL after `kill_grace` seconds;
- after the script exits, whatever it left running in its group is killed (SIGKILL): a hook's
  work ends with its script, and orphans would otherwise hold its output pipes open.
  A process that left the group on purpose (`setsid`) is out of reach; we stop waiting for
  the pipes it holds after a short drain.
- where processes can be confined (root with a writable cgroup v2: `confinement`), each
  execution also runs in a cgroup of its own, joined before the script runs: a timeout kills
  the whole cgroup, so what left the group (a `setsid` grandchild) ends with the script. After
  a normal exit such a process is left to run, as without a cgroup, until the confining
  process (the supervisor) ends.

It is started by `subprocess.Popen`: no descriptor but its three pipes, SIGPIPE and SIGXFSZ
at their defaults, its program looked up on its own PATH, and as another user the drop to that
user's uid and gid with no supplementary group.

Output: the first `output_limit` bytes of stdout and of stderr are kept (and passed line by
line to `on_output` as they arrive); anything beyond is read and discarded, so a script that
writes without end neither blocks on a full pipe nor grows our memory.

error_type values: `exit.<code>`, `signal.<NAME>` (the script died of a signal it was not sent
by us), `timeout`, `FileNotFoundError` / `PermissionError` / `OSError` (could not start),
`UnknownUser`, `ValueError` (empty argv, or a NUL byte in an argument or variable),
`UnsafeScript` (as root, a file that another user could replace: see `root_guard`). Messages
never include output or argv beyond argv[0].
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import pwd
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from .. import confinement
from ..render import RenderedCommand
from ..template.trust import is_loader_variable
from .base import AttemptKind, AttemptResult
from .root_guard import unsafe_as_root

__all__ = [
    "CONFINED_CWD",
    "ScriptOutcome",
    "UserIdentity",
    "confined_env",
    "run_script",
    "unsafe_as_root",
    "user_process_options",
]

log = logging.getLogger("otel_lifecycle_hooks.actions.script")

DEFAULT_OUTPUT_LIMIT = 64 * 1024
DEFAULT_KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL
OUTPUT_TAIL = 4 * 1024  # bytes of the end of each stream kept for the delivery history
_READ_SIZE = 64 * 1024
_POLL_INTERVAL = 0.05  # how often the process is checked while its pipes stay open
_DRAIN_AFTER_EXIT = 0.5  # seconds to wait for pipes held open by escaped processes

OutputCallback = Callable[[str, str], None]  # (stream name "stdout" | "stderr", line)


@dataclass(frozen=True)
class ScriptOutcome:
    """A script attempt's result plus what it wrote.

    `stdout` / `stderr` are the first `output_limit` bytes of each, decoded as UTF-8 (invalid
    bytes replaced); `truncated` says that either stream wrote more than that.
    `pid` is the script's process id (and its process group id), None if it never started.
    """

    result: AttemptResult
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    pid: int | None = None
    # The last `OUTPUT_TAIL` bytes each stream wrote (for the delivery history).
    stdout_tail: str = ""
    stderr_tail: str = ""


def run_script(
    command: RenderedCommand,
    timeout: float,
    *,
    base_env: Mapping[str, str] | None = None,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    on_output: OutputCallback | None = None,
    user: str | None = None,
    kill_grace: float = DEFAULT_KILL_GRACE,
    root_checked: bool = False,
    confined: bool = False,
) -> ScriptOutcome:
    """Run `command` once and classify how it ended. Never raises.

    The environment is `base_env` (default: this process's) overlaid with `command.env`.
    `user`: run as that account (needs root; HOME, USER and LOGNAME follow it). Without root,
    only the current user can be named. `root_checked`: the caller has just refused this
    command if `unsafe_as_root` objects to it (the engine does, to record a refusal), so it
    is not checked twice. `confined` (a hook that runs as root on purpose, `run_as: root`):
    it runs in `CONFINED_CWD` with no loader variable in its environment (`confined_env`).
    """
    started = time.monotonic()

    def failed(kind: AttemptKind, error_type: str, message: str) -> ScriptOutcome:
        return ScriptOutcome(
            AttemptResult(kind, time.monotonic() - started, error_type=error_type, message=message)
        )

    if not command.argv:
        return failed("permanent", "ValueError", "the script's command is empty")
    env = process_environ() if base_env is None else dict(base_env)
    try:
        identity = _identity(user, env)
    except _IdentityError as exc:
        return failed("permanent", exc.error_type, str(exc))
    env.update(command.env)
    cwd = None
    if confined:
        env, cwd = confined_env(env), CONFINED_CWD
    program = command.argv[0]
    refusal = None if root_checked else unsafe_as_root(command.argv, env, user, cwd)
    if refusal is not None:
        return failed("permanent", "UnsafeScript", refusal)
    group = _execution_group(identity)
    process_started: subprocess.Popen[bytes] | None = None
    try:
        process, pipes = _start(command.argv, env, identity, group, cwd)
        process_started = process
    except FileNotFoundError:
        return failed("permanent", "FileNotFoundError", f"{program!r}: no such file")
    except PermissionError:
        return failed("permanent", "PermissionError", f"{program!r}: permission denied")
    except OSError as exc:
        return failed("permanent", type(exc).__name__, f"{program!r}: {exc.strerror or exc}")
    except ValueError:
        # The message never quotes the culprit: a variable's value may be a secret.
        message = f"{program!r}: an argument or variable holds a NUL byte, or a name holds '='"
        return failed("permanent", "ValueError", message)
    finally:
        if group is not None and process_started is None:
            group.remove()

    pump = _PipePump(process, pipes, command.stdin, output_limit, on_output)
    timed_out = escalated = False
    unexpected: Exception | None = None
    try:
        timed_out = not pump.run(until=started + timeout, stop_on_exit=True)
        if timed_out:
            _signal_group(process.pid, signal.SIGTERM)
            if group is not None:
                group.signal(signal.SIGTERM)  # those that left the process group too
            escalated = not pump.run(until=time.monotonic() + kill_grace, stop_on_exit=True)
            if escalated:
                _signal_group(process.pid, signal.SIGKILL)
            process.wait()
            if group is not None:
                group.kill()  # whatever of the timed-out script is left, wherever it went
        _signal_group(process.pid, signal.SIGKILL)  # leftovers of the group, if any
        pump.run(until=time.monotonic() + _DRAIN_AFTER_EXIT, stop_on_exit=False)
    except Exception as exc:  # noqa: BLE001 - an attempt never raises into the engine
        unexpected = exc
    finally:
        pump.close()
        if process.poll() is None:  # only after an unexpected error above
            _signal_group(process.pid, signal.SIGKILL)
            if group is not None:
                group.kill()
            process.wait()
        if group is not None:
            # Empty after a timeout; after a normal exit, what the script left on purpose
            # keeps its group until the supervisor ends (then its removal waits for none).
            group.remove(wait=0.0 if not timed_out and unexpected is None else 1.0, kill=False)

    duration = time.monotonic() - started
    if unexpected is not None:
        log.debug("script attempt failed unexpectedly", exc_info=unexpected)
        result = AttemptResult(
            "permanent",
            duration,
            error_type=type(unexpected).__name__,
            message=f"{program!r}: unexpected {type(unexpected).__name__} while running",
        )
    elif timed_out:
        result = _timeout_result(duration, timeout, escalated=escalated)
    else:
        result = _exit_result(process.wait(), duration)  # reaped already: returns at once
    return ScriptOutcome(
        result, pump.text("stdout"), pump.text("stderr"), pump.truncated, process.pid,
        pump.tail("stdout"), pump.tail("stderr"),
    )  # fmt: skip


# A root hook's working directory: root's, and never the supervisor's own, which may be the
# agent's workspace (where `python3 -c`, `node`, `.` and relative paths would find its files).
CONFINED_CWD = "/"


def confined_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without the variables that make a shell, the loader or an interpreter load code
    from where their value says (template/trust.py `is_loader_variable`: LD_*, PYTHON*,
    BASH_ENV, ENV, NODE_OPTIONS, PERL5LIB, GCONV_PATH, ...). PATH stays: it is the
    operator's, and the program it finds is checked by the root guard."""
    return {
        name: value for name, value in env.items() if name == "PATH" or not is_loader_variable(name)
    }


def _timeout_result(duration: float, timeout: float, *, escalated: bool) -> AttemptResult:
    how = "SIGKILL after ignoring SIGTERM" if escalated else "SIGTERM"
    return AttemptResult(
        "timeout",
        duration,
        error_type="timeout",
        message=f"still running after {timeout:g}s; process group ended with {how}",
    )


def _exit_result(returncode: int, duration: float) -> AttemptResult:
    if returncode == 0:
        return AttemptResult("ok", duration, exit_code=0)
    if returncode < 0:
        name = _signal_name(-returncode)
        return AttemptResult(
            "permanent", duration, error_type=f"signal.{name}", message=f"killed by {name}"
        )
    # A script's exit code is its only word on what went wrong, and a script usually fails
    # for the reasons a request does (a service down, a lock held): `on_error: retry` retries
    # it. What can never succeed (a missing or non-executable program) is permanent.
    return AttemptResult(
        "transient",
        duration,
        exit_code=returncode,
        error_type=f"exit.{returncode}",
        message=f"exited with code {returncode}",
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(pgid, signum)


class UserIdentity(TypedDict, total=False):
    """`subprocess.Popen` arguments that switch user (empty: run as this process): the uid,
    the primary gid, and no supplementary group."""

    user: int
    group: int
    extra_groups: list[int]


class _IdentityError(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def user_process_options(user: str | None, env: dict[str, str]) -> UserIdentity:
    """`subprocess.Popen` arguments that run a process as `user` (None: as this process).

    Updates HOME, USER and LOGNAME in `env` to the user's. Raises `PermissionError` when
    another user is named without root, `LookupError` when the user does not exist.
    """
    try:
        return _identity(user, env)
    except _IdentityError as exc:
        if exc.error_type == "UnknownUser":
            raise LookupError(str(exc)) from None
        raise PermissionError(str(exc)) from None


def _identity(user: str | None, env: dict[str, str]) -> UserIdentity:
    """Popen arguments to run as `user`; updates HOME / USER / LOGNAME in `env`."""
    if user is None:
        return UserIdentity()
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise _IdentityError("UnknownUser", f"user {user!r} does not exist") from None
    if os.geteuid() != 0:
        if entry.pw_uid == os.geteuid():
            return UserIdentity()
        raise _IdentityError(
            "PermissionError", f"cannot run as user {user!r}: this process is not root"
        )
    env.update(HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name)
    return UserIdentity(user=entry.pw_uid, group=entry.pw_gid, extra_groups=[])


# -- starting the process ----------------------------------------------------------------------


def process_environ() -> dict[str, str]:
    """A fresh copy of `os.environ` as a plain dict (the base of a script's environment)."""
    return dict(os.environ)


def _execution_group(identity: UserIdentity) -> confinement.Cgroup | None:
    """A cgroup for one execution, where processes can be confined; None elsewhere, and for a
    script run as another user where no setpriv can drop to that user after it joined."""
    home = confinement.home()
    if home is None or (identity and confinement.find_setpriv() is None):
        return None
    return home.leaf()


def _confined_argv(
    argv: Sequence[str],
    env: Mapping[str, str],
    identity: UserIdentity,
    group: confinement.Cgroup,
) -> tuple[list[str], dict[str, str]]:
    """`argv` started through the root stage that joins `group`, then (for `identity`) setpriv
    to the script's user, and the environment to start it with. The program is found here, on
    the script's PATH, so that a missing one fails as it would unconfined, before anything
    starts. For `identity`, the root stages get `env` without its loader variables (an agent
    hook's `LD_PRELOAD` would run the agent's library as root); the script gets them back
    after the drop (`confinement.after_drop`)."""
    program = _executable(argv[0], env)
    if not os.path.exists(program):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if not os.access(program, os.X_OK) or os.path.isdir(program):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    rest = [program, *argv[1:]]
    if identity and not _user_may_execute(program, identity["user"], identity["group"]):
        # What exec would say as that user; setpriv would only exit with a code of its own.
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    root_env = dict(env)
    if identity:
        setpriv = confinement.find_setpriv()
        assert setpriv is not None  # _execution_group made no group without it
        loaders = {k: v for k, v in env.items() if k != "PATH" and is_loader_variable(k)}
        rest, carrier = confinement.after_drop(rest, loaders)
        root_env = {k: v for k, v in env.items() if k not in loaders} | carrier
        user = ["--reuid", str(identity["user"]), "--regid", str(identity["group"])]
        rest = [setpriv, *user, "--clear-groups", "--", *rest]
    return group.join_argv(rest), root_env


def _user_may_execute(path: str, uid: int, gid: int) -> bool:
    """Whether the file's mode lets `uid` (primary group `gid`, no other groups) execute it.
    A file with an access ACL is left for exec itself to judge."""
    try:
        info = os.stat(path)
        if hasattr(os, "getxattr"):
            try:
                os.getxattr(path, "system.posix_acl_access")
                return True
            except OSError:
                pass  # no ACL (ENODATA), or none supported: the mode decides
    except OSError:
        return True  # gone or unreadable: exec reports it
    if info.st_uid == uid:
        return bool(info.st_mode & 0o100)
    if info.st_gid == gid:
        return bool(info.st_mode & 0o010)
    return bool(info.st_mode & 0o001)


def _start(
    argv: Sequence[str],
    env: dict[str, str],
    identity: UserIdentity,
    group: confinement.Cgroup | None = None,
    cwd: str | None = None,
) -> tuple[subprocess.Popen[bytes], tuple[int, int, int]]:
    """Start `argv` as the leader of a new session (so of its own process group), its stdin,
    stdout and stderr on new pipes: the process, and our ends of those three pipes. With
    `group`, as root through the stage that joins it (`identity` then applied by setpriv).
    Raises OSError when it cannot start, ValueError for a NUL byte in an argument or
    variable."""
    if group is not None:
        (argv, env), identity = _confined_argv(argv, env, identity, group), UserIdentity()
    pipes: list[int] = []
    try:
        for _ in range(3):
            pipes.extend(os.pipe())  # close-on-exec, as every descriptor Python opens
        stdin_read, stdin_write, stdout_read, stdout_write, stderr_read, stderr_write = pipes
        child_ends = (stdin_read, stdout_write, stderr_write)
        # Popen's defaults do the rest: close_fds closes every other descriptor in the child,
        # inherited ones included; restore_signals resets SIGPIPE and SIGXFSZ, which Python
        # ignores (a shell pipeline's `head` must end its writer with SIGPIPE); the program is
        # looked up on the PATH of `env`.
        process = subprocess.Popen(
            list(argv),
            stdin=stdin_read,
            stdout=stdout_write,
            stderr=stderr_write,
            env=env,
            cwd=cwd,
            start_new_session=True,
            **identity,
        )
    except BaseException:
        for fd in pipes:
            os.close(fd)
        raise
    for fd in child_ends:
        os.close(fd)
    return process, (stdin_write, stdout_read, stderr_read)


def _executable(program: str, env: Mapping[str, str]) -> str:
    """`program` resolved on the PATH of `env` (the script's, as subprocess resolves it; a
    name holding "/" is a path). Raises FileNotFoundError or PermissionError as exec would.

    Only a confined start needs it: there the program is an argument of the root stage, and
    a missing one must fail here, before anything runs, as it fails in Popen unconfined."""
    if "/" in program:
        return program
    denied = False
    for directory in os.get_exec_path(env):
        candidate = os.path.join(directory, program)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            denied = True  # exec goes on looking, and reports EACCES if nothing else runs
    if denied:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


class _Stream:
    """One output pipe: a bounded capture plus the partial line not yet passed on."""

    def __init__(self, name: str, limit: int, on_output: OutputCallback | None) -> None:
        self.name = name
        self.captured = bytearray()
        self.truncated = False
        self.tail = b""  # the last OUTPUT_TAIL bytes written, also past the capture's limit
        self._limit = limit
        self._pending = b""
        self._on_output = on_output

    def feed(self, chunk: bytes) -> None:
        self.tail = (self.tail + chunk)[-OUTPUT_TAIL:]
        room = self._limit - len(self.captured)
        if len(chunk) > room:
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        if not chunk:
            return
        self.captured += chunk
        if self._on_output is None:
            return
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        for line in lines:
            self._emit(line)
        if self.truncated:
            self.finish()

    def finish(self) -> None:
        if self._pending:
            self._emit(self._pending)
            self._pending = b""

    def _emit(self, line: bytes) -> None:
        assert self._on_output is not None
        try:
            self._on_output(self.name, line.rstrip(b"\r").decode("utf-8", "replace"))
        except Exception:  # a failing log sink must not break the script run
            log.debug("the output callback failed", exc_info=True)


class _PipePump:
    """Moves bytes between us and the script's three pipes, on one thread, with poll(2).
    Owns the pipes' descriptors (our ends: stdin, stdout, stderr) and closes them."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        pipes: tuple[int, int, int],
        stdin: bytes,
        limit: int,
        on_output: OutputCallback | None,
    ) -> None:
        self._process = process
        # poll(2) itself, not a selectors.Selector: for four descriptors it needs no
        # descriptor of its own, and none of the selector's bookkeeping per call.
        self._poller = select.poll()
        self._watched: dict[int, str] = {}  # descriptor -> "stdin" | "stdout" | "stderr" | "exit"
        self._streams = {name: _Stream(name, limit, on_output) for name in ("stdout", "stderr")}
        self._stdin = memoryview(stdin)
        stdin_fd, stdout_fd, stderr_fd = pipes
        self._watch(stdout_fd, "stdout", select.POLLIN)
        self._watch(stderr_fd, "stderr", select.POLLIN)
        if self._stdin:
            os.set_blocking(stdin_fd, False)
            self._watch(stdin_fd, "stdin", select.POLLOUT)
            # An empty pipe takes a typical event whole: written now, it costs no wake-up.
            self._write_stdin(stdin_fd)
        else:
            os.close(stdin_fd)
        # A pidfd becomes readable when the process exits: poll then wakes at once, where
        # Popen.wait(timeout) would poll with growing sleeps.
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(process.pid)
            self._watch(self._pidfd, "exit", select.POLLIN)
        except (AttributeError, OSError):
            self._pidfd = None

    @property
    def truncated(self) -> bool:
        return any(stream.truncated for stream in self._streams.values())

    def text(self, name: str) -> str:
        return self._streams[name].captured.decode("utf-8", "replace")

    def tail(self, name: str) -> str:
        return self._streams[name].tail.decode("utf-8", "replace")

    def run(self, until: float, stop_on_exit: bool) -> bool:
        """Pump until the pipes are closed and the process has exited, or until `until`.

        With `stop_on_exit`, return as soon as the process has exited (its pipes may still
        be held open by children). Returns whether the process has exited.
        """
        while True:
            exited = self._process.poll() is not None
            if exited:
                self._forget_pidfd()
            if exited and (stop_on_exit or not self._watched):
                return True
            remaining = until - time.monotonic()
            if remaining <= 0:
                # Late, as a loaded machine may be: what is already in the pipes is still
                # taken (one pass; an exited script's output fits in a pipe's buffer).
                self._serve_ready(0)
                return exited
            if not self._watched:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(remaining)
                continue
            self._serve_ready(math.ceil(min(remaining, _POLL_INTERVAL) * 1000))

    def _serve_ready(self, wait_ms: int) -> None:
        """Serve each pipe that is ready within `wait_ms`: write stdin, read the output."""
        for fd, _ in self._poller.poll(wait_ms):
            name = self._watched.get(fd)
            if name == "stdin":
                self._write_stdin(fd)
            elif name in self._streams:
                self._read(name, fd)
            # "exit": the poll() in `run` reaps it

    def _watch(self, fd: int, name: str, events: int) -> None:
        self._poller.register(fd, events)
        self._watched[fd] = name

    def _unwatch(self, fd: int) -> None:
        self._poller.unregister(fd)
        del self._watched[fd]
        os.close(fd)

    def _read(self, name: str, fd: int) -> None:
        chunk = os.read(fd, _READ_SIZE)
        if chunk:
            self._streams[name].feed(chunk)
            return
        self._streams[name].finish()
        self._unwatch(fd)

    def _write_stdin(self, fd: int) -> None:
        try:
            written = os.write(fd, self._stdin[:_READ_SIZE])
        except BlockingIOError:
            return
        except (BrokenPipeError, ConnectionResetError):
            written = len(self._stdin)  # the script stopped reading: that is its right
        self._stdin = self._stdin[written:]
        if not self._stdin:
            self._unwatch(fd)

    def _forget_pidfd(self) -> None:
        if self._pidfd is not None:
            self._unwatch(self._pidfd)
            self._pidfd = None

    def close(self) -> None:
        self._forget_pidfd()
        for fd, name in list(self._watched.items()):
            if name in self._streams:
                self._streams[name].finish()
            self._unwatch(fd)
