"""PostgreSQL stopped in the middle of a session: the hooks go on as before, and every journal
row is there once it is back (the supervisor's writer, or the next journal opened on the
machine, writes what was kept)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from otel_lifecycle_hooks.journal.postgres import PostgresJournal
from tests.fleet.fleet import (
    body,
    deliveries,
    fleet_template,
    hook_ids,
    kill_with_agent,
    latencies_ms,
    query,
    summary,
    tool_agent,
)
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.postgres import PostgresServer
from tests.support.target_server import Reply, TargetServer

PER_PHASE = 20


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
        run = workspace.start(
            template, tool_agent(workspace, 0, phases=plan, linger=str(workspace.root / "never"))
        )
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
        names = ("database up", "database down", "database back")
        for name, requests in zip(names, phases, strict=False):
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


def test_a_supervisor_killed_while_postgres_is_down_is_recovered_with_its_ids(
    workspace: Workspace, postgres_server: PostgresServer, postgres_url: str
) -> None:
    """Its owed events' moments never reached the database; they wait in its spill file, and
    the next run on the machine writes them before it recovers the session."""
    with TargetServer() as receiver:
        receiver.on("/farewell", Reply.hang())
        template = fleet_template(workspace, receiver)
        agent_pid = workspace.root / "agent-first.pid"
        first = workspace.start(
            template, workspace.agent_command(on_term=0, pid_file=str(agent_pid))
        )
        wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
        lost = body(deliveries(receiver, "/register")[0])["session"]
        postgres_server.stop()
        try:
            first.signal(signal.SIGTERM)
            wait_until(lambda: deliveries(receiver, "/farewell"), what="session-end")
            kill_with_agent(workspace, first, agent_pid)
        finally:
            postgres_server.start()
        (deregistered,) = hook_ids(receiver, "/deregister", lost)
        (farewell,) = hook_ids(receiver, "/farewell", lost)

        later = workspace.start(template, workspace.agent_command(exit=0))
        assert later.wait(timeout=60) == 0, later.stderr
        assert hook_ids(receiver, "/deregister", lost) == [deregistered]  # ran: not re-sent
        assert hook_ids(receiver, "/farewell", lost) == [farewell, farewell]


def test_reconcile_watching_through_an_outage_reports_it_and_recovers_after(
    workspace: Workspace, postgres_server: PostgresServer, postgres_url: str
) -> None:
    with TargetServer() as receiver:
        template = fleet_template(workspace, receiver)
        agent_pid = workspace.root / "agent-first.pid"
        first = workspace.start(
            template, workspace.agent_command(on_term=0, pid_file=str(agent_pid))
        )
        wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
        lost = body(deliveries(receiver, "/register")[0])["session"]
        kill_with_agent(workspace, first, agent_pid)
        postgres_server.stop()
        # Its stderr goes to a file, read while it runs: the database comes back only once
        # the watcher has met the outage, however long its start takes on a busy machine.
        stderr_path = workspace.root / "reconcile.stderr"
        with open(stderr_path, "w") as stderr_file:
            watcher = subprocess.Popen(
                [sys.executable, "-m", "otel_lifecycle_hooks", "reconcile", "--watch",
                 "--interval", "200ms", "--stale-after", "1s", "--template", str(template)],
                env=workspace.env, stdout=subprocess.PIPE, stderr=stderr_file, text=True,
            )  # fmt: skip

        def reported_the_outage() -> bool:
            return "cannot read the journal" in stderr_path.read_text()

        try:
            wait_until(reported_the_outage, timeout=120, what="the watcher to meet the outage")
            assert watcher.poll() is None  # still watching, the database gone
            postgres_server.start()
            wait_until(lambda: hook_ids(receiver, "/farewell", lost), what="the recovery")
        finally:
            if postgres_server.process is None:
                postgres_server.start()
            watcher.send_signal(signal.SIGTERM)
            out, _ = watcher.communicate(timeout=120)
        err = stderr_path.read_text()
        assert watcher.returncode == 0, err
        assert "cannot read the journal" in err
        assert f"recovered: session {lost}" in out
        assert len(hook_ids(receiver, "/deregister", lost)) == 1
