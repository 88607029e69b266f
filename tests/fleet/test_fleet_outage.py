"""PostgreSQL stopped in the middle of a session: the hooks go on as before, and every journal
row is there once it is back (the supervisor's writer, or the next journal opened on the
machine, writes what was kept)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.journal.postgres import PostgresJournal
from tests.fleet.fleet import (
    body,
    deliveries,
    fleet_template,
    latencies_ms,
    query,
    summary,
    tool_agent,
)
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.postgres import PostgresServer
from tests.support.target_server import TargetServer

PER_PHASE = 20


@pytest.fixture
def workspace(tmp_path: Path, postgres_url: str) -> Iterator[Workspace]:
    space = Workspace(tmp_path)
    space.env["OTEL_LIFECYCLE_HOOKS_JOURNAL"] = postgres_url
    space.env["OTEL_LIFECYCLE_HOOKS_HEARTBEAT"] = "200ms"
    yield space
    space.cleanup()


def test_postgres_down_mid_session_delays_no_hook_and_loses_no_row(
    workspace: Workspace, postgres_server: PostgresServer, postgres_url: str
) -> None:
    with TargetServer() as receiver:
        template = fleet_template(workspace, receiver, tools=True)
        down, back = workspace.root / "down", workspace.root / "back"
        plan = [
            {"count": PER_PHASE, "rate": 20},
            {"count": PER_PHASE, "rate": 20, "wait_for": str(down)},
            {"count": PER_PHASE, "rate": 20, "wait_for": str(back)},
        ]
        run = workspace.start(template, tool_agent(workspace, 0, phases=plan, linger=str(back)))
        wait_until(lambda: len(deliveries(receiver, "/tool")) == PER_PHASE, what="phase one")
        postgres_server.stop()
        try:
            down.touch()
            # Every hook still arrives while the journal's database is gone.
            wait_until(
                lambda: len(deliveries(receiver, "/tool")) == 2 * PER_PHASE, what="phase two"
            )
        finally:
            postgres_server.start()
        back.touch()
        wait_until(lambda: len(deliveries(receiver, "/tool")) == 3 * PER_PHASE, what="phase three")
        run.signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 0, run.stderr
        tools = deliveries(receiver, "/tool")
        phases = [tools[:PER_PHASE], tools[PER_PHASE : 2 * PER_PHASE], tools[2 * PER_PHASE :]]
        print("\nsend-to-receipt latency of tool-start hooks:")
        for name, requests in zip(("database up", "database down", "database back"), phases):
            print(f"  {name:14} {summary(latencies_ms(requests))}")
        session = body(tools[0])["session"]
        assert [d for d in deliveries(receiver, "/deregister") if body(d)["session"] == session]

    # Whatever the supervisor could not write before it exited waits on this machine; a
    # journal opened here for the same database writes it.
    late = PostgresJournal(postgres_url, environ={"HOME": str(workspace.home)})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and late.pending() == 0:
        rows = query(
            postgres_url,
            "SELECT count(*) AS n FROM executions WHERE session_id = %s AND hook = 'tool'",
            session,
        )
        if rows[0]["n"] == 3 * PER_PHASE:
            break
        time.sleep(0.1)
    late.close()
    counted = query(
        postgres_url,
        "SELECT hook, count(*) AS n FROM executions WHERE session_id = %s GROUP BY hook",
        session,
    )
    assert {row["hook"]: row["n"] for row in counted} == {
        "tool": 3 * PER_PHASE, "register": 1, "deregister": 1, "farewell": 1,
    }  # fmt: skip
    (row,) = query(postgres_url, "SELECT * FROM sessions WHERE session_id = %s", session)
    assert row["ended_at"] is not None and row["exit_code"] == 0
    assert not list((workspace.home / ".local/state/otel-lifecycle-hooks/pending").rglob("*.jsonl"))
