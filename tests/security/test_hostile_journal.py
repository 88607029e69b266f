"""A journal file the agent rewrote: SQLite keeps whatever type a writer gives a column, so a
numeric column may hold text, a JSON column may hold anything, and any text may hold terminal
escapes. `history`, `history show`, `replay` and the page's API must show such rows escaped
and keep working, never crash with a traceback nor write a raw escape to the terminal.

The journal is written by the package, then edited with SQLite as the agent would."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_lifecycle_hooks.journal import ExecutionRow, Journal
from otel_lifecycle_hooks.journal import views as journal_views

ESCAPES = "\x1b]0;owned\x07\x1b[2J\r"


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.sqlite3"
    records = Journal(path)
    records.open_session("s1", agent_id="a1", agent_name="worker")
    request = {"method": "POST", "url": "http://127.0.0.1:9/x", "headers": {}, "body": None}
    for _ in range(2):
        records.record_execution(
            ExecutionRow(
                hook="notify", event="post-start", outcome="failed", started_at=time.time(),
                session_id="s1", agent_id="a1", idempotency_key="a1:notify:post-start:t",
                request=request,
            )
        )  # fmt: skip
    records.close()
    return path


def edit(path: Path, sql: str, *values: object) -> None:
    with sqlite3.connect(path) as db:
        db.execute(sql, values)


def command(journal: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", *argv, "--journal", str(journal)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_escapes_in_every_text_column_are_shown_escaped_by_history_show(journal: Path) -> None:
    edit(
        journal,
        "UPDATE executions SET outcome = ?, trace_id = ?, span_id = ? WHERE id = 1",
        "failed" + ESCAPES, ESCAPES, ESCAPES,
    )  # fmt: skip
    edit(journal, "UPDATE executions SET hook = ? WHERE id = 2", "notify" + ESCAPES)
    for argv in (("history", "show", "1"), ("history",), ("replay", "2", "--dry-run")):
        shown = command(journal, *argv)
        assert "Traceback" not in shown.stderr, shown.stderr
        assert "\x1b" not in shown.stdout + shown.stderr and "\x07" not in shown.stdout
        assert "\\x1b]0;owned" in shown.stdout


@pytest.mark.parametrize(
    "column, value",
    [
        ("duration_ms", "x"),
        ("attempts", "many"),
        ("started_at", "yesterday"),
        ("http_status", "teapot"),
        ("replayed_from", "\x1b[2J"),
        ("request", "{not json"),
        ("request", '["a list"]'),
        ("request", '{"method": "POST", "url": 5, "headers": [1, 2]}'),
        ("recovered", "maybe"),
    ],
)
def test_a_wrongly_typed_cell_never_crashes_history_replay_or_the_pages_api(
    journal: Path, column: str, value: object
) -> None:
    edit(journal, f"UPDATE executions SET {column} = ? WHERE id = 1", value)
    for argv in (
        ("history",),
        ("history", "--json"),
        ("history", "show", "1"),
        ("history", "show", "1", "--json"),
        ("replay", "--all-failed", "--dry-run"),
    ):
        shown = command(journal, *argv)
        assert "Traceback" not in shown.stderr, (argv, shown.stderr)
        assert shown.returncode in (0, 1), (argv, shown.stderr)
        assert "\x1b" not in shown.stdout
    records = Journal(journal)
    try:
        listed = journal_views.list_executions(records, "s1", limit=10)
        assert len(listed) == 2
        json.dumps(journal_views.get_execution(records, 1))
    finally:
        records.close()


@pytest.mark.parametrize(
    "column, value",
    [
        ("response_headers", '[["a"], 5, ["b", "c", "d"]]'),
        ("response_headers", "not json"),
        ("request", '{"method": "GET", "headers": {"k": "v"}}'),
        ("duration_ms", "slow"),
        ("response_status", "\x1b[2J"),
        ("attempt", "first"),
    ],
)
def test_a_wrongly_typed_attempt_cell_never_crashes_history_show(
    journal: Path, column: str, value: object
) -> None:
    with sqlite3.connect(journal) as db:
        uid = "row-1"
        db.execute("UPDATE executions SET row_uid = ? WHERE id = 1", (uid,))
        db.execute(
            "INSERT INTO attempts (execution_uid, attempt, started_at, outcome) "
            "VALUES (?, 1, 0, 'failed')",
            (uid,),
        )
        db.execute(f"UPDATE attempts SET {column} = ?", (value,))
    for argv in (("history", "show", "1"), ("history", "show", "1", "--json")):
        shown = command(journal, *argv)
        assert "Traceback" not in shown.stderr, (argv, shown.stderr)
        assert shown.returncode == 0, (argv, shown.stderr)
        assert "\x1b" not in shown.stdout
