"""The SQLite execution journal: what it keeps, and how it fails without stopping hooks."""

from __future__ import annotations

import logging
import sqlite3
import stat
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from otel_lifecycle_hooks.journal import (
    SCHEMA_VERSION,
    ExecutionRow,
    Journal,
    default_journal_path,
)

LOGGER = "otel_lifecycle_hooks.journal"


def row(hook: str = "register-agent", outcome: str = "success", **fields) -> ExecutionRow:
    values = {"event": "post-start", "started_at": 1_800_000_000.0}
    values.update(fields)
    return ExecutionRow(hook=hook, outcome=outcome, **values)


@pytest.fixture
def journal(tmp_path: Path):
    journal = Journal(tmp_path / "state" / "journal.sqlite3")
    yield journal
    journal.close()


def test_a_row_round_trips_with_every_field(journal: Journal):
    original = ExecutionRow(
        hook="register-agent",
        event="post-start",
        outcome="failed",
        started_at=1_800_000_000.25,
        attempts=4,
        duration_ms=7012.5,
        session_id="s-1",
        agent_id="agent-7",
        http_status=503,
        exit_code=None,
        error_type="http.503",
        message="HTTP 503 Service Unavailable",
        trace_id="0af7651916cd43dd8448eb211c80319c",
        span_id="b7ad6b7169203331",
        idempotency_key="agent-7:register-agent:post-start:1800000000",
        request={
            "method": "POST",
            "url": "https://hub/agents",
            "headers": {"Authorization": "[REDACTED]"},
        },
        recovered=True,
        replayed_from=None,
    )

    new_id = journal.record_execution(original)

    assert isinstance(new_id, int)
    assert journal.get(new_id) == original._replace(id=new_id)
    assert journal.get(new_id + 1000) is None


def test_the_file_is_created_with_its_directories_in_wal_mode_and_private(tmp_path: Path):
    path = tmp_path / "a" / "b" / "journal.sqlite3"

    Journal(path).close()

    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_reopening_keeps_the_rows(tmp_path: Path):
    path = tmp_path / "journal.sqlite3"
    first = Journal(path)
    first.record_execution(row())
    first.close()

    second = Journal(path)
    assert [r.hook for r in second.recent()] == ["register-agent"]
    second.close()


def test_recent_is_newest_first_limited_and_filterable_by_hook(journal: Journal):
    for index in range(5):
        journal.record_execution(row("notify", message=f"n{index}"))
        journal.record_execution(row("register-agent", message=f"r{index}"))

    assert [r.message for r in journal.recent(limit=3)] == ["r4", "n4", "r3"]
    assert [r.message for r in journal.recent("notify", limit=2)] == ["n4", "n3"]
    assert journal.recent("nothing") == []


def test_failed_lists_failures_and_timeouts_oldest_first_since_a_time(journal: Journal):
    journal.record_execution(row(outcome="failed", started_at=100.0, message="old"))
    journal.record_execution(row(outcome="success", started_at=200.0))
    journal.record_execution(row(outcome="timeout", started_at=300.0, message="slow"))
    journal.record_execution(row(outcome="skipped", started_at=400.0))
    journal.record_execution(row(outcome="failed", started_at=500.0, message="new"))

    assert [r.message for r in journal.failed()] == ["old", "slow", "new"]
    assert [r.message for r in journal.failed(since=300.0)] == ["slow", "new"]


def test_a_replay_links_to_the_row_it_re_sent(journal: Journal):
    original = journal.record_execution(row(outcome="failed"))

    replay = journal.record_execution(row(outcome="success", replayed_from=original))

    assert replay is not None and journal.get(replay).replayed_from == original


def test_an_id_past_64_bits_or_a_negative_limit_reads_as_nothing_never_raises(
    journal: Journal,
):
    journal.record_execution(row())

    assert journal.get(2**63) is None
    assert journal.executions(after_id=2**70) == []
    assert journal.recent(limit=-1) == [] and journal.sessions(limit=-1) == []
    assert journal.healthy


