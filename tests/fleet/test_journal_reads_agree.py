"""The SQLite and PostgreSQL journals answer every read alike: the same rows, in the same order,
and the same health afterwards, given the same writes. Each call below runs on both against a
real server (the fleet's), including the edges where the two databases' own rules differ (a
negative LIMIT, an id past 64 bits, a NUL in a parameter, rows that tie on their sort key)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.journal import AttemptRow, ExecutionRow, open_journal
from otel_lifecycle_hooks.journal.base import Journal
from tests.support.postgres import PostgresServer

BEYOND_64_BITS = 2**63


def _fill(journal: Journal) -> None:
    """Six executions over three sessions and two agents, each with an attempt; three
    sessions, two of them starting at the same moment and both past post-start."""
    for i in range(6):
        row = ExecutionRow(
            hook=f"hook-{i % 2}",
            event="session-end" if i % 3 == 0 else "pre-start",
            outcome=("success", "failed", "timeout")[i % 3],
            started_at=1_000.0 + i // 2,
            session_id=f"s{i % 3}",
            agent_id=f"a{i % 2}",
            idempotency_key=f"k{i}",
            request={"method": "POST", "url": "http://127.0.0.1:9/"},
            replayed_from=1 if i == 4 else None,
            row_uid=f"u{i}",
        )
        journal.record_execution(row, (AttemptRow(1, 1_000.0, row.outcome),))
    for s in range(3):
        journal.open_session(f"s{s}", agent_id="a0", started_at=500.0 + s // 2, host="h")
    journal.begin_event("s0", "post-start", 600.0)
    journal.begin_event("s1", "post-start", 600.0)
    assert journal.flush()


@pytest.fixture(scope="module")
def journals(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Journal]]:
    if postgres_server.process is None or postgres_server.process.poll() is not None:
        postgres_server.start()
    folder: Path = tmp_path_factory.mktemp("reads")
    both = {
        "sqlite": open_journal(folder / "journal.sqlite3"),
        "postgresql": open_journal(postgres_server.new_database(), spill_dir=folder / "spill"),
    }
    for journal in both.values():
        _fill(journal)
    yield both
    for journal in both.values():
        journal.close()


READS: dict[str, Callable[[Journal], object]] = {
    "recent": lambda j: j.recent(),
    "recent of one hook": lambda j: j.recent("hook-0", 2),
    "recent, no rows asked": lambda j: j.recent(limit=0),
    "recent, a negative limit": lambda j: j.recent(limit=-1),
    "recent, a NUL in the hook's name": lambda j: j.recent("hook\x00-0"),
    "failed": lambda j: j.failed(),
    "failed since": lambda j: j.failed(1_001.0),
    "get": lambda j: j.get(1),
    "get, an unknown id": lambda j: j.get(99),
    "get, an id past 64 bits": lambda j: j.get(BEYOND_64_BITS),
    "attempts": lambda j: j.attempts("u1"),
    "attempts, no uid": lambda j: j.attempts(None),
    "delivered by replay": lambda j: j.delivered_by_replay(),
    "executions by outcome, oldest first": lambda j: j.executions(
        outcomes=("failed",), oldest_first=True
    ),
    "executions of agents": lambda j: j.executions(agent_id=["a0"], limit=2),
    "executions of no agent": lambda j: j.executions(agent_id=[]),
    "executions after an id": lambda j: j.executions(after_id=3),
    "executions after an id past 64 bits": lambda j: j.executions(after_id=BEYOND_64_BITS),
    "executions, a negative limit": lambda j: j.executions(limit=-5),
    "newest id beyond 0": lambda j: j.newest_id_beyond(0),
    "newest id beyond 2": lambda j: j.newest_id_beyond(2),
    "newest id beyond all": lambda j: j.newest_id_beyond(6),
    "newest id beyond -1": lambda j: j.newest_id_beyond(-1),
    "session counts": lambda j: j.session_counts(["s0", "s1", "unknown"]),
    "session counts of none": lambda j: j.session_counts([]),
    "sessions, two starting together": lambda j: j.sessions(),
    "sessions of an agent": lambda j: j.sessions("a0", 2),
    "sessions, a negative limit": lambda j: j.sessions(limit=-1),
    "session": lambda j: j.session("s0"),
    "session, a NUL in its id": lambda j: j.session("s\x000"),
    "unfinished sessions, two starting together": lambda j: j.unfinished_sessions(),
    "unfinished sessions of an agent": lambda j: j.unfinished_sessions("a0"),
}


@pytest.mark.parametrize("read", list(READS), ids=list(READS))
def test_both_journals_answer_a_read_alike(journals: dict[str, Journal], read: str) -> None:
    answers = {name: READS[read](journal) for name, journal in journals.items()}
    health = {name: journal.healthy for name, journal in journals.items()}
    assert answers["sqlite"] == answers["postgresql"]
    assert health == {"sqlite": True, "postgresql": True}
