"""`hook --template` without a supervisor keeps a harness session whole: every call is a new
process, yet the session is one trace in one trace file, with one SESSION_ID and the agent's
name, and two harness sessions stay apart. Real `hook` processes, a real loopback receiver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from otel_lifecycle_hooks.telemetry.tracefile import read_trace_file
from tests.support.target_server import TargetServer

FIELDS = ("EVENT", "SESSION_ID", "HARNESS_SESSION_ID", "AGENT_NAME", "ACTIVITY", "TASK_SUMMARY")
TURN = [
    {"hook_event_name": "SessionStart", "source": "startup"},
    {"hook_event_name": "UserPromptSubmit", "prompt": "list the files"},
    {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}},
    {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_response": {"stdout": "a"}},
    {"hook_event_name": "Stop", "last_assistant_message": "One file: a."},
]


def write_template(path: Path, server: TargetServer, extra: str = "") -> Path:
    body = "{" + ", ".join(f'"{name}": "${{{name}}}"' for name in FIELDS) + "}"
    path.write_text(
        extra + "lifecycle_hooks:\n"
        "  - name: recorder\n"
        "    on: [session-start, prompt-submit, tool-start, tool-end, agent-end,"
        " activity-change, task-completed]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{server.url("/events")}"\n'
        f"      body: '{body}'\n"
        "    blocking: true\n"  # each call delivers before it exits: the order is the calls'
    )
    return path


def environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))}
    env.update(
        HOME=str(tmp_path),
        OTEL_LIFECYCLE_HOOKS_STATE=str(tmp_path / "state.json"),
        OTEL_LIFECYCLE_HOOKS_TRACE_DIR=str(tmp_path / "traces"),
        OTEL_LIFECYCLE_HOOKS_JOURNAL=str(tmp_path / "journal.sqlite3"),
        OTEL_LIFECYCLE_HOOKS_LOG=str(tmp_path / "agent.log"),
        OTEL_METRICS_EXPORTER="none",
    )
    return env


def hook(template: Path, env: dict[str, str], session: str, payload: dict[str, Any]) -> None:
    body = {"session_id": session, "transcript_path": "", "cwd": "/", **payload}
    done = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "claude",
         "--template", str(template)],
        input=json.dumps(body).encode(),
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def recorded(server: TargetServer) -> list[dict[str, str]]:
    return [json.loads(request.body) for request in server.requests]


def test_one_harness_session_is_one_trace_one_file_one_session_id(
    tmp_path: Path, target_server: TargetServer
) -> None:
    template = write_template(tmp_path / "scion-agent.yaml", target_server)
    env = environment(tmp_path)
    for payload in TURN:
        hook(template, env, "claude-session-1", payload)

    events = recorded(target_server)
    assert [e["EVENT"] for e in events if e["EVENT"] != "activity-change"] == [
        "session-start",
        "prompt-submit",
        "tool-start",
        "tool-end",
        "agent-end",
    ]
    assert len({e["SESSION_ID"] for e in events}) == 1
    assert {e["AGENT_NAME"] for e in events} == {"claude"}  # the harness, not "agent"
    assert {e["HARNESS_SESSION_ID"] for e in events if e["EVENT"] == "tool-start"} == {
        "claude-session-1"
    }

    [trace_file] = (tmp_path / "traces").glob("*.jsonl")
    assert trace_file.stem == events[0]["SESSION_ID"]
    spans = read_trace_file(trace_file)
    assert len({span["trace_id"] for span in spans}) == 1
    sessions = [span for span in spans if span["name"] == "invoke_agent claude"]
    assert len(sessions) == len(TURN)
    [first] = [span for span in sessions if span["parent_span_id"] is None]
    assert {span["parent_span_id"] for span in sessions if span is not first} == {first["span_id"]}
    assert first["attributes"]["scion.harness.session_id"] == "claude-session-1"


def test_two_harness_sessions_stay_apart_and_a_status_goes_to_the_latest(
    tmp_path: Path, target_server: TargetServer
) -> None:
    template = write_template(
        tmp_path / "scion-agent.yaml", target_server, extra="harness: claude-code\n"
    )
    env = environment(tmp_path)
    hook(template, env, "first", TURN[1])
    hook(template, env, "second", TURN[1])
    hook(template, env, "first", TURN[2])
    done = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "status", "--template", str(template),
         "task_completed", "listed"],
        env=env, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    events = recorded(target_server)
    first_id, second_id = events[0]["SESSION_ID"], events[2]["SESSION_ID"]
    assert first_id != second_id
    tool_start = next(e for e in events if e["EVENT"] == "tool-start")
    assert (tool_start["SESSION_ID"], tool_start["HARNESS_SESSION_ID"]) == (first_id, "first")
    completed = next(e for e in events if e["EVENT"] == "task-completed")
    assert (completed["SESSION_ID"], completed["TASK_SUMMARY"]) == (first_id, "listed")
    assert {e["AGENT_NAME"] for e in events} == {"claude-code"}  # the template's harness
    assert len(list((tmp_path / "traces").glob("*.jsonl"))) == 2