def test_a_replay_link_the_file_holds_as_text_is_not_taken_for_an_id(journal: Journal):
    original = journal.record_execution(row(outcome="failed"))
    journal.record_execution(row(outcome="success", replayed_from=original))
    journal.close()
    with sqlite3.connect(journal.path) as db:  # as an agent that can write the file would
        db.execute("INSERT INTO executions (hook, event, outcome, started_at, replayed_from)"
                   " VALUES ('x', 'post-start', 'success', 0, 'forged')")  # fmt: skip
    reopened = Journal(journal.path)

    assert reopened.delivered_by_replay() == {original}
    reopened.close()


def test_record_reads_the_engines_execution_record(journal: Journal):
    execution = SimpleNamespace(
        hook=SimpleNamespace(name="cleanup"),
        event=SimpleNamespace(name="session-end", recovered=True),
        session_id="s-9",
        outcome="timeout",
        attempts=1,
        duration=2.5,
        started_at=42.0,
        idempotency_key="a:cleanup:session-end:42",
        status_code=None,
        exit_code=None,
        error_type="timeout",
        message="still running after 2s",
        request={"argv": ["cleanup.sh"]},
        trace_id=None,
        span_id=None,
    )

    stored = journal.get(journal.record(execution))

    assert stored is not None
    assert (stored.hook, stored.event, stored.session_id) == ("cleanup", "session-end", "s-9")
    assert (stored.duration_ms, stored.recovered, stored.request) == (
        2500.0,
        True,
        {"argv": ["cleanup.sh"]},
    )


