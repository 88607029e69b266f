"""One attempt of a `script` action: argv (never a shell), stdin bytes, bounded output capture,
and process-group timeouts.

The script leads its own process group (`start_new_session=True`), so that everything it
starts can be ended with it:
- on timeout the group gets SIGTERM, then SIGKILL after `kill_grace` seconds;
- after the script exits, whatever it left running in its group is killed (SIGKILL): a hook's
  work ends with its script, and orphans would otherwise hold its output pipes open.
  A process that left the group on purpose (`setsid`) is out of reach; we stop waiting for
  the pipes it holds after a short drain.

Output: the first `output_limit` bytes of stdout and of stderr are kept (and passed line by
line to `on_output` as they arrive); anything beyond is read and discarded, so a script that
writes without end neither blocks on a full pipe nor grows our memory.

error_type values: `exit.<code>`, `signal.<NAME>` (the script died of a signal it was not sent
by us), `timeout`, `FileNotFoundError` / `PermissionError` / `OSError` (could not start),
`UnknownUser`, `ValueError` (empty argv), `UnsafeScript` (see `unsafe_as_root`). Messages never include output or argv beyond argv[0].
"""

from __future__ import annotations

import logging
import os
import pwd
import selectors
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from ..render import RenderedCommand
from .base import AttemptKind, AttemptResult

log = logging.getLogger("otel_lifecycle_hooks.actions.script")

DEFAULT_OUTPUT_LIMIT = 64 * 1024
DEFAULT_KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL
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


