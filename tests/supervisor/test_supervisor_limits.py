"""Limits under `run`: reaching `max_turns` or `max_duration` fires `limits-exceeded`, stops
the agent through the pre-stop path, and the run exits 10."""

from __future__ import annotations

import pytest

from tests.supervisor.supervised import Workspace, recorded, recorder_hook
from tests.support.target_server import TargetServer

STOP_TURN = {
    "hook_event_name": "Stop",
    "stop_hook_active": False,
    "last_assistant_message": "Done.",
}
PROMPT = {"hook_event_name": "UserPromptSubmit", "prompt": "next"}
EVENTS = ["limits-exceeded", "activity-change", "pre-stop", "session-end"]


@pytest.mark.parametrize("source", ["template", "environment"])
def test_the_agent_is_stopped_at_max_turns_and_the_run_exits_10(
    workspace: Workspace, target_server: TargetServer, source: str
) -> None:
    limits = "limits:\n  max_turns: 2\n" if source == "template" else ""
    env = {"SCION_MAX_TURNS": "2"} if source == "environment" else {}
    template = workspace.template(recorder_hook(target_server.url("/events"), EVENTS), extra=limits)
    command = workspace.agent_command(
        claude=[PROMPT, STOP_TURN, PROMPT, STOP_TURN, PROMPT, STOP_TURN]
    )
    run = workspace.start(template, command, "--grace-period", "30s", env=env)  # a bound only

    assert run.wait(timeout=120) == 10, run.stderr

    events = [
        e
        for e in recorded(target_server)
        if e["EVENT"] != "activity-change" or e["ACTIVITY"] == "limits_exceeded"
    ]
    assert [(e["EVENT"], e["LIMIT_NAME"], e["LIMIT_COUNT"]) for e in events] == [
        ("activity-change", "", ""),
        ("limits-exceeded", "max_turns", "2"),
        ("pre-stop", "", ""),
        ("session-end", "", ""),
    ]
    assert events[1]["ACTIVITY"] == "limits_exceeded"


def test_max_duration_stops_the_agent_and_the_run_exits_10(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = workspace.template(recorder_hook(target_server.url("/events"), EVENTS))
    run = workspace.start(
        template,
        workspace.agent_command(),
        "--grace-period",
        "30s",  # a bound only: the agent stops at once; a loaded machine delivers slowly
        env={"SCION_MAX_DURATION": "1s"},
    )

    assert run.wait(timeout=120) == 10, run.stderr

    events = recorded(target_server)
    assert [e["EVENT"] for e in events] == [
        "activity-change",
        "limits-exceeded",
        "pre-stop",
        "session-end",
    ]
    assert events[1]["LIMIT_NAME"] == "max_duration"
    assert int(events[1]["LIMIT_COUNT"]) >= 1
    assert events[-1]["EXIT_CODE"] == "143"  # the agent's own: it was stopped with SIGTERM


def test_a_reported_limit_names_itself_and_stops_the_agent_as_a_reached_limit_does(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = workspace.template(recorder_hook(target_server.url("/events"), EVENTS))
    command = workspace.agent_command(status=[["limits_exceeded", "budget of 5 USD spent"]])
    run = workspace.start(template, command, "--grace-period", "30s")  # a bound only

    assert run.wait(timeout=120) == 10, run.stderr

    events = [
        e
        for e in recorded(target_server)
        if e["EVENT"] != "activity-change" or e["ACTIVITY"] == "limits_exceeded"
    ]
    assert [(e["EVENT"], e["LIMIT_NAME"]) for e in events] == [
        ("activity-change", ""),
        ("limits-exceeded", "reported"),
        ("pre-stop", ""),
        ("session-end", ""),
    ]
    assert events[-1]["EXIT_CODE"] == "143"  # stopped with SIGTERM, as at a reached limit
