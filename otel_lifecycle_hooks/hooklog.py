"""The human-readable hook log (`$HOME/agent.log` by default): one line per execution, and the
output of scripts, for someone tailing the file (the first entry is one line, folded here):

    2026-11-30T10:00:00.123Z hook=register-agent event=post-start outcome=success attempts=1
        duration=12ms status=201
    2026-11-30T10:00:01.456Z [cleanup-credentials stdout] revoked 2 tokens

While `run` (or the in-process `hook`) runs, the package's logged warnings and errors are lines
of it too (`diagnostics_to`), as `warning: ...` and `error: ...`.

The file is rotated at a size bound, so that a flood cannot fill the disk: before a write would
take it past `LIFECYCLE_HOOKS_LOG_MAX_BYTES` (default 20 MiB), `agent.log` becomes `agent.log.1`,
`.1` becomes `.2`, and so on; `LIFECYCLE_HOOKS_LOG_KEEP` rotated files are kept (default 3, so
at most 80 MiB). The log may sit in a directory the agent can write (its `$HOME`) while the
supervisor writing it is root: every name is used relative to a descriptor of the directory,
and in a directory another user may write the file is opened with O_NOFOLLOW and written only
when it is a regular file with one link, owned by this process's user; a rename or unlink never
follows a link, so a link planted at `agent.log.2` is replaced, not written through.

Callers pass redacted text; the optional `redact` callable is a last line of defence applied
to every line. Control characters (C0, C1, bidirectional controls: `controls.py`) are escaped,
so no value can forge, split or reorder a line, nor send escape sequences to a terminal.
Writing never raises: a failure is reported once through logging (logger
`otel_lifecycle_hooks.hooklog`) and later lines are attempted again.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from .controls import escape_controls
from .private_files import open_directory_path

log = logging.getLogger("otel_lifecycle_hooks.hooklog")

LOG_ENV = "OTEL_LIFECYCLE_HOOKS_LOG"
MAX_BYTES_ENV = "LIFECYCLE_HOOKS_LOG_MAX_BYTES"
KEEP_ENV = "LIFECYCLE_HOOKS_LOG_KEEP"
DEFAULT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_KEEP = 3
MIN_MAX_BYTES = 4096  # below this a file could not hold a few lines: a setting's mistake
_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


# A value holding any of these is written JSON-quoted.
_NEEDS_QUOTES = re.compile(r"[\s\"'=\\]")


def default_hook_log_path(environ: Mapping[str, str]) -> Path:
    """`$LIFECYCLE_HOOKS_LOG` (or the older `$OTEL_LIFECYCLE_HOOKS_LOG`), else `$HOME/agent.log`."""
    explicit = environ.get(LOG_ENV.removeprefix("OTEL_")) or environ.get(LOG_ENV)
    if explicit:
        return Path(explicit)
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / "agent.log"


def rotation_limits(environ: Mapping[str, str]) -> tuple[int, int]:
    """(max bytes of the current file, rotated files kept) from `environ`; a value that is
    not a whole number at or above its minimum is reported and the default used."""
    return (
        _whole_number(environ, MAX_BYTES_ENV, DEFAULT_MAX_BYTES, MIN_MAX_BYTES),
        _whole_number(environ, KEEP_ENV, DEFAULT_KEEP, 0),
    )


def _whole_number(environ: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return default
    if text.isdigit() and int(text) >= minimum:
        return int(text)
    log.warning(
        "%s=%r: write a whole number of at least %d; using %d", name, text, minimum, default
    )
    return default


def rotated_log_path(path: str | os.PathLike[str], number: int) -> Path:
    """The `number`th rotated file of the hook log at `path` (1: the most recent)."""
    base = Path(path)
    return base.with_name(f"{base.name}.{number}")


def format_timestamp(at: float) -> str:
    """Unix seconds as UTC ISO 8601 with milliseconds: `2026-11-30T10:00:00.123Z`."""
    # Round to whole milliseconds first: 10:00:00.123 is stored as 10:00:00.12299999...
    seconds, millis = divmod(round(at * 1000), 1000)
    return f"{_second_text(seconds)}.{millis:03d}Z"


# The last second formatted: lines come many to a second under load. One tuple, read and
# replaced whole, so that threads never see one second's number with another's text.
_last_second: tuple[int, str] = (-1, "")


def _second_text(seconds: int) -> str:
    global _last_second
    cached_seconds, text = _last_second
    if cached_seconds != seconds:
        moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
        text = moment.strftime("%Y-%m-%dT%H:%M:%S")
        _last_second = (seconds, text)
    return text


def format_execution(
    hook: str,
    event: str,
    outcome: str,
    attempts: int,
    duration: float,
    *,
    status_code: int | None = None,
    exit_code: int | None = None,
    error_type: str | None = None,
    message: str = "",
) -> str:
    """The `key=value` body of an execution line (no timestamp). `duration` in seconds."""
    body = (
        f"hook={_value(hook)} event={_value(event)} outcome={_value(outcome)}"
        f" attempts={_value(attempts)} duration={round(duration * 1000)}ms"
    )
    if status_code is not None:
        body += f" status={_value(status_code)}"
    if exit_code is not None:
        body += f" exit_code={_value(exit_code)}"
    if error_type is not None:
        body += f" error={_value(error_type)}"
    if message:
        body += f" message={_value(message)}"
    return body


def _value(value: object) -> str:
    text = str(value)
    if text and _NEEDS_QUOTES.search(text) is None:
        return text
    return json.dumps(text, ensure_ascii=False)


class ReportedExecution(Protocol):
    """What the hook log reads of one execution (the engine's `Execution`)."""

    @property
    def hook(self) -> object: ...  # a HookSpec (its `name` is shown) or a name
    @property
    def event(self) -> object: ...  # a LifecycleEvent (its `name` is shown) or a name
    @property
    def outcome(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def duration(self) -> float: ...
    @property
    def status_code(self) -> int | None: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def error_type(self) -> str | None: ...
    @property
    def message(self) -> str: ...


class HookLog:
    """Appends lines to the hook log file. Thread-safe; never raises into callers."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        redact: Callable[[str], str] | None = None,
        *,
        max_bytes: int | None = None,
        keep: int | None = None,
        environ: Mapping[str, str] | None = None,
        quiet: bool = False,
    ) -> None:
        """`max_bytes` and `keep` bound the file (module docstring); unset, they come from
        `environ` (default: this process's environment). `quiet`: a failure to write is not
        reported (the caller says what went wrong its own way)."""
        self.path = Path(path)
        self._redact = redact
        limits = rotation_limits(os.environ if environ is None else environ)
        self.max_bytes = limits[0] if max_bytes is None else max(max_bytes, 1)
        self.keep = limits[1] if keep is None else max(keep, 0)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._dir_fd: int | None = None
        self._guarded = True  # the directory may hold what another user planted (`_open`)
        self._healthy = True
        self._quiet = quiet

    @property
    def healthy(self) -> bool:
        """False once a line could not be written (it may have recovered since)."""
        return self._healthy

    def write_execution(
        self,
        hook: str,
        event: str,
        outcome: str,
        attempts: int,
        duration: float,
        *,
        status_code: int | None = None,
        exit_code: int | None = None,
        error_type: str | None = None,
        message: str = "",
        at: float | None = None,
    ) -> None:
        """One line for one execution. `duration` in seconds; `at` unix seconds (default now)."""
        body = format_execution(
            hook, event, outcome, attempts, duration,
            status_code=status_code, exit_code=exit_code, error_type=error_type, message=message,
        )  # fmt: skip
        self.write(body, at=at)

    def record_execution(self, execution: ReportedExecution) -> None:
        """One line for the engine's execution record (a sink for the executor)."""
        hook = getattr(execution.hook, "name", execution.hook)
        event = getattr(execution.event, "name", execution.event)
        self.write_execution(
            str(hook), str(event), execution.outcome, execution.attempts, execution.duration,
            status_code=execution.status_code, exit_code=execution.exit_code,
            error_type=execution.error_type, message=execution.message,
        )  # fmt: skip

    def script_output(self, hook: str, stream: str, line: str, at: float | None = None) -> None:
        """One line a script wrote, prefixed `[hook stream]`."""
        self.write(f"[{hook} {stream}] {line}", at=at)

    def write(self, text: str, at: float | None = None) -> None:
        """Any line, timestamped."""
        line = f"{format_timestamp(time.time() if at is None else at)} {text}"
        if self._redact is not None:
            try:
                line = self._redact(line)
            except Exception as exc:  # noqa: BLE001 - an unredacted line is never written
                # Only the exception's type: its message may quote the secret.
                self._report("redact a line", type(exc).__name__)
                return
        # Tabs are kept: they only align, and script output uses them.
        line = escape_controls(line, keep="\t")
        self._append((line + "\n").encode("utf-8", "replace"))

    def close(self) -> None:
        """Close the file; a later write opens it again."""
        with self._lock:
            self._close_fd()

    def _append(self, data: bytes) -> None:
        with self._lock:
            try:
                if self._fd is None:
                    self._fd = self._open()
                info = os.fstat(self._fd)
                # Only a regular file rotates (not /dev/stderr): its size is what it holds.
                if (
                    stat.S_ISREG(info.st_mode)
                    and info.st_size
                    and info.st_size + len(data) > self.max_bytes
                ):
                    self._rotate()
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError as exc:
                self._close_fd()
                self._report("write", exc.strerror or str(exc))

    def _open(self) -> int:
        """The log's descriptor, through a descriptor of its directory (kept for renames).

        In a directory another user may write (the agent's `$HOME`, /tmp), the log is opened
        without following a link and written only as a regular file with one name, owned by
        this process's user. In a directory only this user or root can write (/dev, /var/log),
        nothing there can have been planted: the name is opened as given (`/dev/stderr`)."""
        if self._dir_fd is None:
            # Reached link by link: a link planted on the way (`logs` -> /etc, in a home the
            # agent can write) is never followed, and root makes no folder in such a home.
            self._dir_fd = open_directory_path(self.path.parent, make=True, mode=0o755)
            folder = os.fstat(self._dir_fd)
            self._guarded = folder.st_uid not in (os.geteuid(), 0) or bool(folder.st_mode & 0o022)
        # O_APPEND: lines from several processes (supervisor, hook commands) land whole, one
        # after another. O_NONBLOCK: a FIFO planted at the name never holds the writer.
        flags = _OPEN_FLAGS if self._guarded else _OPEN_FLAGS & ~os.O_NOFOLLOW
        descriptor = os.open(self.path.name, flags, 0o600, dir_fd=self._dir_fd)
        if not self._guarded:
            return descriptor
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid != os.geteuid():
            os.close(descriptor)
            # Another user's file, a device or a second name of a file: never written to.
            raise OSError(0, "not a regular file of this user with one name; not written")
        return descriptor

    def _rotate(self) -> None:
        """`agent.log` becomes `.1`, `.1` becomes `.2`, ...; beyond `keep`, removed; then a
        new `agent.log` is opened. When the name no longer is our file (another process
        rotated it), only the new file is opened. Renames and unlinks act on names in the
        directory we hold, never through a link."""
        assert self._fd is not None and self._dir_fd is not None
        directory, name = self._dir_fd, self.path.name
        try:
            current = os.stat(name, dir_fd=directory, follow_symlinks=False)
            ours = os.fstat(self._fd)
            if (current.st_dev, current.st_ino) == (ours.st_dev, ours.st_ino):
                _unlink_at(f"{name}.{self.keep + 1}", directory)
                for number in range(self.keep, 0, -1):
                    older = name if number == 1 else f"{name}.{number - 1}"
                    with contextlib.suppress(FileNotFoundError):
                        os.rename(
                            older, f"{name}.{number}", src_dir_fd=directory, dst_dir_fd=directory
                        )
                _unlink_at(name, directory)  # keep == 0: nothing is kept
        except FileNotFoundError:
            pass  # gone already: a new file is opened
        self._close_fd(keep_directory=True)
        self._fd = self._open()

    def _close_fd(self, keep_directory: bool = False) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._dir_fd is not None and not keep_directory:
            with contextlib.suppress(OSError):
                os.close(self._dir_fd)
            self._dir_fd = None

    def _report(self, what: str, detail: str) -> None:
        if self._healthy and not self._quiet:
            log.error("hook log %s: could not %s (%s); hooks keep running", self.path, what, detail)
        self._healthy = False


def _unlink_at(name: str, directory: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=directory)


class DiagnosticsHandler(logging.Handler):
    """The package's warnings and errors while a command runs (`run`, the in-process `hook`):
    each one a line of the hook log, and handed to `show(text, is_error)` for the terminal,
    which decides what the operator sees there (`run -q`: errors only).

    Without it, Python's last-resort handler would write them raw to stderr, into an
    interactive agent's screen, whatever `-q` says, and the hook log would not have them.
    """

    def __init__(
        self, hook_log: HookLog | None, show: Callable[[str, bool], None] | None = None
    ) -> None:
        super().__init__(logging.WARNING)
        self._hook_log = hook_log
        self._show = show

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record still says something
            text = str(record.msg)
        if record.exc_info and record.exc_info[0] is not None:
            # Only the exception's type: its text, and a traceback's, may quote a secret.
            text += f" ({record.exc_info[0].__name__})"
        is_error = record.levelno >= logging.ERROR
        # The hook log's own failure is reported through logging while it holds its lock:
        # writing that record to the hook log again would wait on that lock forever.
        if self._hook_log is not None and record.name != log.name:
            self._hook_log.write(f"{'error' if is_error else 'warning'}: {text}")
        if self._show is not None:
            self._show(text, is_error)


@contextlib.contextmanager
def diagnostics_to(
    hook_log: HookLog | None, show: Callable[[str, bool], None] | None = None
) -> Iterator[None]:
    """Route the package's warnings and errors (logger `otel_lifecycle_hooks`) through a
    `DiagnosticsHandler` for the duration of the block."""
    package = logging.getLogger("otel_lifecycle_hooks")
    handler = DiagnosticsHandler(hook_log, show)
    package.addHandler(handler)
    try:
        yield
    finally:
        package.removeHandler(handler)
        if hook_log is not None:
            hook_log.close()
