"""An owed hook that fails during recovery is not done: the session stays owed, and the next
`reconcile` pass sends it again with the same X-Scion-Hook-ID (and nothing that delivered),
against a real PostgreSQL; after `RECOVERY_PASSES` failed passes it is given up, reported."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from otel_lifecycle_hooks.supervisor.recovery import RECOVERY_PASSES
from tests.fleet.fleet import (
    HOOKS,
    body,
    deliveries,
    fleet_template,
    hook_ids,
    http_hook,
    kill_with_agent,
    query,
)
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.target_server import Reply, TargetServer

RECONCILE = [sys.executable, "-m", "otel_lifecycle_hooks", "reconcile"]


def reconcile_pass(workspace: Workspace, template: Path) -> str:
    done = subprocess.run(
        [*RECONCILE, "--template", str(template), "--stale-after", "1s"],
        env=workspace.env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def lost_session(workspace: Workspace, receiver: TargetServer, template: Path) -> str:
    """A supervisor SIGKILLed with its agent once registered; its session id."""
    agent_pid = workspace.root / "agent-lost.pid"
    run = workspace.start(template, workspace.agent_command(on_term=0, pid_file=str(agent_pid)))
    wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
    session = body(deliveries(receiver, "/register")[0])["session"]
    kill_with_agent(workspace, run, agent_pid)
    time.sleep(1.5)  # its heartbeat older than --stale-after
    return session


def test_a_deregistration_failing_in_recovery_is_sent_again_by_the_next_pass(
    workspace: Workspace, postgres_url: str
) -> None:
    with TargetServer() as receiver:
        template = fleet_template(workspace, receiver)
        session = lost_session(workspace, receiver, template)
        receiver.always("/deregister", Reply(status=503))  # the registry has a bad minute

        first = reconcile_pass(workspace, template)
        failed_ids = hook_ids(receiver, "/deregister", session)
        assert failed_ids, first  # tried (with its retries), and failed
        assert len(hook_ids(receiver, "/farewell", session)) == 1
        (row,) = query(postgres_url, "SELECT * FROM sessions WHERE session_id = %s", session)
        assert row["recovered_at"] is None, "a failed deregistration was counted as done"
        assert f"still owed: session {session}" in first

        receiver.always("/deregister", Reply(status=200))  # it is back
        second = reconcile_pass(workspace, template)
        ids = hook_ids(receiver, "/deregister", session)
        assert len(ids) == len(failed_ids) + 1, second
        assert set(ids) == {failed_ids[0]}  # the same X-Scion-Hook-ID as the failed attempts
        assert len(hook_ids(receiver, "/farewell", session)) == 1  # delivered: never again
        (row,) = query(postgres_url, "SELECT * FROM sessions WHERE session_id = %s", session)
        assert row["recovered_at"] is not None
        assert f"recovered: session {session}" in second

        third = reconcile_pass(workspace, template)  # nothing is owed any more
        assert session not in third
        assert len(hook_ids(receiver, "/deregister", session)) == len(ids)


def test_an_owed_hook_that_keeps_failing_is_given_up_after_the_bound_and_reported(
    workspace: Workspace, postgres_url: str
) -> None:
    with TargetServer() as receiver:
        template = fleet_template(workspace, receiver)
        session = lost_session(workspace, receiver, template)
        receiver.always("/deregister", Reply(status=503))
        outputs = [reconcile_pass(workspace, template) for _ in range(RECOVERY_PASSES)]
        assert all(f"still owed: session {session}" in out for out in outputs[:-1])
        assert f"given up: session {session}" in outputs[-1]
        assert "given up, marked recovered" in outputs[-1]
        (row,) = query(postgres_url, "SELECT * FROM sessions WHERE session_id = %s", session)
        assert row["recovered_at"] is not None
        assert session not in reconcile_pass(workspace, template)  # not owed any more
        rows = query(
            postgres_url,
            "SELECT outcome FROM executions WHERE session_id = %s AND hook = 'deregister'"
            " AND recovered = 1",
            session,
        )
        assert [r["outcome"] for r in rows] == ["failed"] * RECOVERY_PASSES


def horizon_template(workspace: Workspace, receiver: TargetServer) -> Path:
    """The fleet's hooks, the deregistration with `retry: {horizon: 1h}`."""
    hooks = "".join(
        http_hook(name, event, receiver.url(f"/{name}"))
        + ("    retry: {horizon: 1h}\n" if name == "deregister" else "")
        for name, event in HOOKS
    )
    return workspace.template(hooks)


def test_a_deregistration_with_a_retry_horizon_outlives_its_supervisor_and_failed_passes(
    workspace: Workspace, postgres_url: str
) -> None:
    """The supervisor's own deregistration fails at stop: with a retry horizon the session
    stays owed after it exits, past RECOVERY_PASSES failed passes (the horizon is an hour
    away), and the pass after the registry is back sends it with the session's id."""
    with TargetServer() as receiver:
        template = horizon_template(workspace, receiver)
        receiver.always("/deregister", Reply(status=503))
        ready = workspace.root / "ready"
        run = workspace.start(template, workspace.agent_command(on_term=0, ready_file=str(ready)))
        wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
        session = body(deliveries(receiver, "/register")[0])["session"]
        run.signal(signal.SIGTERM)
        assert run.wait(timeout=90) == 0, run.stderr
        assert "stays owed in the journal" in run.stderr
        live_ids = hook_ids(receiver, "/deregister", session)
        assert live_ids and len(hook_ids(receiver, "/farewell", session)) == 1
        (row,) = query(postgres_url, "SELECT * FROM sessions WHERE session_id = %s", session)
        assert row["ended_at"] is None and row["recovered_at"] is None
        time.sleep(1.5)  # its last heartbeat older than --stale-after

        for _ in range(RECOVERY_PASSES):
            out = reconcile_pass(workspace, template)
            assert f"still owed: session {session}" in out, out
        receiver.always("/deregister", Reply(status=200))
        out = reconcile_pass(workspace, template)
        assert f"recovered: session {session}" in out, out
        ids = hook_ids(receiver, "/deregister", session)
        assert set(ids) == {live_ids[0]}  # every attempt, live or recovered, under one id
        assert len(hook_ids(receiver, "/farewell", session)) == 1  # delivered: never again
        (row,) = query(postgres_url, "SELECT * FROM sessions WHERE session_id = %s", session)
        assert row["recovered_at"] is not None
