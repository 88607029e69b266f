"""The PostgreSQL journal against a real server: the same schema and answers as SQLite, claims
that exactly one of many claimers wins, and writes that survive the database being down."""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from otel_lifecycle_hooks.journal import ExecutionRow, Journal, open_journal
from otel_lifecycle_hooks.journal.postgres import PostgresJournal
from otel_lifecycle_hooks.journal.schema import SCHEMA_VERSION
from tests.support.postgres import PostgresServer


def columns_sqlite(path: Path, table: str) -> list[str]:
    with closing(sqlite3.connect(path)) as db:
        return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def columns_postgres(url: str, table: str) -> list[str]:
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
            " ORDER BY ordinal_position",
            (table,),
        ).fetchall()
    return [row[0] for row in rows]


def test_both_backends_migrate_to_the_same_schema(postgres_url: str, tmp_path: Path) -> None:
    sqlite_journal = Journal(tmp_path / "j.sqlite3")
    sqlite_journal.close()
    postgres_journal = open_journal(postgres_url)
    assert isinstance(postgres_journal, PostgresJournal)
    postgres_journal.sessions()  # a read connects, and so migrates
    postgres_journal.close()
    for table in ("executions", "sessions"):
        assert columns_postgres(postgres_url, table) == columns_sqlite(
            tmp_path / "j.sqlite3", table
        )
    with psycopg.connect(postgres_url) as db:
        versions = [row[0] for row in db.execute("SELECT version FROM journal_schema ORDER BY 1")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


def test_a_database_with_a_newer_schema_is_not_written(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as db:
        db.execute("CREATE TABLE journal_schema (version INTEGER NOT NULL)")
        db.execute("INSERT INTO journal_schema VALUES (99)")
    journal = PostgresJournal(postgres_url)
    assert journal.sessions() == []
    assert not journal.healthy
    journal.close(timeout=1)


def test_rows_written_through_the_queue_read_back_with_every_filter(
    postgres_url: str, tmp_path: Path
) -> None:
    journal = PostgresJournal(postgres_url, spill_dir=tmp_path / "spill")
    for index in range(30):
        journal.record_execution(
            ExecutionRow(
                hook=f"hook-{index % 3}",
                event="tool-start",
                outcome="failed" if index % 5 == 0 else "success",
                started_at=1000.0 + index,
                session_id=f"s{index % 2}",
                agent_id=f"agent-{index % 2}",
                idempotency_key=f"k{index}",
            )
        )
    assert journal.flush(10)
    assert len(journal.executions()) == 30
    assert {r.agent_id for r in journal.executions(agent_id="agent-1")} == {"agent-1"}
    assert len(journal.executions(session_id="s0", hook="hook-0")) == 5
    assert len(journal.failed()) == 6
    assert [r.started_at for r in journal.executions(since=1025.0, oldest_first=True)] == [
        1025.0, 1026.0, 1027.0, 1028.0, 1029.0,
    ]  # fmt: skip
    journal.close()
    assert not list((tmp_path / "spill").glob("*"))  # all written: nothing kept


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_of_many_claimers_at_once_exactly_one_takes_a_session(
    backend: str, postgres_url: str, tmp_path: Path
) -> None:
    location = str(tmp_path / "j.sqlite3") if backend == "sqlite" else postgres_url
    setup = open_journal(location)
    setup.open_session("lost", agent_id="a1", started_at=time.time() - 100)
    setup.begin_event("lost", "post-start", time.time() - 99)
    if backend == "postgresql":
        assert setup.flush(10)
    journals = [open_journal(location) for _ in range(8)]
    start = threading.Barrier(len(journals))
    won: list[object] = []

    def claim(journal: object, index: int) -> None:
        start.wait()
        row = journal.claim_session("lost", f"claimer-{index}", 300.0)  # type: ignore[attr-defined]
        if row is not None:
            won.append(row)

    threads = [threading.Thread(target=claim, args=(j, i)) for i, j in enumerate(journals)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(won) == 1
    (row,) = won
    assert row.pre_stop_at is not None and row.session_end_at is not None  # type: ignore[attr-defined]
    # The moments are fixed once: a later claim after the lease keeps them.
    again = setup.claim_session("lost", "late", 300.0, at=time.time() + 301)
    assert again is not None
    assert (again.pre_stop_at, again.session_end_at) == (row.pre_stop_at, row.session_end_at)  # type: ignore[attr-defined]
    for journal in [setup, *journals]:
        journal.close()


def test_writes_made_while_the_database_is_down_are_kept_and_written_by_the_next_journal(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    spill = tmp_path / "spill"
    first = PostgresJournal(postgres_url, spill_dir=spill, max_pending=5)
    first.open_session("s1", agent_id="a1")
    assert first.flush(10)
    postgres_server.stop()
    try:
        started = time.monotonic()
        for index in range(40):
            first.record_execution(
                ExecutionRow(hook="h", event="tool-start", outcome="success",
                             started_at=float(index), session_id="s1", idempotency_key=f"k{index}")
            )  # fmt: skip
        first.close_session("s1", 0)
        elapsed = time.monotonic() - started
        first.close(timeout=1)
        assert list(spill.glob("*.jsonl"))  # kept on disk
        print(f"\n41 writes with the database down took {elapsed * 1000:.1f} ms")
    finally:
        postgres_server.start()
    second = PostgresJournal(postgres_url, spill_dir=spill)
    deadline = time.monotonic() + 60  # a hang guard
    while time.monotonic() < deadline and len(second.executions(session_id="s1")) < 40:
        time.sleep(0.1)
    assert len(second.executions(session_id="s1")) == 40
    session = second.session("s1")
    assert session is not None and session.exit_code == 0
    second.close()
    assert not list(spill.glob("*"))


def test_a_database_password_is_never_in_a_message(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    closed_port = "127.0.0.1:9"  # the discard port: nothing listens on loopback here
    url = f"postgresql://hooks:pw-canary-7@{closed_port}/db?password=pw-canary-8"
    with caplog.at_level("DEBUG", logger="otel_lifecycle_hooks.journal"):
        journal = PostgresJournal(url, spill_dir=tmp_path / "spill")
        journal.open_session("s1", agent_id="a1")
        assert journal.sessions() == []  # unreachable: an empty answer, never an exception
        journal.close(timeout=2)
    assert "pw-canary" not in journal.path
    assert caplog.messages and not any("pw-canary" in m for m in caplog.messages)
    spilled = "".join(p.read_text() for p in (tmp_path / "spill").glob("*.jsonl"))
    assert "s1" in spilled and "pw-canary" not in spilled


def test_a_journal_holds_one_connection_at_most_and_none_once_idle(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from otel_lifecycle_hooks.journal import postgres

    monkeypatch.setattr(postgres, "CONNECTION_IDLE", 0.2)
    database = postgres_url.rsplit("/", 1)[1]

    def connections() -> int:
        rows = psycopg.connect(postgres_url).execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND application_name = 'otel-lifecycle-hooks'",
            (database,),
        )
        return int(rows.fetchone()[0])  # type: ignore[index]

    journal = PostgresJournal(postgres_url, spill_dir=tmp_path / "spill")
    journal.open_session("s1", agent_id="a1")
    assert journal.flush(10)
    assert journal.unfinished_sessions() == []  # the start-up read
    assert connections() == 1  # the writer's and the reader's, shared
    deadline = time.monotonic() + 60  # a hang guard
    while time.monotonic() < deadline and connections() > 0:
        time.sleep(0.1)
    assert connections() == 0  # idle: none held
    assert journal.session("s1") is not None  # a later read reconnects
    journal.heartbeat("s1")
    assert journal.flush(10)  # and so does a later write
    assert connections() <= 1
    journal.close()


def test_a_row_the_database_refuses_is_reported_and_holds_up_no_other(
    postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = PostgresJournal(postgres_url, spill_dir=tmp_path / "spill")
    rows = [
        ExecutionRow(hook="h", event="tool-start", outcome="success", started_at=1.0,
                     session_id="s", message="an agent's text with a NUL \x00 in it"),
        ExecutionRow(hook="h", event="tool-start", outcome="success", started_at=2.0,
                     session_id="s", attempts=2**40),  # beyond the INTEGER column
        ExecutionRow(hook="h", event="tool-start", outcome="success", started_at=3.0,
                     session_id="s"),
    ]  # fmt: skip
    with caplog.at_level("ERROR", logger="otel_lifecycle_hooks.journal"):
        for row in rows:
            journal.record_execution(row)
        assert journal.flush(10)
    written = journal.executions(session_id="s", oldest_first=True)
    assert [r.started_at for r in written] == [1.0, 3.0]
    assert written[0].message == "an agent's text with a NUL \ufffd in it"
    assert journal.refused == 1 and any("refused a write" in m for m in caplog.messages)
    journal.close()


def test_a_heartbeating_journal_keeps_its_one_connection(postgres_url: str, tmp_path: Path) -> None:
    database = postgres_url.rsplit("/", 1)[1]

    def backends() -> set[int]:
        with psycopg.connect(postgres_url) as db:
            rows = db.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s"
                " AND application_name = 'otel-lifecycle-hooks'",
                (database,),
            ).fetchall()
        return {int(row[0]) for row in rows}

    journal = PostgresJournal(postgres_url, spill_dir=tmp_path / "spill")
    journal.open_session("s1", agent_id="a1")
    seen: set[int] = set()
    for beat in range(15):  # as a supervisor's heartbeat, faster
        journal.heartbeat("s1", at=1000.0 + beat)
        assert journal.flush(10)
        seen |= backends()
        time.sleep(0.1)
    journal.close()
    assert len(seen) == 1  # one connection throughout: not reopened at each beat
