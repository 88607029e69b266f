"""Crash recovery: a supervisor SIGKILLed after post-start leaves its session open in the
journal; the next `run` of the same agent fires that session's pre-stop and session-end
hooks, marked as recovered, once."""

from __future__ import annotations

import signal
import sqlite3
from contextlib import closing

from tests.supervisor.supervised import (
    Workspace,
    payload_appender,
    read_lines,
    script_hook,
    wait_until,
)


def post_started_sessions(workspace: Workspace) -> list[str]:
    if not workspace.journal.exists():
        return []
    with closing(sqlite3.connect(workspace.journal)) as db:
        try:
            rows = db.execute("SELECT session_id FROM sessions WHERE post_started_at IS NOT NULL")
            return [row[0] for row in rows]
        except sqlite3.OperationalError:  # the supervisor has not created its tables yet
            return []


def test_a_killed_supervisors_session_is_ended_by_the_next_run_once(workspace: Workspace) -> None:
    hooks_log = workspace.root / "hooks.jsonl"
    template = workspace.template(
        script_hook(
            "registry",
            ["post-start", "pre-stop", "session-end"],
            payload_appender(hooks_log),
            blocking="true",
            timeout="10s",
        )
    )
    killed = workspace.start(template, workspace.agent_command())
    wait_until(lambda: post_started_sessions(workspace), what="the first run to reach post-start")
    killed.signal(signal.SIGKILL)
    killed.wait(timeout=120)
    # The orphaned agent goes too, as it would with its container (recovery waits for that).
    wait_until(lambda: list(workspace.root.glob("agent-*.pid")), what="the agent's pid file")
    workspace.cleanup()
    (lost_session,) = post_started_sessions(workspace)

    second = workspace.start(template, workspace.agent_command(exit=0))
    assert second.wait(timeout=120) == 0, second.stderr
    third = workspace.start(template, workspace.agent_command(exit=0))
    assert third.wait(timeout=120) == 0, third.stderr

    hooks = [(h["hook_event_name"], h["session_id"], h["recovered"]) for h in read_lines(hooks_log)]
    first, recovered, second_run, third_run = hooks[:1], hooks[1:3], hooks[3:5], hooks[5:]
    assert first == [("post-start", lost_session, False)]
    assert recovered == [("pre-stop", lost_session, True), ("session-end", lost_session, True)]
    assert [(event, flag) for event, _, flag in second_run] == [
        ("post-start", False),
        ("session-end", False),
    ]
    assert [(event, flag) for event, _, flag in third_run] == [
        ("post-start", False),
        ("session-end", False),
    ]
    assert lost_session not in {session for _, session, _ in second_run + third_run}
    assert read_lines(hooks_log)[2]["context"]["RECOVERED"] == "true"
    with closing(sqlite3.connect(workspace.journal)) as db:
        (recovered_at,) = db.execute(
            "SELECT recovered_at FROM sessions WHERE session_id = ?", (lost_session,)
        ).fetchone()
        flagged = db.execute(
            "SELECT event FROM executions WHERE session_id = ? AND recovered = 1 ORDER BY id",
            (lost_session,),
        ).fetchall()
    assert recovered_at is not None
    assert [row[0] for row in flagged] == ["pre-stop", "session-end"]


def test_a_running_supervisor_of_the_same_agent_is_not_taken_for_a_crashed_one(
    workspace: Workspace,
) -> None:
    hooks_log = workspace.root / "hooks.jsonl"
    ready = workspace.root / "ready"
    template = workspace.template(
        script_hook(
            "registry", ["pre-stop", "session-end"], payload_appender(hooks_log), blocking="true"
        )
    )
    alive = workspace.start(template, workspace.agent_command(ready_file=str(ready), on_term=0))
    wait_until(lambda: post_started_sessions(workspace), what="the first run to reach post-start")

    other = workspace.start(template, workspace.agent_command(exit=0))
    assert other.wait(timeout=120) == 0, other.stderr
    assert [h["recovered"] for h in read_lines(hooks_log)] == [False]  # its own session-end only

    alive.signal(signal.SIGTERM)
    assert alive.wait(timeout=120) == 0, alive.stderr
