"""Hook payload sequences recorded from the real harness binaries (tests/harness/data/, one
JSON object a line: a header naming the harness, version and scenario, then each hook call's
stdin payload or, for Codex's notify program, its argv), replayed through the dialects and the
activity tracker. Pure: no harness, socket or sleep here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.harness.activity import ActivityTracker, Derived
from otel_lifecycle_hooks.harness.dialects import get_dialect

DATA = Path(__file__).parent / "data"


def load(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    header, *calls = [
        json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()
    ]
    return header, calls


def final_text(name: str) -> str:
    _, calls = load(name)
    stop = [c["stdin"] for c in calls if c.get("stdin", {}).get("hook_event_name") == "Stop"]
    after = [c["stdin"] for c in calls if c.get("stdin", {}).get("hook_event_name") == "AfterAgent"]
    return stop[0]["last_assistant_message"] if stop else after[0]["prompt_response"]


def derive(name: str, **options: Any) -> list[Derived]:
    header, calls = load(name)
    dialect = get_dialect(header["harness"])
    tracker = ActivityTracker(clock=lambda: 0.0, **options)
    return [
        derived
        for call in calls
        for event in dialect.translate(call.get("stdin") or {}, call.get("argv", []))
        for derived in tracker.observe(event)
    ]


def activities(derived: list[Derived]) -> list[str]:
    return [d.fields["ACTIVITY"] for d in derived if d.event == "activity-change"]


def runtime(derived: list[Derived]) -> list[str]:
    return [d.event for d in derived if d.event not in ("activity-change", "task-completed")]


CASES = {
    "claude-2.1.332-headless-shell.jsonl": (
        ["session-start", "prompt-submit", "tool-start", "tool-end", "agent-end"],
        ["thinking", "executing", "thinking", "idle"],
    ),
    # Headless Claude refuses a call that needs permission when no hook answers: the turn
    # ends with no tool-end, and its end ends the wait.
    "claude-2.1.332-headless-permission-refused.jsonl": (
        ["session-start", "prompt-submit", "tool-start", "notification", "agent-end"],
        ["thinking", "executing", "waiting_for_input", "idle"],
    ),
    # Allowed by a PermissionRequest hook: the tool's end shows work resumed.
    "claude-2.1.332-headless-permission-allowed.jsonl": (
        ["session-start", "prompt-submit", "tool-start", "notification", "tool-end", "agent-end"],
        ["thinking", "executing", "waiting_for_input", "thinking", "idle"],
    ),
    "claude-2.1.332-run-permission-answered.jsonl": (
        ["session-start", "prompt-submit", "tool-start", "notification", "tool-end", "agent-end"],
        ["thinking", "executing", "waiting_for_input", "thinking", "idle"],
    ),
    # The approval is asked after PreToolUse: the tool's end shows work resumed, so the turn
    # ends idle instead of staying waiting_for_input; notify's agent-turn-complete repeats the
    # Stop hook's end of the turn and derives nothing.
    "codex-0.171.0-run-permission-answered.jsonl": (
        ["session-start", "prompt-submit", "model-start", "tool-start", "notification"]
        + ["tool-end", "model-start", "agent-end"],
        ["thinking", "executing", "waiting_for_input", "thinking", "idle"],
    ),
    # PreCompress (trigger auto) came before both model calls; nothing was compacted.
    "gemini-0.61.0-headless-yolo-shell.jsonl": (
        ["session-start", "agent-start", "model-start", "model-end", "tool-start", "tool-end"]
        + ["model-start", "model-end", "agent-end"],
        ["thinking", "executing", "thinking", "idle"],
    ),
    "codex-0.171.0-exec-bypass-shell.jsonl": (
        ["session-start", "prompt-submit", "model-start", "tool-start", "tool-end"]
        + ["model-start", "agent-end"],
        ["thinking", "executing", "thinking", "idle"],
    ),
    # The refused call has no PostToolUse: the next model request shows work resumed.
    "codex-0.171.0-exec-on-request-denied.jsonl": (
        ["session-start", "prompt-submit", "model-start", "tool-start", "model-start"]
        + ["agent-end"],
        ["thinking", "executing", "thinking", "idle"],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_recorded_session_gives_the_activities_the_agent_really_had(name: str) -> None:
    expected_events, expected_activities = CASES[name]
    derived = derive(name)
    assert runtime(derived) == expected_events
    assert activities(derived) == expected_activities


def test_every_recorded_file_is_covered() -> None:
    assert sorted(p.name for p in DATA.glob("*.jsonl")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_recorded_session_keeps_its_harness_session_id(name: str) -> None:
    _, calls = load(name)
    first = calls[0]["stdin"]["session_id"]
    derived = derive(name)
    ids = {d.fields.get("HARNESS_SESSION_ID") for d in derived if d.event != "activity-change"}
    assert ids == {first}
    assert not any("SESSION_ID" in d.fields for d in derived)


@pytest.mark.parametrize(
    "name",
    [
        "claude-2.1.332-headless-shell.jsonl",
        "gemini-0.61.0-headless-yolo-shell.jsonl",
        "codex-0.171.0-exec-bypass-shell.jsonl",
        "codex-0.171.0-run-permission-answered.jsonl",
    ],
)
def test_a_headless_run_completes_its_task_with_the_final_text_when_asked(name: str) -> None:
    derived = derive(name, turn_end_completes_task=True)
    completed = [d.fields for d in derived if d.event == "task-completed"]
    assert [(c["TASK_SUMMARY"], c["ASSISTANT_TEXT"]) for c in completed] == [
        (final_text(name), final_text(name))
    ]
    assert activities(derived)[-1] == "completed"


def test_without_the_setting_claude_and_gemini_never_complete_a_task_by_themselves() -> None:
    for name in ("claude-2.1.332-headless-shell.jsonl", "gemini-0.61.0-headless-yolo-shell.jsonl"):
        assert "task-completed" not in [d.event for d in derive(name)]
