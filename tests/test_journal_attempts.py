"""The journal's attempts table (migration 3), the read API the `ui` page and `history show`
use, and retention by age and by rows, on a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest

from otel_lifecycle_hooks.journal import ExecutionRow, Journal
from otel_lifecycle_hooks.journal.retention import (
    DEFAULT_RETENTION,
    Retention,
    RetentionError,
    parse_retention,
    retention_from,
)
from otel_lifecycle_hooks.journal.rows import AttemptRow
from otel_lifecycle_hooks.journal.schema import SCHEMA_VERSION, statements
from otel_lifecycle_hooks.journal.views import (
    get_execution,
    list_attempts,
    list_executions,
    list_sessions,
)

KEEP_ALL = Retention()


def version_2_journal(path: Path) -> None:
    """A journal file as the package wrote it before attempts existed, with one row."""
    with closing(sqlite3.connect(path)) as db:
        for version, body in statements("sqlite", 0):
            if version > 2:
                break
            for statement in body:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {version}")
        db.execute(
            "INSERT INTO executions (session_id, agent_id, hook, event, outcome, attempts,"
            " started_at, http_status) VALUES ('s-old', 'a-old', 'notify', 'post-start',"
            " 'failed', 4, ?, 503)",
            (time.time() - 60,),
        )
        db.commit()


def three_attempts(started: float) -> list[AttemptRow]:
    request = {"method": "POST", "url": "http://127.0.0.1:9/x", "headers": [["a", "b"]]}
    return [
        AttemptRow(
            attempt=n,
            started_at=started + n,
            outcome="failed" if n < 3 else "success",
            duration_ms=1.5,
            error_type="http.503" if n < 3 else None,
            message="HTTP 503 Service Unavailable" if n < 3 else "",
            request=request,
            response_status=503 if n < 3 else 200,
            response_headers=[["content-type", "text/plain"]],
            response_body="busy" if n < 3 else "ok",
        )
        for n in (1, 2, 3)
    ]


def test_a_version_2_journal_is_migrated_on_open_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    version_2_journal(path)
    journal = Journal(path)
    try:
        (old,) = journal.executions()
        assert (old.hook, old.outcome, old.http_status, old.row_uid) == (
            "notify",
            "failed",
            503,
            None,
        )
        assert journal.attempts(old.row_uid) == []  # it predates attempts: none, no error
        new_id = journal.record_execution(
            ExecutionRow("notify", "post-start", "success", time.time(), attempts=3),
            three_attempts(time.time()),
        )
        new = journal.get(new_id)
        assert new is not None and new.row_uid
        assert [a.response_status for a in journal.attempts(new.row_uid)] == [503, 503, 200]
    finally:
        journal.close()
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        columns = [row[1] for row in db.execute("PRAGMA table_info(attempts)")]
    assert "response_body" in columns and "stderr" in columns


def test_the_read_api_lists_sessions_their_deliveries_and_each_attempt(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    now = time.time()
    try:
        journal.open_session("s1", agent_id="a1", agent_name="worker", started_at=now - 10)
        failed_id = journal.record_execution(
            ExecutionRow(
                "notify",
                "post-start",
                "failed",
                now - 9,
                attempts=3,
                session_id="s1",
                agent_id="a1",
                idempotency_key="a1:notify:post-start:t",
                request={"method": "POST", "url": "http://127.0.0.1:9/x"},
            ),
            three_attempts(now - 9),
        )
        ok_id = journal.record_execution(
            ExecutionRow("log", "post-start", "success", now - 8, session_id="s1", agent_id="a1")
        )
        journal.record_execution(  # an application's own tracer: no session row
            ExecutionRow("log", "tool-start", "success", now - 5, session_id="s2", agent_id="a2")
        )

        sessions = list_sessions(journal, retention=KEEP_ALL)
        assert [s["session_id"] for s in sessions] == ["s2", "s1"]
        s1 = sessions[1]
        assert (s1["agent_name"], s1["deliveries"], s1["failed"], s1["live"]) == (
            "worker", 2, 1, True,
        )  # fmt: skip
        json.dumps(sessions)  # plain data, as a web page is sent it

        deliveries = list_executions(journal, "s1", retention=KEEP_ALL)
        assert [d["id"] for d in deliveries] == [ok_id, failed_id]
        assert deliveries[1]["replayable"] and not deliveries[0]["replayable"]
        assert [d["id"] for d in list_executions(journal, "s1", after_id=failed_id)] == [ok_id]

        attempts = list_attempts(journal, failed_id, retention=KEEP_ALL)
        assert [(a["attempt"], a["response_status"], a["response_body"]) for a in attempts] == [
            (1, 503, "busy"), (2, 503, "busy"), (3, 200, "ok"),
        ]  # fmt: skip
        shown = get_execution(journal, failed_id, retention=KEEP_ALL)
        assert shown is not None and shown["attempts"] == attempts and shown["attempt_count"] == 3
        json.dumps(shown)
        assert get_execution(journal, 9999, retention=KEEP_ALL) is None
        assert list_attempts(journal, 9999, retention=KEEP_ALL) == []
    finally:
        journal.close()


def test_retention_settings_read_as_written_and_refuse_what_is_not() -> None:
    assert parse_retention("30d") == Retention(30 * 86400.0, None)
    assert parse_retention("12h, 5000rows") == Retention(12 * 3600.0, 5000)
    assert parse_retention("100000 rows") == Retention(None, 100000)
    assert parse_retention("off").unlimited
    for bad in ("30", "30 days", "1d,2d", "0rows", "-1d"):
        with pytest.raises(RetentionError, match="write an age|at least 1 row"):
            parse_retention(bad)
    assert retention_from({}) == parse_retention(DEFAULT_RETENTION)
    # A typo keeps the default: it must not make the journal keep nothing, or everything.
    assert retention_from({"LIFECYCLE_HOOKS_JOURNAL_RETENTION": "30 days"}) == parse_retention(
        DEFAULT_RETENTION
    )


def test_retention_by_age_deletes_old_executions_with_their_attempts(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    now = time.time()
    try:
        old = journal.record_execution(
            ExecutionRow("h", "post-start", "success", now - 3 * 86400, attempts=3),
            three_attempts(now - 3 * 86400),
        )
        recent = journal.record_execution(
            ExecutionRow("h", "post-start", "success", now - 3600, attempts=3),
            three_attempts(now - 3600),
        )
        old_uid = journal.get(old).row_uid  # type: ignore[union-attr]
        two_days = parse_retention("2d")
        # `history` honours it before anything is deleted.
        assert [d["id"] for d in list_executions(journal, retention=two_days)] == [recent]
        assert get_execution(journal, old, retention=two_days) is None
        assert journal.apply_retention(two_days, now) == 1
        assert [row.id for row in journal.executions()] == [recent]
        assert journal.attempts(old_uid) == []
        assert len(list_attempts(journal, recent, retention=two_days)) == 3
    finally:
        journal.close()


def test_retention_by_rows_keeps_the_newest(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    now = time.time()
    try:
        ids = [
            journal.record_execution(
                ExecutionRow("h", "tool-start", "success", now - 100 + n, attempts=3),
                three_attempts(now),
            )
            for n in range(10)
        ]
        keep_four = parse_retention("4rows")
        assert [d["id"] for d in list_executions(journal, retention=keep_four)] == ids[:-5:-1]
        assert journal.apply_retention(keep_four, now, chunk=4) == 6  # in chunks of 4, 4 + 2
        assert [row.id for row in journal.executions(oldest_first=True)] == ids[6:]
        with closing(sqlite3.connect(journal.path)) as db:
            assert db.execute("SELECT count(*) FROM attempts").fetchone()[0] == 4 * 3
        assert journal.apply_retention(keep_four, now) == 0  # nothing more to do
    finally:
        journal.close()
