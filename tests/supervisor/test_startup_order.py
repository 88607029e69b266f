"""What `run` does right after its agent started, instead of before (the session's journal
row, crash recovery, the heartbeat): an agent that speaks at once, while the supervisor is
still in its blocking post-start, is heard, and its event is journaled under the session."""

from __future__ import annotations

import sqlite3
import sys
from contextlib import closing

from tests.supervisor.supervised import (
    Workspace,
    recorded,
    recorder_hook,
    script_hook,
)
from tests.support.target_server import TargetServer

# The agent's first act: a finished task reported on the event socket, then a note of it.
SPEAKS_AT_ONCE = r"""
import json, os, socket, sys
line = {"v": 1, "kind": "status", "status": "task_completed", "message": "said at once"}
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
    connection.connect(os.environ["OTEL_LIFECYCLE_HOOKS_SOCKET"])
    connection.sendall(json.dumps(line).encode() + b"\n")
open(sys.argv[1], "w").write("sent")
"""


def test_an_event_sent_before_the_supervisor_is_up_is_delivered_and_journaled(
    workspace: Workspace, target_server: TargetServer
) -> None:
    sent = workspace.root / "sent"
    # post-start holds the supervisor until the agent has spoken: the event waits on the
    # socket meanwhile (a refused connection would fail the agent, and never write `sent`).
    wait_for_agent = ["sh", "-c", f'while [ ! -e "{sent}" ]; do sleep 0.02; done']
    template = workspace.template(
        recorder_hook(target_server.url("/events"), ["post-start", "task-completed"])
        + script_hook("wait-for-agent", ["post-start"], wait_for_agent,
                      blocking="true", timeout="20s")
    )  # fmt: skip
    run = workspace.start(template, [sys.executable, "-S", "-c", SPEAKS_AT_ONCE, str(sent)])
    assert run.wait(timeout=60) == 0, run.stderr

    assert sent.read_text() == "sent"
    events = recorded(target_server)
    assert [e["EVENT"] for e in events] == ["post-start", "task-completed"]
    assert events[1]["TASK_SUMMARY"] == "said at once"
    session = events[0]["SESSION_ID"]
    assert events[1]["SESSION_ID"] == session
    with closing(sqlite3.connect(workspace.journal)) as db:
        (row,) = db.execute(
            "SELECT session_id, agent_pid, post_started_at, ended_at, exit_code FROM sessions"
        ).fetchall()
        journaled = db.execute(
            "SELECT event FROM executions WHERE session_id = ? AND hook = 'recorder' ORDER BY id",
            (session,),
        ).fetchall()
    session_id, agent_pid, post_started_at, ended_at, exit_code = row
    assert session_id == session
    assert agent_pid and post_started_at and ended_at and exit_code == 0
    assert [e for (e,) in journaled] == ["post-start", "task-completed"]


def test_a_session_that_ends_before_its_agent_starts_is_still_journaled(
    workspace: Workspace,
) -> None:
    started = workspace.root / "agent-started"
    template = workspace.template(
        script_hook("refuse", ["pre-start"], ["sh", "-c", "exit 3"],
                    blocking="true", on_error="fail")
    )  # fmt: skip
    run = workspace.start(template, workspace.agent_command(touch=str(started)))
    assert run.wait(timeout=60) == 1, run.stderr

    assert not started.exists()
    with closing(sqlite3.connect(workspace.journal)) as db:
        (row,) = db.execute(
            "SELECT session_id, agent_pid, post_started_at, ended_at FROM sessions"
        ).fetchall()
        journaled = db.execute(
            "SELECT event, outcome FROM executions WHERE session_id = ?", (row[0],)
        ).fetchall()
    _, agent_pid, post_started_at, ended_at = row
    assert agent_pid is None and post_started_at is None and ended_at is not None
    assert [event for event, _ in journaled] == ["pre-start"]
