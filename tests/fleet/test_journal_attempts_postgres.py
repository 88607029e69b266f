"""The delivery history on the real PostgreSQL server: migration 3 of a version-2 database,
attempts written through the queue and read back by the same read API as SQLite, retention,
and a real supervised run whose three attempts `history show` reads from the database."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from otel_lifecycle_hooks.journal import AttemptRow, ExecutionRow, Journal
from otel_lifecycle_hooks.journal.postgres import PostgresJournal
from otel_lifecycle_hooks.journal.retention import Retention, parse_retention
from otel_lifecycle_hooks.journal.schema import SCHEMA_VERSION, statements
from otel_lifecycle_hooks.journal.views import get_execution, list_executions, list_sessions
from tests.supervisor.supervised import Workspace
from tests.support.target_server import TargetServer
from tests.test_journal_supervised_attempts import check_the_three_attempts, run_the_flaky_hook


def attempts(started: float, count: int = 3) -> list[AttemptRow]:
    return [
        AttemptRow(
            attempt=n,
            started_at=started + n,
            outcome="success" if n == count else "failed",
            response_status=200 if n == count else 503,
            response_headers=[["content-type", "text/plain"]],
            response_body="ok" if n == count else "busy",
            request={"method": "POST", "url": "http://127.0.0.1:9/", "headers": [], "body": None},
        )
        for n in range(1, count + 1)
    ]


def test_a_version_2_database_is_migrated_and_keeps_its_rows(
    postgres_url: str, tmp_path: Path
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE journal_schema (version INTEGER NOT NULL)")
        for version, body in statements("postgresql", 0):
            if version > 2:
                break
            for statement in body:
                db.execute(statement)
            db.execute("INSERT INTO journal_schema VALUES (%s)", (version,))
        db.execute(
            "INSERT INTO executions (hook, event, outcome, started_at, row_uid)"
            " VALUES ('notify', 'post-start', 'failed', %s, 'old-uid')",
            (time.time(),),
        )
    journal = PostgresJournal(postgres_url, spill_dir=tmp_path / "spill")
    try:
        (old,) = journal.executions()
        assert (old.hook, old.row_uid) == ("notify", "old-uid")
        assert journal.attempts(old.row_uid) == []
        journal.record_execution(
            ExecutionRow("notify", "post-start", "success", time.time(), attempts=3),
            attempts(time.time()),
        )
        assert journal.flush(10)
        new = journal.executions(limit=1)[0]
        assert [a.response_body for a in journal.attempts(new.row_uid)] == ["busy", "busy", "ok"]
    finally:
        journal.close()
    with psycopg.connect(postgres_url) as db:
        versions = [row[0] for row in db.execute("SELECT version FROM journal_schema ORDER BY 1")]
        columns = [
            row[0]
            for row in db.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'attempts' ORDER BY ordinal_position"
            )
        ]
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    sqlite_journal = Journal(tmp_path / "same.sqlite3")
    sqlite_journal.close()
    with closing(sqlite3.connect(tmp_path / "same.sqlite3")) as db:
        assert columns == [row[1] for row in db.execute("PRAGMA table_info(attempts)")]


def test_the_read_api_and_retention_answer_as_on_sqlite(postgres_url: str, tmp_path: Path) -> None:
    journal = PostgresJournal(postgres_url, spill_dir=tmp_path / "spill")
    now = time.time()
    try:
        journal.open_session("s1", agent_id="a1", agent_name="worker", started_at=now - 100)
        for n in range(6):
            journal.record_execution(
                ExecutionRow(
                    "notify", "post-start", "failed" if n % 2 else "success", now - 90 + n,
                    attempts=3, session_id="s1", agent_id="a1",
                ),
                attempts(now - 90 + n),
            )  # fmt: skip
        # What an endpoint may answer: a NUL byte (PostgreSQL text cannot hold it).
        journal.record_execution(
            ExecutionRow("notify", "pre-stop", "failed", now - 10, session_id="s1"),
            [AttemptRow(attempt=1, started_at=now - 10, outcome="failed", response_body="a\x00b")],
        )
        assert journal.flush(10)
        (session,) = list_sessions(journal, retention=Retention())
        assert (session["agent_name"], session["deliveries"], session["failed"]) == (
            "worker", 7, 4,
        )  # fmt: skip
        newest = list_executions(journal, "s1", retention=Retention())[0]
        assert (
            get_execution(journal, newest["id"], retention=Retention())["attempts"][0][
                "response_body"
            ]
            == "a\ufffdb"
        )

        keep_three = parse_retention("3rows")
        assert len(list_executions(journal, retention=keep_three)) == 3
        assert journal.apply_retention(keep_three, now, chunk=2) == 4
        assert len(journal.executions()) == 3
        with psycopg.connect(postgres_url) as db:
            assert db.execute("SELECT count(*) FROM attempts").fetchone()[0] == 2 * 3 + 1
        assert journal.apply_retention(parse_retention("20s"), now) == 2
        assert [row.event for row in journal.executions()] == ["pre-stop"]
    finally:
        journal.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    space = Workspace(tmp_path)
    yield space
    space.cleanup()


def test_a_supervised_run_on_postgres_journals_every_attempt(
    workspace: Workspace, target_server: TargetServer, postgres_url: str
) -> None:
    env = {"OTEL_LIFECYCLE_HOOKS_JOURNAL": postgres_url}
    run_the_flaky_hook(workspace, target_server, **env)

    def history(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "otel_lifecycle_hooks", "history", *argv],
            env={**workspace.env, **env},
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    listed = history("--json", "--hook", "notify")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    shown = history("show", str(row["id"]), "--json")
    assert shown.returncode == 0, shown.stderr
    check_the_three_attempts(json.loads(shown.stdout), target_server)
