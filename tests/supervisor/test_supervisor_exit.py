"""Exit is bounded and ordered: after the agent exits, deliveries queued behind a slow
receiver get what is left of the grace period and no more; what they did not get to is
journaled as dropped and replayable; session-end reaches the receiver after what was delivered
before it. A real slow loopback receiver and a real `run`."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

from tests.supervisor.supervised import Workspace, recorded_events, recorder_hook
from tests.support.target_server import Reply, TargetServer

SLOW = 2.0  # seconds the receiver takes to answer a runtime-event delivery
GRACE = 3  # seconds of grace period: room for two slow answers, not for all of them
REPLAY = [sys.executable, "-m", "otel_lifecycle_hooks", "replay"]

CLAUDE_TURN = [
    {"hook_event_name": "SessionStart", "source": "startup"},
    {"hook_event_name": "UserPromptSubmit", "prompt": "list the files"},
    {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}},
    {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_response": {"stdout": "a"}},
    {"hook_event_name": "Stop", "last_assistant_message": "One file."},
]
RUNTIME_EVENTS = ["session-start", "prompt-submit", "tool-start", "tool-end", "agent-end"]


def template_yaml(server: TargetServer) -> str:
    body = '{"EVENT": "${EVENT}", "SESSION_ID": "${SESSION_ID}"}'
    return (
        "  - name: runtime\n"
        f"    on: [{', '.join(RUNTIME_EVENTS)}, activity-change]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{server.url("/runtime")}"\n'
        f"      body: '{body}'\n"
        "    timeout: 5s\n"
        "  - name: end\n"
        "    on: [session-end]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{server.url("/end")}"\n'
        f"      body: '{body}'\n"
        "    timeout: 5s\n"
    )


def journal_rows(workspace: Workspace) -> list[tuple[int, str, str, str]]:
    with sqlite3.connect(workspace.journal) as db:
        return db.execute("SELECT id, hook, event, outcome FROM executions ORDER BY id").fetchall()


def test_a_slow_receiver_cannot_hold_run_past_its_grace_period(
    workspace: Workspace, target_server: TargetServer
) -> None:
    target_server.always("/runtime", Reply(200, delay=SLOW))
    template = workspace.template(template_yaml(target_server))
    command = workspace.agent_command(claude=CLAUDE_TURN, exit=0)
    run = workspace.start(template, command, "--grace-period", f"{GRACE}s")
    assert run.wait(timeout=60) == 0, run.stderr

    paths = [request.path for request in target_server.requests]
    assert paths[-1] == "/end"  # session-end came last, after what was delivered before it
    delivered = paths.count("/runtime")
    # One answer in flight when the agent exited, then room for at most GRACE / SLOW more.
    assert 1 <= delivered <= 1 + GRACE // SLOW + 1
    queued = len(RUNTIME_EVENTS) + 4  # and an activity-change for each of four activities

    rows = journal_rows(workspace)
    runtime = [(event, outcome) for _, hook, event, outcome in rows if hook == "runtime"]
    outcomes = [outcome for _, outcome in runtime]
    assert len(runtime) == queued
    assert outcomes.count("dropped") == queued - delivered
    assert set(outcomes) <= {"success", "dropped"}
    assert [outcome for _, hook, _, outcome in rows if hook == "end"] == ["success"]
    assert "journaled as dropped" in run.stderr

    # What the grace period left undone is replayed, each with its idempotency key.
    target_server.always("/runtime", Reply(200))
    replay = subprocess.run(
        [*REPLAY, "--failed", "--json", "--template", str(template)],
        env=workspace.env,
        cwd=workspace.root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert replay.returncode == 0, replay.stderr
    replayed = json.loads(replay.stdout)
    assert [item["outcome"] for item in replayed] == ["success"] * (queued - delivered)
    assert target_server.requests[-1].path == "/runtime"
    events = [json.loads(r.body)["EVENT"] for r in target_server.requests if r.path == "/runtime"]
    assert len(events) == queued


LAST_WORDS_AGENT = """
import json, os, socket
line = {"v": 1, "kind": "status", "status": "task_completed", "message": "last words"}
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.connect(os.environ["LIFECYCLE_HOOKS_SOCKET"])
# Lines the supervisor refuses first: reading them keeps it busy as the agent exits.
client.sendall(b"{}\\n" * 5000 + json.dumps(line).encode() + b"\\n")
os._exit(0)  # at once: the line may still be unread in the socket when run sees the exit
"""


def test_an_event_sent_just_before_the_agent_exits_is_still_delivered(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = workspace.template(
        recorder_hook(target_server.url("/hook"), events=("task-completed", "session-end"))
    )
    for attempt in range(3):
        target_server.requests.clear()
        run = workspace.start(template, [sys.executable, "-c", LAST_WORDS_AGENT])
        assert run.wait(timeout=60) == 0, run.stderr
        assert recorded_events(target_server) == ["task-completed", "session-end"], attempt