def run_script(
    command: RenderedCommand,
    timeout: float,
    *,
    base_env: Mapping[str, str] | None = None,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    on_output: OutputCallback | None = None,
    user: str | None = None,
    kill_grace: float = DEFAULT_KILL_GRACE,
) -> ScriptOutcome:
    """Run `command` once and classify how it ended. Never raises.

    The environment is `base_env` (default: this process's) overlaid with `command.env`.
    `user`: run as that account (needs root; HOME, USER and LOGNAME follow it). Without root,
    only the current user can be named.
    """
    started = time.monotonic()

    def failed(kind: AttemptKind, error_type: str, message: str) -> ScriptOutcome:
        return ScriptOutcome(
            AttemptResult(kind, time.monotonic() - started, error_type=error_type, message=message)
        )

    if not command.argv:
        return failed("permanent", "ValueError", "the script's command is empty")
    env = dict(os.environ if base_env is None else base_env)
    try:
        identity = _identity(user, env)
    except _IdentityError as exc:
        return failed("permanent", exc.error_type, str(exc))
    env.update(command.env)
    program = command.argv[0]
    refusal = unsafe_as_root(program, env, user)
    if refusal is not None:
        return failed("permanent", "UnsafeScript", refusal)
    try:
        process = subprocess.Popen(
            list(command.argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            shell=False,
            start_new_session=True,
            close_fds=True,
            **identity,
        )
    except FileNotFoundError:
        return failed("permanent", "FileNotFoundError", f"{program!r}: no such file")
    except PermissionError:
        return failed("permanent", "PermissionError", f"{program!r}: permission denied")
    except OSError as exc:
        return failed("permanent", type(exc).__name__, f"{program!r}: {exc.strerror or exc}")

    pump = _PipePump(process, command.stdin, output_limit, on_output)
    timed_out = escalated = False
    unexpected: Exception | None = None
    try:
        timed_out = not pump.run(until=started + timeout, stop_on_exit=True)
        if timed_out:
            _signal_group(process.pid, signal.SIGTERM)
            escalated = not pump.run(until=time.monotonic() + kill_grace, stop_on_exit=True)
            if escalated:
                _signal_group(process.pid, signal.SIGKILL)
            process.wait()
        _signal_group(process.pid, signal.SIGKILL)  # leftovers of the group, if any
        pump.run(until=time.monotonic() + _DRAIN_AFTER_EXIT, stop_on_exit=False)
    except Exception as exc:  # noqa: BLE001 - an attempt never raises into the engine
        unexpected = exc
    finally:
        pump.close()
        if process.poll() is None:  # only after an unexpected error above
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()

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
        result = _exit_result(process.returncode, duration)
    return ScriptOutcome(
        result, pump.text("stdout"), pump.text("stderr"), pump.truncated, process.pid
    )


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
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


class _IdentityError(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def unsafe_as_root(program: str, env: Mapping[str, str], user: str | None) -> str | None:
    """Why running `program` as root would be unsafe, or None when it is not (or would not
    run as root: this process is not root, or `user` names another account).

    Seed 000: script hooks run as the agent's user, not root. When they would run as root, a
    program that someone other than root can rewrite is refused: one not owned by root and
    writable by its group or others, or one writable by others whoever owns it. `program` is
    resolved as exec does: a path when it holds a "/", else looked up on env's PATH.
    """
    if os.geteuid() != 0 or _names_another_user(user):
        return None
    path = program if "/" in program else shutil.which(program, path=env.get("PATH", os.defpath))
    try:
        info = os.stat(path) if path else None
    except OSError:
        info = None  # missing or unreadable: starting it reports that
    if info is None:
        return None
    writable_by_others = bool(info.st_mode & stat.S_IWOTH)
    writable_by_group = bool(info.st_mode & stat.S_IWGRP) and info.st_uid != 0
    if not (writable_by_others or writable_by_group):
        return None
    who = "others" if writable_by_others else "its group"
    return (
        f"{program!r} (owned by uid {info.st_uid}) is writable by {who}: refusing to run it as "
        "root; remove that write permission (chmod go-w), or run hooks as the agent's user"
    )


def _names_another_user(user: str | None) -> bool:
    if user is None:
        return False
    try:
        return pwd.getpwnam(user).pw_uid != 0
    except KeyError:
        return True  # an unknown user is refused on its own, before anything runs


def user_process_options(user: str | None, env: dict[str, str]) -> dict[str, Any]:
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


def _identity(user: str | None, env: dict[str, str]) -> dict[str, Any]:
    """Popen arguments to run as `user`; updates HOME / USER / LOGNAME in `env`."""
    if user is None:
        return {}
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise _IdentityError("UnknownUser", f"user {user!r} does not exist") from None
    if os.geteuid() != 0:
        if entry.pw_uid == os.geteuid():
            return {}
        raise _IdentityError(
            "PermissionError", f"cannot run as user {user!r}: this process is not root"
        )
    env.update(HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


class _Stream:
    """One output pipe: a bounded capture plus the partial line not yet passed on."""

    def __init__(self, name: str, limit: int, on_output: OutputCallback | None) -> None:
        self.name = name
        self.captured = bytearray()
        self.truncated = False
        self._limit = limit
        self._pending = b""
        self._on_output = on_output

    def feed(self, chunk: bytes) -> None:
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
    """Moves bytes between us and the script's three pipes, on one thread, with a selector."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        stdin: bytes,
        limit: int,
        on_output: OutputCallback | None,
    ) -> None:
        self._process = process
        # poll(2) rather than epoll: for four descriptors it needs no descriptor of its own
        # nor a system call per registration.
        self._selector = selectors.PollSelector()
        self._streams: dict[str, _Stream] = {}
        self._stdin = memoryview(stdin)
        assert process.stdin and process.stdout and process.stderr
        for name, pipe in (("stdout", process.stdout), ("stderr", process.stderr)):
            self._streams[name] = _Stream(name, limit, on_output)
            self._selector.register(pipe, selectors.EVENT_READ, name)
        if self._stdin:
            os.set_blocking(process.stdin.fileno(), False)
            self._selector.register(process.stdin, selectors.EVENT_WRITE, "stdin")
            # An empty pipe takes a typical event whole: written now, it costs no wake-up.
            self._write_stdin(process.stdin)
        else:
            process.stdin.close()
        # A pidfd becomes readable when the process exits: the selector then wakes at once,
        # where Popen.wait(timeout) would poll with growing sleeps.
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(process.pid)
            self._selector.register(self._pidfd, selectors.EVENT_READ, "exit")
        except (AttributeError, OSError):
            self._pidfd = None

    @property
    def truncated(self) -> bool:
        return any(stream.truncated for stream in self._streams.values())

    def text(self, name: str) -> str:
        return self._streams[name].captured.decode("utf-8", "replace")

    def run(self, until: float, stop_on_exit: bool) -> bool:
        """Pump until the pipes are closed and the process has exited, or until `until`.

        With `stop_on_exit`, return as soon as the process has exited (its pipes may still
        be held open by children). Returns whether the process has exited.
        """
        while True:
            exited = self._process.poll() is not None
            if exited:
                self._forget_pidfd()
            if exited and (stop_on_exit or not self._selector.get_map()):
                return True
            remaining = until - time.monotonic()
            if remaining <= 0:
                return exited
            if not self._selector.get_map():
                try:
                    self._process.wait(remaining)
                except subprocess.TimeoutExpired:
                    pass
                continue
            for key, _ in self._selector.select(min(remaining, _POLL_INTERVAL)):
                if key.data == "exit":
                    continue  # the poll() above reaps it
                if key.data == "stdin":
                    self._write_stdin(key.fileobj)  # type: ignore[arg-type]
                else:
                    self._read(key.data, key.fileobj)  # type: ignore[arg-type]

    def _read(self, name: str, pipe: IO[bytes]) -> None:
        chunk = os.read(pipe.fileno(), _READ_SIZE)
        if chunk:
            self._streams[name].feed(chunk)
            return
        self._streams[name].finish()
        self._selector.unregister(pipe)
        pipe.close()

    def _write_stdin(self, pipe: IO[bytes]) -> None:
        try:
            written = os.write(pipe.fileno(), self._stdin[:_READ_SIZE])
        except BlockingIOError:
            return
        except (BrokenPipeError, ConnectionResetError):
            written = len(self._stdin)  # the script stopped reading: that is its right
        self._stdin = self._stdin[written:]
        if not self._stdin:
            self._selector.unregister(pipe)
            pipe.close()

    def _forget_pidfd(self) -> None:
        if self._pidfd is not None:
            self._selector.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def close(self) -> None:
        self._forget_pidfd()
        for key in list(self._selector.get_map().values()):
            if key.data != "stdin":
                self._streams[key.data].finish()
            self._selector.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