class _NamedSpec:
    """A hook or event spec whose repr must never be built: the journal only needs its name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        raise AssertionError("the journal built a spec's repr")


def test_record_takes_only_the_names_of_the_hook_and_event(journal: Journal):
    execution = SimpleNamespace(
        hook=_NamedSpec("notify"),
        event=_NamedSpec("task-completed"),
        session_id="s-1",
        outcome="failed",
        attempts=1,
        duration=0.1,
        started_at=42.0,
        idempotency_key="k",
        status_code=None,
        exit_code=1,
        error_type="exit.1",
        message="exited with code 1",
        request=None,
        trace_id=None,
        span_id=None,
    )

    stored = journal.get(journal.record(execution))

    assert stored is not None and (stored.hook, stored.event) == ("notify", "task-completed")


def test_a_session_that_reached_post_start_and_never_ended_is_unfinished(journal: Journal):
    journal.open_session(
        "crashed",
        agent_id="a1",
        agent_name="coder",
        template_files=["base.yaml", "child.yaml"],
        pid=4242,
        started_at=10.0,
    )
    journal.mark_post_start("crashed", at=11.0)
    journal.open_session("clean", agent_id="a1", started_at=20.0)
    journal.mark_post_start("clean", at=21.0)
    journal.close_session("clean", exit_code=0, at=30.0)
    journal.open_session("never-started", agent_id="a1", started_at=40.0)
    journal.open_session("other-agent", agent_id="a2", started_at=50.0)
    journal.mark_post_start("other-agent")

    (unfinished,) = journal.unfinished_sessions("a1")

    assert unfinished.session_id == "crashed"
    assert unfinished.template_files == ("base.yaml", "child.yaml")
    assert (unfinished.pid, unfinished.started_at, unfinished.post_started_at) == (4242, 10.0, 11.0)
    clean = journal.session("clean")
    assert clean is not None and (clean.ended_at, clean.exit_code) == (30.0, 0)


def test_a_recovered_session_is_not_recovered_twice(journal: Journal):
    journal.open_session("crashed", agent_id="a1")
    journal.mark_post_start("crashed")

    journal.mark_recovered("crashed")

    assert journal.unfinished_sessions("a1") == []


def test_concurrent_writers_lose_nothing(journal: Journal):
    threads_count, per_thread = 8, 50
    ids: list[int | None] = []
    ids_lock = threading.Lock()

    def write(worker: int) -> None:
        for index in range(per_thread):
            new_id = journal.record_execution(row(f"hook-{worker}", message=str(index)))
            with ids_lock:
                ids.append(new_id)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert None not in ids and len(set(ids)) == threads_count * per_thread
    assert len(journal.recent(limit=1000)) == threads_count * per_thread
    assert journal.healthy


def test_two_journals_on_one_file_share_it(tmp_path: Path):
    # The supervisor writes while the CLI reads, from another process: two connections here.
    path = tmp_path / "journal.sqlite3"
    writer, reader = Journal(path), Journal(path)

    writer.record_execution(row("notify"))

    assert [r.hook for r in reader.recent()] == ["notify"]
    writer.close()
    reader.close()


def test_a_busy_database_drops_one_write_and_stays_healthy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    path = tmp_path / "journal.sqlite3"
    journal = Journal(path, busy_timeout=0.1)
    other_process = sqlite3.connect(path, isolation_level=None)
    other_process.execute("BEGIN IMMEDIATE")  # holds the write lock

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        dropped = journal.record_execution(row(message="dropped"))
    other_process.execute("ROLLBACK")
    other_process.close()
    kept = journal.record_execution(row(message="kept"))

    assert dropped is None and kept is not None
    assert journal.healthy
    assert [r.message for r in journal.recent()] == ["kept"]
    assert "busy" in caplog.text
    journal.close()


def test_a_corrupt_file_is_reported_once_and_the_journal_becomes_a_no_op(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    path = tmp_path / "journal.sqlite3"
    path.write_bytes(b"this is not a database, just garbage bytes " * 200)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        journal = Journal(path)
        assert journal.record_execution(row()) is None
        assert journal.recent() == [] and journal.failed() == [] and journal.get(1) is None
        journal.open_session("s")
        journal.mark_post_start("s")
        assert journal.unfinished_sessions("") == []

    assert not journal.healthy
    reports = [r for r in caplog.records if r.name == LOGGER]
    assert len(reports) == 1
    assert str(path) in reports[0].getMessage()


def test_a_full_disk_is_reported_once_and_the_journal_becomes_a_no_op(
    journal: Journal, caplog: pytest.LogCaptureFixture
):
    journal.record_execution(row(message="fits"))
    # SQLite's own ceiling on the file's pages yields a genuine SQLITE_FULL on the next growth.
    db = journal._db
    assert db is not None
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        results = [journal.record_execution(row(message="x" * 20_000)) for _ in range(3)]

    assert results == [None, None, None]
    assert not journal.healthy
    reports = [r for r in caplog.records if r.name == LOGGER]
    assert len(reports) == 1 and "full" in reports[0].getMessage()


def test_a_journal_written_by_a_newer_version_is_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    path = tmp_path / "journal.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        journal = Journal(path)

    assert not journal.healthy
    assert journal.record_execution(row()) is None
    assert "newer" in caplog.text


def test_an_unusable_directory_disables_the_journal(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where a directory should be")

    journal = Journal(blocker / "journal.sqlite3")

    assert not journal.healthy and journal.record_execution(row()) is None


def test_default_path_honours_the_override_then_home(tmp_path: Path):
    assert default_journal_path({"OTEL_LIFECYCLE_HOOKS_JOURNAL": "/x/j.db", "HOME": "/h"}) == Path(
        "/x/j.db"
    )
    assert default_journal_path({"LIFECYCLE_HOOKS_JOURNAL": "/n/j.db", "HOME": "/h"}) == Path(
        "/n/j.db"
    )
    both = {"LIFECYCLE_HOOKS_JOURNAL": "/new.db", "OTEL_LIFECYCLE_HOOKS_JOURNAL": "/old.db"}
    assert default_journal_path(both) == Path("/new.db")  # the new name first
    assert default_journal_path({"HOME": "/home/agent"}) == Path(
        "/home/agent/.local/state/otel-lifecycle-hooks/journal.sqlite3"
    )
