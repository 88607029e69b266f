"""The local trace file: the embedded default when no exporter is configured.

The file is in the OTLP JSON file format, as the OpenTelemetry Collector's file exporter
writes it and its `otlp_json_file` receiver reads it: one `ExportTraceServiceRequest` a line
(a batch of spans), in the OTLP specification's JSON encoding (`otlp_json.py`)::

    {"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{...}}]},
      "scopeSpans":[{"scope":{"name":"otel_lifecycle_hooks"},"spans":[{"traceId":"5b8e...",
      "spanId":"051f...","name":"invoke_agent reviewer","kind":1,
      "startTimeUnixNano":"1767000000000000000",...}]}]}]}

so that a kept file can be shipped later to any OTLP back end. `read_trace_file` gives its
spans as flat records (the shape `trace` draws and `trace --json` prints), and still reads
the files of earlier versions, which held one flat span a line.

The file is rotated at a size bound, so that a long or busy session cannot fill the disk
(a webhook delivery writes two spans, about 2 KB): before a write would take `<name>.jsonl`
past `LIFECYCLE_HOOKS_TRACE_FILE_MAX_BYTES` (default 20 MiB), it becomes `<name>.jsonl.1`,
the earlier `.1` becomes `.2`, and so on; only `LIFECYCLE_HOOKS_TRACE_FILE_KEEP` rotated
files are kept (default 3, so at most 80 MiB a session), the oldest spans going first.
`read_trace_file` reads the rotated files too, oldest first, so `trace` shows everything that
is kept. The older names of these variables, with an `OTEL_` prefix, are still read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ..private_files import is_trusted_directory, open_directory_path
from . import otlp_json

logger = logging.getLogger(__name__)

TRACE_DIR_ENV = "OTEL_LIFECYCLE_HOOKS_TRACE_DIR"
TRACE_FILE_SUFFIX = ".jsonl"
MAX_BYTES_ENV = "LIFECYCLE_HOOKS_TRACE_FILE_MAX_BYTES"
KEEP_ENV = "LIFECYCLE_HOOKS_TRACE_FILE_KEEP"
LEGACY_PREFIX = "OTEL_"  # OTEL_LIFECYCLE_HOOKS_TRACE_FILE_*: read when the new name is unset
DEFAULT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_KEEP = 3
# Below this a file could not hold one typical span: a smaller setting is a mistake.
MIN_MAX_BYTES = 64 * 1024
# A line is at most this long (a batch is split over lines), so that the collector's
# `otlp_json_file` receiver, whose longest entry is 1 MiB by default, reads every line whole.
MAX_LINE_BYTES = 1024 * 1024


def default_trace_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$LIFECYCLE_HOOKS_TRACE_DIR` (or the older `$OTEL_LIFECYCLE_HOOKS_TRACE_DIR`), else
    `$XDG_STATE_HOME` (default `~/.local/state`) `/otel-lifecycle-hooks/traces`."""
    env = os.environ if environ is None else environ
    named = env.get(TRACE_DIR_ENV.removeprefix("OTEL_")) or env.get(TRACE_DIR_ENV)
    if named:
        return Path(named).expanduser()
    state_home = env.get("XDG_STATE_HOME") or str(
        Path(env.get("HOME") or Path.home()) / ".local" / "state"
    )
    return Path(state_home) / "otel-lifecycle-hooks" / "traces"


def default_trace_path(
    environ: Mapping[str, str] | None = None, session_id: str | None = None
) -> Path:
    """Where a new session's trace file goes: `<trace dir>/<session id or UTC time>.jsonl`."""
    if session_id:
        stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in session_id)
    else:
        stem = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    return default_trace_dir(environ) / (stem + TRACE_FILE_SUFFIX)


def newest_trace_file(directory: Path) -> Path | None:
    """The most recently modified trace file in `directory`, or None when there is none."""
    try:
        candidates = [p for p in directory.glob("*" + TRACE_FILE_SUFFIX) if p.is_file()]
    except OSError:
        return None
    return max(candidates, key=lambda p: p.stat().st_mtime, default=None)


