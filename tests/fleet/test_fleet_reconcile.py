"""Supervisors sharing one real PostgreSQL journal, and `reconcile` run from elsewhere.

Two agents run; one supervisor is SIGKILLed after its registration (its agent goes too, as a
pod's would). `reconcile` sends that session's deregistration and session-end once, with the
X-Scion-Hook-ID the session's journaled moment gives, even with two reconcilers started at
once, and never touches the session that is still alive."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from otel_lifecycle_hooks.variables import format_unix_timestamp
from tests.fleet.fleet import (
    deliveries,
    fleet_template,
    hook_ids,
    kill_with_agent,
    query,
    sessions_at,
)
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.target_server import Reply, TargetServer

RECONCILE = [sys.executable, "-m", "otel_lifecycle_hooks", "reconcile"]


def reconcile(workspace: Workspace, template: Path, *options: str) -> subprocess.Popen[str]:
    """`reconcile --template TEMPLATE OPTIONS...`: owed hooks render only from a named one."""
    return subprocess.Popen(
        [*RECONCILE, "--template", str(template), *options],
        env=workspace.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return out


def session_of_agent(receiver: TargetServer, agent: str) -> str:
    (request,) = [
        r for r in deliveries(receiver, "/register") if json.loads(r.body)["agent"] == agent
    ]
    return str(json.loads(request.body)["session"])


def rfc3339(unix: float) -> str:
    """A journaled moment as `${TIMESTAMP}` shows it."""
    return format_unix_timestamp(unix)


def test_reconcile_deregisters_a_killed_agent_once_and_leaves_the_live_one(
    workspace: Workspace, receiver: TargetServer, postgres_url: str
) -> None:
    template = fleet_template(workspace, receiver)
    agent_pid = workspace.root / "agent-alpha.pid"
    killed = workspace.start(
        template,
        workspace.agent_command(on_term=0, pid_file=str(agent_pid)),
        "--agent-name",
        "alpha",
    )
    alive = workspace.start(template, workspace.agent_command(on_term=0), "--agent-name", "beta")
    wait_until(lambda: len(sessions_at(receiver, "/register")) == 2, what="both registrations")
    lost = session_of_agent(receiver, "alpha")
    live = session_of_agent(receiver, "beta")
    kill_with_agent(workspace, killed, agent_pid)  # its pod goes
    time.sleep(1.5)  # alpha's last heartbeat grows older than --stale-after; beta keeps beating

    dry = finished(reconcile(workspace, template, "--stale-after", "1s", "--dry-run", "--json"))
    plans = {entry["session"]: entry for entry in map(json.loads, dry.splitlines())}
    assert plans[lost]["action"] == "would recover"
    assert plans[live]["action"] == "left alone"
    assert deliveries(receiver, "/deregister") == []  # a dry run sends nothing

    both = [reconcile(workspace, template, "--stale-after", "1s") for _ in range(2)]
    outputs = [finished(process) for process in both]
    finished(reconcile(workspace, template, "--stale-after", "1s"))  # a third finds nothing owed

    (row,) = query(postgres_url, "SELECT * FROM sessions WHERE session_id = %s", lost)
    agent_id = json.loads(row["metadata"])["AGENT_ID"]
    assert hook_ids(receiver, "/deregister", lost) == [
        f"{agent_id}:deregister:pre-stop:{rfc3339(row['pre_stop_at'])}"
    ]
    assert hook_ids(receiver, "/farewell", lost) == [
        f"{agent_id}:farewell:session-end:{rfc3339(row['session_end_at'])}"
    ]
    assert row["recovered_at"] is not None
    assert sum("recovered: session " + lost in out for out in outputs) == 1
    assert hook_ids(receiver, "/deregister", live) == []  # alive: never reconciled

    alive.signal(signal.SIGTERM)
    assert alive.wait(timeout=120) == 0, alive.stderr
    assert len(hook_ids(receiver, "/deregister", live)) == 1  # its own, once
    recovered_rows = query(
        postgres_url,
        "SELECT hook FROM executions WHERE session_id = %s AND recovered = 1 ORDER BY id",
        lost,
    )
    assert [r["hook"] for r in recovered_rows] == ["deregister", "farewell"]


def test_history_and_replay_read_every_agent_of_the_shared_journal(
    workspace: Workspace, receiver: TargetServer, postgres_url: str
) -> None:
    template = fleet_template(workspace, receiver)
    for name in ("alpha", "beta"):
        run = workspace.start(template, workspace.agent_command(exit=0), "--agent-name", name)
        assert run.wait(timeout=120) == 0, run.stderr
    history = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "history", "--json", "--limit", "50"],
        env=workspace.env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    rows = json.loads(history.stdout)
    assert {row["agent_id"] for row in rows if row["hook"] == "register"} == {
        json.loads(s["metadata"])["AGENT_ID"]
        for s in query(postgres_url, "SELECT metadata FROM sessions")
    }
    alpha_session = session_of_agent(receiver, "alpha")
    one = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "history", "--json",
         "--session", alpha_session, "--hook", "register", "--status", "success", "--since", "1h"],
        env=workspace.env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    (only,) = json.loads(one.stdout)
    assert (only["session_id"], only["hook"], only["outcome"]) == (
        alpha_session,
        "register",
        "success",
    )


def test_reconcile_uses_the_sessions_variables_and_its_own_secrets_never_stored(
    workspace: Workspace, receiver: TargetServer, postgres_url: str
) -> None:
    template = workspace.template(
        "  - name: register\n"
        "    on: [post-start]\n"
        "    blocking: true\n"
        f'    action: {{type: http, url: "{receiver.url("/register")}",'
        ' body: \'{"session": "${SESSION_ID}", "agent": "${AGENT_NAME}"}\'}\n'
        "  - name: deregister\n"
        "    on: [pre-stop]\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{receiver.url("/${REGISTRY_PATH}/deregister")}"\n'
        "      auth: {type: bearer-token, token_env: REGISTRY_TOKEN}\n"
        '      body: \'{"session": "${SESSION_ID}", "agent": "${AGENT_NAME}"}\'\n'
    )
    agent_env = {"REGISTRY_PATH": "v1-services", "REGISTRY_TOKEN": "tok-of-the-agent-pod"}
    agent_pid = workspace.root / "agent-alpha.pid"
    killed = workspace.start(
        template,
        workspace.agent_command(on_term=0, pid_file=str(agent_pid)),
        "--agent-name",
        "alpha",
        env=agent_env,
    )
    wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
    lost = session_of_agent(receiver, "alpha")
    kill_with_agent(workspace, killed, agent_pid)
    time.sleep(1.2)

    elsewhere = dict(workspace.env, REGISTRY_TOKEN="tok-of-the-reconciler")
    process = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "reconcile", "--stale-after", "1s",
         "--template", str(template)],
        env=elsewhere, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert f"recovered: session {lost}" in process.stdout
    (sent,) = deliveries(receiver, "/v1-services/deregister")
    assert sent.headers["authorization"] == "Bearer tok-of-the-reconciler"
    stored = query(postgres_url, "SELECT * FROM sessions") + query(
        postgres_url, "SELECT * FROM executions"
    )
    assert "v1-services" in repr(stored)
    assert "tok-of-the" not in repr(stored)


def test_replay_resends_one_agents_failed_delivery_from_the_shared_journal(
    workspace: Workspace, receiver: TargetServer, postgres_url: str
) -> None:
    template = fleet_template(workspace, receiver)
    receiver.on("/farewell", Reply(503), Reply(503))  # alpha's and beta's session-end fail
    for name in ("alpha", "beta"):
        run = workspace.start(template, workspace.agent_command(exit=0), "--agent-name", name)
        assert run.wait(timeout=120) == 0, run.stderr
    alpha = session_of_agent(receiver, "alpha")
    (alpha_id,) = {
        json.loads(s["metadata"])["AGENT_ID"]
        for s in query(postgres_url, "SELECT metadata FROM sessions WHERE session_id = %s", alpha)
    }
    (first_try,) = hook_ids(receiver, "/farewell", alpha)
    replay = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "replay", "--failed",
         "--agent", alpha_id, "--json", "--template", str(template)],
        env=workspace.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stderr
    (outcome,) = json.loads(replay.stdout)
    assert (outcome["hook"], outcome["outcome"]) == ("farewell", "success")
    assert hook_ids(receiver, "/farewell", alpha) == [first_try, first_try]
    beta = session_of_agent(receiver, "beta")
    assert len(hook_ids(receiver, "/farewell", beta)) == 1  # another agent's: not replayed
