"""A whole session under `run`: an agent that reports Claude Code's hook payloads through
`hook --dialect claude`, then is stopped with SIGTERM. Every template event fires, in order,
each hook span belongs to the session's one trace, and the agent joins that trace."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from otel_lifecycle_hooks.telemetry.tracefile import read_trace_file
from tests.supervisor.supervised import (
    Workspace,
    payload_appender,
    read_lines,
    recorded,
    recorded_events,
    recorder_hook,
    script_hook,
    wait_until,
)
from tests.support.target_server import TargetServer

CLAUDE_SESSION = [
    {"hook_event_name": "SessionStart", "source": "startup"},
    {"hook_event_name": "UserPromptSubmit", "prompt": "List the files here"},
    {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}},
    {
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_response": {"stdout": "a b"},
    },
    {"hook_event_name": "Stop", "stop_hook_active": False, "last_assistant_message": "Two files."},
    {"hook_event_name": "SessionEnd", "reason": "other"},
]

# (EVENT, PHASE, ACTIVITY) in the order the recorder must see them.
EXPECTED = [
    ("phase-change", "provisioning", "idle"),
    ("pre-start", "provisioning", "idle"),
    ("phase-change", "starting", "idle"),
    ("phase-change", "running", "idle"),
    ("post-start", "running", "idle"),
    ("session-start", "running", "idle"),
    ("prompt-submit", "running", "thinking"),
    ("activity-change", "running", "thinking"),
    ("tool-start", "running", "executing"),
    ("activity-change", "running", "executing"),
    ("tool-end", "running", "thinking"),
    ("activity-change", "running", "thinking"),
    ("agent-end", "running", "idle"),
    ("activity-change", "running", "idle"),
    ("activity-change", "running", "completed"),
    ("task-completed", "running", "completed"),
    ("phase-change", "stopping", "completed"),
    ("pre-stop", "stopping", "completed"),
    ("phase-change", "stopped", "completed"),
    ("session-end", "stopped", "completed"),
]


def test_a_claude_session_fires_every_event_in_order_in_one_trace(
    workspace: Workspace, target_server: TargetServer
) -> None:
    scripts_log = workspace.root / "scripts.jsonl"
    ready = workspace.root / "ready"
    agent_env = workspace.root / "agent-env.json"
    template = workspace.template(
        recorder_hook(target_server.url("/events"))
        + script_hook(
            "audit",
            ["post-start", "pre-stop", "session-end"],
            payload_appender(scripts_log),
            blocking="true",
            timeout="10s",
        ),
        extra="harness: claude\n",
    )
    command = workspace.agent_command(
        env_file=str(agent_env),
        claude=CLAUDE_SESSION,
        status=[["task_completed", "Listed the files"]],
        ready_file=str(ready),
        on_term=5,
    )
    run = workspace.start(template, command, "--grace-period", "5s")

    wait_until(ready.exists, what="the agent to report its session")
    wait_until(lambda: "task-completed" in recorded_events(target_server), what="task-completed")
    run.signal(signal.SIGTERM)
    assert run.wait(timeout=120) == 5, run.stderr

    events = recorded(target_server)
    assert [(e["EVENT"], e["PHASE"], e["ACTIVITY"]) for e in events] == EXPECTED
    by_event = {e["EVENT"]: e for e in events}
    assert by_event["session-end"]["EXIT_CODE"] == "5"
    assert by_event["task-completed"]["TASK_SUMMARY"] == "Listed the files"
    tool_change = events[EXPECTED.index(("activity-change", "running", "executing"))]
    assert (tool_change["PREVIOUS_ACTIVITY"], tool_change["TOOL_NAME"]) == ("thinking", "Bash")

    # The blocking script hooks saw the same story, each with a TRACEPARENT of the session.
    scripts = read_lines(scripts_log)
    assert [s["hook_event_name"] for s in scripts] == ["post-start", "pre-stop", "session-end"]
    assert scripts[-1]["context"]["EXIT_CODE"] == "5"

    # One trace: the session span, every hook span under it, the agent's TRACEPARENT in it.
    trace_files = list(workspace.trace_dir.glob("*.jsonl"))
    assert len(trace_files) == 1
    spans = read_trace_file(trace_files[0])
    sessions = [s for s in spans if s["name"] == "invoke_agent test-agent"]
    assert len(sessions) == 1
    session = sessions[0]
    hook_spans = [s for s in spans if s["name"].startswith("agent.lifecycle_hook ")]
    assert len(hook_spans) == len(EXPECTED) + len(scripts)
    assert {s["trace_id"] for s in hook_spans} == {session["trace_id"]}
    assert {s["parent_span_id"] for s in hook_spans} == {session["span_id"]}
    span_events = [e["attributes"]["agent.lifecycle.event"] for e in session["events"]]
    assert span_events == [event for event, _, _ in EXPECTED]

    # One session id for every hook, the supervisor's; the harness's own id kept beside it.
    assert {e["SESSION_ID"] for e in events} == {session["attributes"]["gen_ai.conversation.id"]}
    assert session["attributes"]["scion.harness.session_id"] == "claude-session-1"
    runtime = [e for e in events if e["EVENT"] in ("session-start", "tool-start", "agent-end")]
    assert {e["HARNESS_SESSION_ID"] for e in runtime} == {"claude-session-1"}

    child_traceparent = json.loads(agent_env.read_text())["TRACEPARENT"]
    assert child_traceparent.split("-")[1] == session["trace_id"]
    assert {s["TRACEPARENT"].split("-")[1] for s in scripts} == {session["trace_id"]}


def test_the_agent_gets_the_event_socket_and_its_exit_code_becomes_the_runs(
    workspace: Workspace, target_server: TargetServer
) -> None:
    agent_env = workspace.root / "agent-env.json"
    template = workspace.template(recorder_hook(target_server.url("/events"), ["session-end"]))
    run = workspace.start(template, workspace.agent_command(env_file=str(agent_env), exit=3))

    assert run.wait(timeout=120) == 3, run.stderr
    assert json.loads(agent_env.read_text())["SOCKET"].endswith(".sock")
    assert [e["EXIT_CODE"] for e in recorded(target_server)] == ["3"]
    assert not Path(json.loads(agent_env.read_text())["SOCKET"]).exists()  # removed at the end
