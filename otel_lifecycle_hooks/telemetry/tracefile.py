"""The local trace file: the embedded default when no exporter is configured.

One span per line, shaped like OTLP/JSON but flat, so that `jq` and the `trace` command read
it without a protobuf schema::

    {"trace_id": "5b8e...", "span_id": "051f...", "parent_span_id": null,
     "name": "invoke_agent reviewer", "kind": "INTERNAL",
     "start_time_unix_nano": 1767000000000000000, "end_time_unix_nano": ...,
     "status": {"code": "OK", "message": ""},
     "attributes": {...}, "events": [{"name": ..., "time_unix_nano": ..., "attributes": {...}}],
     "resource": {"service.name": ...}, "scope": {"name": ..., "version": ...}}
"""

from __future__ import annotations

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

logger = logging.getLogger(__name__)

TRACE_DIR_ENV = "OTEL_LIFECYCLE_HOOKS_TRACE_DIR"
TRACE_FILE_SUFFIX = ".jsonl"


def default_trace_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$OTEL_LIFECYCLE_HOOKS_TRACE_DIR`, else `$XDG_STATE_HOME` (default `~/.local/state`)
    `/otel-lifecycle-hooks/traces`."""
    env = os.environ if environ is None else environ
    if env.get(TRACE_DIR_ENV):
        return Path(env[TRACE_DIR_ENV]).expanduser()
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


def read_trace_file(path: Path) -> list[dict[str, Any]]:
    """Every span in a trace file; lines that are not JSON objects (a torn last write) are
    skipped."""
    spans: list[dict[str, Any]] = []
    for line in _lines(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "span_id" in record:
            spans.append(record)
    return spans


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield line


def span_to_record(span: ReadableSpan) -> dict[str, Any]:
    """One SDK span as the trace file's JSON object."""
    context = span.get_span_context()
    parent = span.parent
    scope = span.instrumentation_scope
    return {
        "trace_id": format(context.trace_id, "032x") if context else None,
        "span_id": format(context.span_id, "016x") if context else None,
        "parent_span_id": format(parent.span_id, "016x") if parent else None,
        "name": span.name,
        "kind": span.kind.name,
        "start_time_unix_nano": span.start_time,
        "end_time_unix_nano": span.end_time,
        "status": {
            "code": span.status.status_code.name,
            "message": span.status.description or "",
        },
        "attributes": _plain(span.attributes),
        "events": [
            {
                "name": event.name,
                "time_unix_nano": event.timestamp,
                "attributes": _plain(event.attributes),
            }
            for event in span.events
        ],
        "resource": _plain(span.resource.attributes),
        "scope": {"name": scope.name, "version": scope.version} if scope else None,
    }


def _plain(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    # Attribute sequences arrive as tuples; JSON wants lists.
    return {
        key: list(value) if isinstance(value, Sequence) and not isinstance(value, str) else value
        for key, value in (attributes or {}).items()
    }


class TraceFileExporter(SpanExporter):
    """Appends finished spans to a JSON-lines file, one span per line.

    The directory is created on first export (mode 0700: traces may hold prompts and task
    summaries). Write errors are logged once and reported as a failed export, never raised.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._shut_down = False
        self._warned = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shut_down:
            return SpanExportResult.FAILURE
        try:
            lines = "".join(
                json.dumps(span_to_record(span), ensure_ascii=False, default=str) + "\n"
                for span in spans
            )
            with self._lock:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                with os.fdopen(fd, "a", encoding="utf-8") as handle:
                    handle.write(lines)
        except Exception:
            if not self._warned:
                logger.warning("cannot write the trace file %s", self.path, exc_info=True)
                self._warned = True
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._shut_down = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every export is written through before it returns
