"""A trace file the agent rewrote (it runs as the same user): wrong types in every field,
invalid UTF-8 and terminal escapes. `trace` shows what it can, escaped, and never fails with
a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ESCAPES = "\x1b]0;owned\x07\x1b[2J"

HOSTILE_SPANS = [
    {
        "trace_id": ESCAPES + "a" * 32, "span_id": "1", "name": "invoke_agent " + ESCAPES,
        "start_time_unix_nano": "soon", "end_time_unix_nano": 5,
        "attributes": {"k": ESCAPES}, "status": {"code": ESCAPES, "message": ESCAPES},
    },
    {
        "trace_id": ESCAPES + "a" * 32, "span_id": "2", "parent_span_id": "1",
        "name": ["not", "text"], "start_time_unix_nano": None, "end_time_unix_nano": "y",
        "attributes": "not a map", "events": 7, "status": "broken",
    },
    {
        "trace_id": 5, "span_id": "3", "name": "x", "start_time_unix_nano": True,
        "events": [{"name": 1, "time_unix_nano": "z", "attributes": []}, "no"],
    },
]  # fmt: skip


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    lines = [json.dumps(span).encode() for span in HOSTILE_SPANS]
    lines.append(b'{"trace_id": "b", "span_id": "4", "name": "bad \xff\xfe utf-8"}')
    lines.append(b"\xff\xfe not json")
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@pytest.mark.parametrize(
    "options", [(), ("--all",), ("--json",), ("--trace-id", "zz"), ("--last", "3")]
)
def test_a_hostile_trace_file_is_shown_escaped_and_never_crashes_trace(
    trace_file: Path, options: tuple[str, ...]
) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "trace", str(trace_file), *options],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in shown.stderr, shown.stderr
    assert shown.returncode in (0, 1), shown.stderr
    assert "\x1b" not in shown.stdout + shown.stderr
    assert "\x07" not in shown.stdout + shown.stderr
