"""A spill file the agent plants is never a way to run SQL with the supervisor's credentials.

A PostgreSQL journal keeps writes it could not commit in spill files (`pending/<database>/*.jsonl`
under the supervisor's HOME), each line a statement and its parameters, and the next journal
opened for that database writes every file no live process holds. Where that folder is one the
agent can write (a HOME it shares), the agent plants a file: any statement in it would run with
the journal's database role. Only the statements the journal itself writes are taken; anything
else is refused and reported, and the genuine writes of the same file still go in."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from otel_lifecycle_hooks.journal.postgres import PostgresJournal, default_spill_dir
from tests.fleet.conftest import postgres_server, postgres_url  # noqa: F401 - fixtures


def test_only_the_journals_own_statements_are_written_from_a_spill_file(
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    environ = {"HOME": str(tmp_path)}
    PostgresJournal(postgres_url, environ=environ).close()  # the schema is there
    spill = default_spill_dir(postgres_url, environ)
    spill.mkdir(parents=True, exist_ok=True)
    planted = [
        ["CREATE TABLE planted_by_agent (x integer)", []],
        ["UPDATE sessions SET metadata = %s", ['{"AGENT_SLUG": "victim"}']],
        ["DELETE FROM executions; DROP TABLE attempts", []],
    ]
    genuine = PostgresJournal(postgres_url, environ={"HOME": str(tmp_path / "elsewhere")})
    genuine.open_session("s1", agent_id="a1", started_at=1.0, metadata={"AGENT_SLUG": "a1"})
    genuine.close()
    # The statement a supervisor spills for a heartbeat, exactly as it writes it.
    heartbeat = (
        "UPDATE sessions SET heartbeat_at = %s WHERE session_id = %s"
        " AND (heartbeat_at IS NULL OR heartbeat_at < %s)"
    )
    lines = [*planted, [heartbeat, [5.0, "s1", 5.0]]]
    (spill / "planted.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))

    journal = PostgresJournal(postgres_url, environ=environ)
    try:
        journal.unfinished_sessions()  # recovery's read waits for adopted files to be written
        row = journal.session("s1")
    finally:
        journal.close()

    assert row is not None and row.heartbeat_at == 5.0  # the journal's own statement went in
    assert row.metadata == {"AGENT_SLUG": "a1"}
    assert journal.refused == len(planted)
    with psycopg.connect(postgres_url) as db:
        tables = {r[0] for r in db.execute("SELECT tablename FROM pg_tables")}
    assert "planted_by_agent" not in tables and "attempts" in tables