def rotated_path(path: Path, number: int) -> Path:
    """The `number`th rotated file of `path` (1: the most recent): `<name>.jsonl.<number>`."""
    return path.with_name(f"{path.name}.{number}")


def rotated_files(path: Path) -> list[Path]:
    """`path`'s rotated files that exist, oldest first."""
    found: list[Path] = []
    number = 1
    while rotated_path(path, number).is_file():
        found.append(rotated_path(path, number))
        number += 1
    return found[::-1]


def rotation_limits(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(max bytes of the current file, rotated files kept) from the environment; a value
    that is not a whole number, or below the minimum, falls back to the default, with a
    warning that says what would be valid."""
    env = os.environ if environ is None else environ
    return (
        _whole_number(env, MAX_BYTES_ENV, DEFAULT_MAX_BYTES, minimum=MIN_MAX_BYTES),
        _whole_number(env, KEEP_ENV, DEFAULT_KEEP, minimum=0),
    )


def _whole_number(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    text = env.get(name, "").strip()
    if not text and env.get(LEGACY_PREFIX + name, "").strip():
        name = LEGACY_PREFIX + name
        text = env[name].strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        logger.warning(
            "%s=%r: write a whole number of at least %d; using %d", name, text, minimum, default
        )
        return default
    return value


def read_trace_file(path: Path) -> list[dict[str, Any]]:
    """Every span in a trace file and in its rotated files (oldest first), as flat records
    (`otlp_json.flat_spans`); lines that are neither an OTLP JSON request nor an older flat
    span (a torn last write) are skipped."""
    spans: list[dict[str, Any]] = []
    for rotated in rotated_files(path):
        spans.extend(spans_in_file(rotated))
    spans.extend(spans_in_file(path))
    return spans


def spans_in_file(path: Path) -> list[dict[str, Any]]:
    """The spans of one file (not its rotated ones), in either format, as flat records."""
    spans: list[dict[str, Any]] = []
    for line in _lines(path):
        try:
            record = json.loads(line)
            if otlp_json.is_request(record):
                spans.extend(otlp_json.flat_spans(record))
            elif isinstance(record, dict) and isinstance(record.get("span_id"), str):
                spans.append(_well_typed(record))  # a file of an earlier version
        except (ValueError, RecursionError):  # not JSON, or nested past reading
            continue
    return spans


def _well_typed(record: dict[str, Any]) -> dict[str, Any]:
    """An earlier version's flat span with each field a reader uses of the type that version
    wrote; another type is left out. The file may have been written by the agent (it runs as
    the same user), and `trace` must show it, not fail on it."""
    fitted = dict(record)
    for name in ("trace_id", "parent_span_id", "name", "kind"):
        if not isinstance(fitted.get(name), (str, type(None))):
            del fitted[name]
    for name in ("start_time_unix_nano", "end_time_unix_nano"):
        value = fitted.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            del fitted[name]
    status = fitted.get("status")
    if status is not None:
        fitted["status"] = (
            {k: v for k, v in status.items() if isinstance(v, str)}
            if isinstance(status, dict)
            else {}
        )
    if not isinstance(fitted.get("attributes", {}), dict):
        fitted["attributes"] = {}
    events = fitted.get("events")
    if events is not None:
        fitted["events"] = [
            _well_typed_event(event) for event in events if isinstance(event, dict)
        ] if isinstance(events, list) else []  # fmt: skip
    return fitted


def _well_typed_event(event: dict[str, Any]) -> dict[str, Any]:
    moment = event.get("time_unix_nano")
    return {
        "name": event["name"] if isinstance(event.get("name"), str) else "",
        "time_unix_nano": moment if isinstance(moment, int) and not isinstance(moment, bool) else 0,
        "attributes": event["attributes"] if isinstance(event.get("attributes"), dict) else {},
    }


def _lines(path: Path) -> Iterator[str]:
    # errors="replace": a torn or hostile byte is shown as U+FFFD, never a failure.
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.strip():
                yield line


class TraceFileExporter(SpanExporter):
    """Appends finished spans to an OTLP JSON file, one `ExportTraceServiceRequest` a batch
    and a line (a batch larger than the bound is split over lines), rotated at a size
    bound (`max_bytes`, keeping `keep` rotated files; defaults from the environment, see the
    module's docstring).

    The directory is created on first export (mode 0700: traces may hold prompts and task
    summaries). Write errors are logged once and reported as a failed export, never raised.
    """

    def __init__(self, path: Path, max_bytes: int | None = None, keep: int | None = None) -> None:
        self.path = path
        default_max, default_keep = rotation_limits()
        self.max_bytes = default_max if max_bytes is None else max_bytes
        self.keep = default_keep if keep is None else keep
        self._size: int | None = None  # of the current file, read at the first export
        self._lock = threading.Lock()
        self._shut_down = False
        self._warned = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shut_down:
            return SpanExportResult.FAILURE
        try:
            lines = self._encoded(spans)
            with self._lock:
                if self._size is None:  # the first export
                    self._size = self._current_size()
                # A file takes lines until the next would take it past the bound.
                pending: list[bytes] = []
                for line in lines:
                    if self._size and self._size + len(line) > self.max_bytes:
                        self._append(pending)
                        pending = []
                        self._rotate()
                    pending.append(line)
                    self._size += len(line)
                self._append(pending)
        except Exception:
            if not self._warned:
                logger.warning("cannot write the trace file %s", self.path, exc_info=True)
                self._warned = True
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _encoded(self, spans: Sequence[ReadableSpan]) -> list[bytes]:
        """`spans` as one line, or, when that line would pass the size bound or
        `MAX_LINE_BYTES`, as the lines of each half."""
        line = otlp_json.encode_line(spans)
        if len(line) <= min(self.max_bytes, MAX_LINE_BYTES) or len(spans) < 2:
            return [line]
        half = len(spans) // 2
        return self._encoded(spans[:half]) + self._encoded(spans[half:])

    def _directory(self) -> int:
        """A descriptor of the trace directory, made where missing (0700), reached without
        following a link another user could have planted (a root supervisor's HOME may be
        its agent's), and refused unless only this user or root can change it: what is
        written there is never written through a name someone else put in it."""
        directory = open_directory_path(self.path.parent, make=True)
        if not is_trusted_directory(directory):
            os.close(directory)
            raise PermissionError(
                f"{self.path.parent}: another user can change this directory; trace files "
                "are written only where this user or root alone can"
            )
        return directory

    def _current_size(self) -> int:
        directory = self._directory()
        try:
            return os.stat(self.path.name, dir_fd=directory, follow_symlinks=False).st_size
        except FileNotFoundError:
            return 0
        finally:
            os.close(directory)

    def _append(self, lines: list[bytes]) -> None:
        if not lines:
            return
        # Opened again for every batch (the file may be rotated or removed meanwhile), so
        # the directory is too (it may have been removed since the first export).
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
        directory = self._directory()
        try:
            fd = os.open(self.path.name, flags | os.O_CLOEXEC, 0o600, dir_fd=directory)
        finally:
            os.close(directory)
        with os.fdopen(fd, "ab") as handle:
            handle.write(b"".join(lines))

    def _rotate(self) -> None:
        """`<name>.jsonl` becomes `.1`, `.1` becomes `.2`, ...; beyond `keep`, removed."""
        directory = self._directory()
        try:
            name = self.path.name
            _unlink_at(rotated_path(self.path, self.keep + 1).name, directory)
            for number in range(self.keep, 0, -1):
                older = name if number == 1 else rotated_path(self.path, number - 1).name
                with contextlib.suppress(FileNotFoundError):
                    os.replace(
                        older,
                        rotated_path(self.path, number).name,
                        src_dir_fd=directory,
                        dst_dir_fd=directory,
                    )
            _unlink_at(name, directory)  # keep == 0: nothing is kept
        finally:
            os.close(directory)
        self._size = 0

    def shutdown(self) -> None:
        self._shut_down = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every export is written through before it returns


def _unlink_at(name: str, directory: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=directory)
