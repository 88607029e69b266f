"""What every command does alike on a terminal: escaped control characters, colour only on a
terminal without NO_COLOR, and exit 1 when there is nothing to show."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from otel_lifecycle_hooks.cli.console import escape_control
from otel_lifecycle_hooks.cli.history import table
from otel_lifecycle_hooks.journal import ExecutionRow, Journal


def test_escape_sequences_bells_and_c1_controls_are_shown_never_sent() -> None:
    hostile = "ok\x1b]0;pwned\x07\x1b[2J\r\x9b6n\u202etxt.exe"
    shown = escape_control(hostile)
    assert shown == "ok\\x1b]0;pwned\\x07\\x1b[2J\\r\\x9b6n\\u202etxt.exe"
    assert all(ch.isprintable() for ch in shown)
    assert escape_control("line one\nline two", keep_newlines=True) == "line one\nline two"


def _row(**values: object) -> ExecutionRow:
    fields: dict[str, object] = {
        "hook": "notify",
        "event": "session-end",
        "outcome": "failed",
        "started_at": 0.0,
        "attempts": 1,
        "duration_ms": 1.0,
        "session_id": "s",
    }
    fields.update(values)
    return ExecutionRow(**fields)  # type: ignore[arg-type]


def test_history_escapes_what_an_endpoint_or_agent_wrote(tmp_path: Path) -> None:
    journal_path = tmp_path / "journal.sqlite3"
    journal = Journal(journal_path)
    journal.record_execution(_row(error_type="\x1b[31mred\x1b[0m", message="\x1b[2J"))
    journal.close()
    env = {**os.environ, "NO_COLOR": ""}
    result = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "history", "--journal", str(journal_path)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    assert "\\x1b[31mred\\x1b[0m" in result.stdout


def test_history_colours_outcomes_only_when_asked() -> None:
    rows = [_row(id=1), _row(id=2, outcome="success")]
    plain = table(rows)
    coloured = table(rows, colour=True)
    assert "\x1b[" not in plain
    assert "\x1b[31mfailed\x1b[0m" in coloured and "\x1b[32msuccess\x1b[0m" in coloured
    # Colour changes no column: the rows line up the same.
    strip = coloured.replace("\x1b[31m", "").replace("\x1b[32m", "").replace("\x1b[0m", "")
    assert strip == plain


def test_nothing_to_show_is_exit_1_for_history_and_trace(tmp_path: Path) -> None:
    env = {**os.environ, "OTEL_LIFECYCLE_HOOKS_TRACE_DIR": str(tmp_path / "none")}
    for argv in (["history", "--journal", str(tmp_path / "none.sqlite3")], ["trace"]):
        result = subprocess.run(
            [sys.executable, "-m", "otel_lifecycle_hooks", *argv],
            capture_output=True,
            text=True,
            check=False,
            env=env,
            timeout=60,
        )
        assert result.returncode == 1, argv
        assert result.stderr.strip(), argv


def test_list_colours_recent_outcomes_only_when_asked() -> None:
    from otel_lifecycle_hooks.cli.list_hooks import _recent_text

    recent = {"notify": [_row(id=1, http_status=503, error_type="http.503")]}
    assert "\x1b[" not in _recent_text(recent)
    assert "\x1b[31mfailed\x1b[0m" in _recent_text(recent, colour=True)
