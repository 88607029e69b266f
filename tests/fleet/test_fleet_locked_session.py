"""A frozen node never stalls recovery: a session whose row another connection holds locked
(a supervisor frozen inside its write transaction) is skipped by `reconcile`, said so, and
recovered once the lock goes; and a supervisor's own write transaction left idle (its process
frozen) is ended by the database, so that its locks go by themselves."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from otel_lifecycle_hooks.journal.postgres import PostgresJournal
from tests.fleet.fleet import fleet_template, hook_ids, kill_with_agent, query, sessions_at
from tests.fleet.test_fleet_reconcile import reconcile
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.target_server import TargetServer

HANG_GUARD = 30  # seconds: far longer than a pass takes, far shorter than "forever"


def _lost_session(workspace: Workspace, receiver: TargetServer) -> tuple[Path, str]:
    """A supervisor killed with its agent after its registration: its template, its session."""
    template = fleet_template(workspace, receiver)
    pid_file = workspace.root / "agent.pid"
    run = workspace.start(template, workspace.agent_command(on_term=0, pid_file=str(pid_file)))
    wait_until(lambda: len(sessions_at(receiver, "/register")) == 1, what="the registration")
    (session,) = sessions_at(receiver, "/register")
    kill_with_agent(workspace, run, pid_file)
    time.sleep(1.5)  # its last heartbeat grows older than --stale-after
    return template, session


def _pass(workspace: Workspace, template: Path) -> tuple[str, str]:
    process = reconcile(workspace, template, "--stale-after", "1s")
    try:
        out, err = process.communicate(timeout=HANG_GUARD)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"reconcile still waiting after {HANG_GUARD}s on a locked session")
    assert process.returncode == 0, err
    return out, err


def test_a_session_locked_by_another_connection_is_skipped_reported_and_recovered_later(
    workspace: Workspace, receiver: TargetServer, postgres_url: str
) -> None:
    template, session = _lost_session(workspace, receiver)
    with psycopg.connect(postgres_url) as holder:  # a transaction left open, as a frozen node's
        holder.execute("SELECT 1 FROM sessions WHERE session_id = %s FOR UPDATE", (session,))
        out, err = _pass(workspace, template)
        assert f"recovered: session {session}" not in out
        assert session in err and "locked" in err, err
        assert hook_ids(receiver, "/deregister", session) == []
        holder.rollback()
    out, _ = _pass(workspace, template)  # the next pass, the lock gone
    assert f"recovered: session {session}" in out, out
    assert len(hook_ids(receiver, "/deregister", session)) == 1


def test_a_supervisor_frozen_inside_its_write_transaction_loses_its_locks_to_the_database(
    workspace: Workspace, receiver: TargetServer, postgres_url: str
) -> None:
    """The journal's writer stops (as its process would, SIGSTOP) after its statement, with
    the transaction open: the database ends it, and one reconcile pass recovers the session."""
    template, session = _lost_session(workspace, receiver)
    (row,) = query(postgres_url, "SELECT heartbeat_at FROM sessions WHERE session_id = %s", session)
    frozen, thaw = threading.Event(), threading.Event()
    journal = PostgresJournal(postgres_url, spill_dir=workspace.root / "spill")
    original = journal._write_batch

    class FrozenAtCommit:
        """The journal's connection, but a transaction stops before its commit."""

        def __init__(self, db: Any) -> None:
            self.db = db

        def __getattr__(self, name: str) -> Any:
            return getattr(self.db, name)

        @contextlib.contextmanager
        def transaction(self) -> Iterator[Any]:
            with self.db.transaction() as transaction:
                yield transaction
                frozen.set()
                thaw.wait(HANG_GUARD * 2)

    def freeze_inside(db: Any, batch: Any) -> None:
        original(FrozenAtCommit(db), batch)

    journal._write_batch = freeze_inside  # type: ignore[method-assign]
    try:
        # A beat a microsecond later than its last: still stale, and the row is locked.
        journal.heartbeat(session, at=row["heartbeat_at"] + 0.000001)
        wait_until(frozen.is_set, what="the writer inside its transaction")
        out, err = _pass(workspace, template)
        assert f"recovered: session {session}" in out, err
        assert len(hook_ids(receiver, "/deregister", session)) == 1
    finally:
        thaw.set()
        journal._write_batch = original  # type: ignore[method-assign]
        journal.close(timeout=1.0)
