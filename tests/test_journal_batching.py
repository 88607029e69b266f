"""Execution rows under load are committed in batches, bounded in time and rows, and always
before other writes and on close; a row after a quiet spell is committed at once."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from otel_lifecycle_hooks.journal import ExecutionRow, Journal
from otel_lifecycle_hooks.journal import sqlite as journal_module


def row(n: int) -> ExecutionRow:
    return ExecutionRow(hook=f"hook-{n}", event="tool-start", outcome="success", started_at=1.8e9)


def committed_rows(path: Path) -> int:
    """Rows another process would see."""
    with sqlite3.connect(path) as other:
        return int(other.execute("SELECT COUNT(*) FROM executions").fetchone()[0])


def committed_rows_within(path: Path, expected: int, timeout: float) -> int:
    """Rows another process sees once `expected` are committed, or when `timeout` is up."""
    deadline = time.monotonic() + timeout
    while committed_rows(path) < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return committed_rows(path)


@pytest.fixture
def long_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # A window no test outlasts: what is visible then depends on rows and writes, not time.
    monkeypatch.setattr(journal_module, "COMMIT_AFTER_SECONDS", 60.0)


def test_a_row_after_a_quiet_spell_is_committed_at_once(tmp_path: Path):
    journal = Journal(tmp_path / "journal.db")
    try:
        journal.record_execution(row(1))
        assert committed_rows(tmp_path / "journal.db") == 1
    finally:
        journal.close()


def test_rows_that_follow_closely_wait_for_their_batch_and_close_commits_them(
    tmp_path: Path, long_window: None
):
    path = tmp_path / "journal.db"
    journal = Journal(path)
    ids = [journal.record_execution(row(n)) for n in range(5)]

    assert committed_rows(path) == 1  # the first, at once; the others wait for their batch
    assert [r.hook for r in journal.recent(limit=5)] == [f"hook-{n}" for n in reversed(range(5))]
    journal.close()
    assert committed_rows(path) == 5
    assert None not in ids


def test_a_full_batch_is_committed_without_waiting(tmp_path: Path, long_window: None):
    path = tmp_path / "journal.db"
    journal = Journal(path)
    try:
        for n in range(1 + journal_module.COMMIT_AFTER_ROWS):
            journal.record_execution(row(n))
        assert committed_rows(path) == 1 + journal_module.COMMIT_AFTER_ROWS
        journal.record_execution(row(999))
        assert committed_rows(path) == 1 + journal_module.COMMIT_AFTER_ROWS
    finally:
        journal.close()


def test_a_session_write_commits_the_batch_before_it(tmp_path: Path, long_window: None):
    path = tmp_path / "journal.db"
    journal = Journal(path)
    try:
        for n in range(3):
            journal.record_execution(row(n))
        journal.open_session("s-1", agent_id="agent")
        assert committed_rows(path) == 3
        with sqlite3.connect(path) as other:
            assert other.execute("SELECT session_id FROM sessions").fetchall() == [("s-1",)]
    finally:
        journal.close()


def test_a_waiting_batch_is_committed_within_its_window_with_no_further_row(tmp_path: Path):
    path = tmp_path / "journal.db"
    journal = Journal(path)
    try:
        for n in range(3):
            journal.record_execution(row(n))
        # The window is 100 ms; allow for a loaded machine, never hang.
        assert committed_rows_within(path, 3, 30.0) == 3
    finally:
        journal.close()


def test_a_busy_database_drops_the_row_that_could_not_start_a_batch(
    tmp_path: Path, long_window: None
):
    path = tmp_path / "journal.db"
    journal = Journal(path, busy_timeout=0.05)
    try:
        journal.record_execution(row(1))  # committed at once: the next row starts a batch
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        assert journal.record_execution(row(2)) is None
        other.execute("ROLLBACK")
        other.close()
        assert journal.record_execution(row(3)) is not None
        assert journal.healthy
    finally:
        journal.close()
    reopened = Journal(path)
    assert [r.hook for r in reopened.recent()] == ["hook-3", "hook-1"]
    reopened.close()


def test_a_failed_delivery_is_committed_at_once_with_the_batch_before_it(
    tmp_path: Path, long_window: None
):
    path = tmp_path / "journal.db"
    journal = Journal(path)
    try:
        journal.record_execution(row(1))
        journal.record_execution(row(2))  # waits for its batch
        failed = ExecutionRow(hook="notify", event="error", outcome="failed", started_at=1.8e9)
        journal.record_execution(failed)
        assert committed_rows(path) == 3
    finally:
        journal.close()


def execution(n: int, outcome: str = "success") -> SimpleNamespace:
    """The engine's execution record, as `Journal.record` (the executor's sink) reads it."""
    return SimpleNamespace(
        hook=SimpleNamespace(name=f"hook-{n}"),
        event=SimpleNamespace(name="task-completed", recovered=False),
        session_id="s-1",
        outcome=outcome,
        attempts=1,
        duration=0.002,
        started_at=1.8e9 + n,
        idempotency_key=f"key-{n}",
        status_code=None,
        exit_code=0 if outcome == "success" else 1,
        error_type=None if outcome == "success" else "exit.1",
        message="",
        request={"argv": ["notify.sh"], "env": {}},
        trace_id=None,
        span_id=None,
    )


def test_an_engine_row_joining_a_batch_is_left_to_the_commit_thread(
    tmp_path: Path, long_window: None
):
    path = tmp_path / "journal.db"
    journal = Journal(path)
    try:
        first = journal.record(execution(1))  # after a quiet spell: written and committed now
        second = journal.record(execution(2))  # joins a batch: not even inserted by the caller

        assert first is not None and second is None
        assert committed_rows(path) == 1
        # A read in this process inserts and commits it first.
        assert [r.hook for r in journal.recent()] == ["hook-2", "hook-1"]
        assert committed_rows(path) == 2
    finally:
        journal.close()


def test_a_batched_engine_row_is_committed_within_its_window_with_no_further_row(tmp_path: Path):
    path = tmp_path / "journal.db"
    journal = Journal(path)
    try:
        for n in range(3):
            journal.record(execution(n))
        # The window is 100 ms; allow for a loaded machine, never hang.
        assert committed_rows_within(path, 3, 30.0) == 3
    finally:
        journal.close()


def test_a_full_batch_of_engine_rows_is_committed_without_waiting_for_the_window(
    tmp_path: Path, long_window: None
):
    path = tmp_path / "journal.db"
    journal = Journal(path)
    try:
        journal.record(execution(0))  # at once
        journal.record(execution(1))  # opens a batch: the commit thread waits for its window
        time.sleep(0.2)  # ...long enough to be asleep on it when the batch fills
        for n in range(2, 1 + journal_module.COMMIT_AFTER_ROWS):
            journal.record(execution(n))
        deadline = time.monotonic() + 30.0  # a hang guard, half the 60 s window
        while committed_rows(path) < 1 + journal_module.COMMIT_AFTER_ROWS:
            assert time.monotonic() < deadline, "the full batch was not committed"
            time.sleep(0.02)
    finally:
        journal.close()


def test_close_writes_the_engine_rows_still_waiting(tmp_path: Path, long_window: None):
    path = tmp_path / "journal.db"
    journal = Journal(path)
    for n in range(5):
        journal.record(execution(n))

    journal.close()

    assert committed_rows(path) == 5


def test_a_failed_engine_row_is_committed_at_once_after_the_rows_before_it(
    tmp_path: Path, long_window: None
):
    path = tmp_path / "journal.db"
    journal = Journal(path)
    try:
        journal.record(execution(1))
        journal.record(execution(2))
        failed_id = journal.record(execution(3, outcome="failed"))

        assert committed_rows(path) == 3
        # Rows keep the order they were recorded in.
        assert [r.hook for r in journal.recent()] == ["hook-3", "hook-2", "hook-1"]
        stored = journal.get(failed_id) if failed_id is not None else None
        assert stored is not None and stored.hook == "hook-3"
    finally:
        journal.close()


def test_an_explicit_row_after_waiting_engine_rows_gets_the_next_id(
    tmp_path: Path, long_window: None
):
    journal = Journal(tmp_path / "journal.db")
    try:
        first = journal.record(execution(1))
        journal.record(execution(2))  # waiting
        explicit = journal.record_execution(row(3))

        assert first is not None and explicit == first + 2
        assert [r.hook for r in journal.recent()] == ["hook-3", "hook-2", "hook-1"]
    finally:
        journal.close()


def test_a_busy_database_drops_the_waiting_engine_rows_and_stays_healthy(
    tmp_path: Path, long_window: None
):
    path = tmp_path / "journal.db"
    journal = Journal(path, busy_timeout=0.05)
    try:
        journal.record(execution(1))
        journal.record(execution(2))  # waiting
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        journal.open_session("s-1")  # must write the waiting row first: busy, dropped
        other.execute("ROLLBACK")
        other.close()

        assert journal.healthy
        assert journal.record_execution(row(3)) is not None
        assert [r.hook for r in journal.recent()] == ["hook-3", "hook-1"]
    finally:
        journal.close()
