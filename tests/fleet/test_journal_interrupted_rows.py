"""An interrupted delivery reads as one form, `interrupted` (outcome and error type), in
journals written before there was one: an earlier release journaled it as `failed` (or
`timeout`) with error type `interrupted` when its own run recorded the interruption, and as
`interrupted` with error type `Interrupted` when the shutdown did. Those rows stay as written;
every reader (the rows, the outcome filters of `history` and the page, the failure counts,
`replay`'s selection) reads them as today's, on SQLite and on a real PostgreSQL server alike."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from otel_lifecycle_hooks.cli.main import main as cli_main
from otel_lifecycle_hooks.journal import ExecutionRow, open_journal
from otel_lifecycle_hooks.journal.base import Journal
from otel_lifecycle_hooks.journal.rows import INSERT_EXECUTION, execution_values
from otel_lifecycle_hooks.journal.views import list_executions, list_sessions
from otel_lifecycle_hooks.replay import Replayer
from tests.support.postgres import PostgresServer

# (hook, outcome, error type) as each was written.
WRITTEN = [
    ("run-cut-short", "failed", "interrupted"),  # an earlier release, its run recorded it
    ("run-cut-short-timing-out", "timeout", "interrupted"),  # the same, a timed-out attempt
    ("shutdown-gave-up", "interrupted", "Interrupted"),  # an earlier release, the shutdown
    ("interrupted-today", "interrupted", "interrupted"),
    ("failed", "failed", "http.503"),
    ("failed-untyped", "failed", None),
    ("timed-out", "timeout", "timeout"),
    ("dropped", "dropped", "NotDelivered"),
    ("delivered", "success", None),
]
INTERRUPTED = {"run-cut-short", "run-cut-short-timing-out", "shutdown-gave-up", "interrupted-today"}


def _write_as_an_earlier_release(location: str) -> None:
    """The rows above, inserted with plain SQL (no code of this release between)."""
    rows = [
        ExecutionRow(
            hook=hook,
            event="session-end",
            outcome=outcome,
            error_type=error_type,
            started_at=time.time() - 60,
            session_id="s1",
            agent_id="a1",
            idempotency_key=f"a1:{hook}:session-end:1",
            row_uid=f"uid-{hook}",
            request={"method": "POST", "url": "http://127.0.0.1:9/", "headers": {}, "body": "{}"},
        )
        for hook, outcome, error_type in WRITTEN
    ]
    if location.startswith("postgresql://"):
        with psycopg.connect(location, autocommit=True) as db:
            for row in rows:
                db.execute(INSERT_EXECUTION.replace("?", "%s"), execution_values(row))
        return
    with closing(sqlite3.connect(location)) as db, db:
        db.executemany(INSERT_EXECUTION, [execution_values(row) for row in rows])


@pytest.fixture(params=["sqlite", "postgresql"])
def location(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_server: PostgresServer
) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "journal.sqlite3")
    if postgres_server.process is None or postgres_server.process.poll() is not None:
        postgres_server.start()
    return postgres_server.new_database()


@pytest.fixture
def journal(location: str, tmp_path: Path) -> Iterator[Journal]:
    opened = open_journal(location, spill_dir=tmp_path / "spill")
    assert opened.sessions() == [] and opened.healthy  # its first use made the schema
    _write_as_an_earlier_release(location)
    yield opened
    opened.close()


def _hooks(rows: list[ExecutionRow]) -> set[str]:
    return {row.hook for row in rows}


def test_earlier_forms_of_an_interrupted_delivery_read_as_todays(journal: Journal) -> None:
    read = {row.hook: (row.outcome, row.error_type) for row in journal.executions()}
    assert read == {
        **{hook: (outcome, error_type) for hook, outcome, error_type in WRITTEN},
        **{hook: ("interrupted", "interrupted") for hook in INTERRUPTED},
    }
    [one] = journal.executions(hook="run-cut-short")
    assert one.id is not None
    got = journal.get(one.id)
    assert got is not None and (got.outcome, got.error_type) == ("interrupted", "interrupted")
    assert journal.healthy


def test_an_outcome_filter_finds_each_row_under_the_outcome_it_reads_as(journal: Journal) -> None:
    assert _hooks(journal.executions(outcomes=("interrupted",))) == INTERRUPTED
    assert _hooks(journal.executions(outcomes=("failed",))) == {"failed", "failed-untyped"}
    assert _hooks(journal.executions(outcomes=("timeout",))) == {"timed-out"}
    assert _hooks(journal.executions(outcomes=("failed", "interrupted"))) == {
        "failed", "failed-untyped", *INTERRUPTED,
    }  # fmt: skip
    # What did not deliver, for `history --failed`, the page's `failures` and `replay`.
    undelivered = {hook for hook, outcome, _ in WRITTEN if outcome != "success"}
    assert _hooks(journal.failed()) == undelivered
    shown = list_executions(journal, outcomes=["interrupted"])
    assert {d["hook"] for d in shown} == INTERRUPTED
    assert all(d["replayable"] and d["outcome"] == "interrupted" for d in shown)
    journal.open_session("s1", agent_id="a1", agent_name="agent")
    assert journal.flush()
    [session] = list_sessions(journal)
    assert (session["deliveries"], session["failed"]) == (len(WRITTEN), len(undelivered))


def test_replay_selects_earlier_interrupted_rows_as_interrupted(journal: Journal) -> None:
    replayer = Replayer(journal)
    chosen = replayer.select(all_failed=True, outcomes=["interrupted"])
    assert {row.hook for row in chosen if isinstance(row, ExecutionRow)} == INTERRUPTED
    chosen = replayer.select(all_failed=True, outcomes=["failed"])
    assert {row.hook for row in chosen if isinstance(row, ExecutionRow)} == {
        "failed", "failed-untyped",
    }  # fmt: skip


def test_history_shows_and_filters_earlier_interrupted_rows_as_interrupted(
    journal: Journal, location: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_main(["history", "--status", "interrupted", "--json", "--journal", location])
    out, err = capsys.readouterr()
    assert code == 0, err
    shown = json.loads(out)
    assert {(d["hook"], d["outcome"], d["error_type"]) for d in shown} == {
        (hook, "interrupted", "interrupted") for hook in INTERRUPTED
    }
