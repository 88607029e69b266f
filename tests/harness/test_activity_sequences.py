"""Whole harness event sequences, as each harness sends them, through its dialect and the
activity tracker: the activities a watcher sees and the events a template's hooks get.

Each sequence is the order of hook events the harness's documentation and source give for one
prompt with one shell tool call and one permission prompt; pure, no socket or sleep.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from otel_lifecycle_hooks.harness.activity import ActivityTracker, Derived
from otel_lifecycle_hooks.harness.dialects import get_dialect


class FakeClock:
    def __call__(self) -> float:
        return 1000.0


Step = tuple[dict[str, Any], list[str]]  # a payload on stdin, the extra argv (Codex notify)


def hook(name: str, **fields: Any) -> Step:
    return ({"session_id": "harness-session-1", "hook_event_name": name, **fields}, [])


def notify(kind: str, **fields: Any) -> Step:
    import json

    return ({}, [json.dumps({"type": kind, "thread-id": "harness-session-1", **fields})])


def derive(dialect: str, steps: Iterable[Step], **options: Any) -> list[Derived]:
    translator = get_dialect(dialect)
    tracker = ActivityTracker(clock=FakeClock(), **options)
    return [
        derived
        for payload, argv in steps
        for event in translator.translate(payload, argv)
        for derived in tracker.observe(event)
    ]


def activities(derived: list[Derived]) -> list[str]:
    return [d.fields["ACTIVITY"] for d in derived if d.event == "activity-change"]


def names(derived: list[Derived]) -> list[str]:
    return [d.event for d in derived]


CLAUDE_TURN: list[Step] = [
    hook("SessionStart", source="startup"),
    hook("UserPromptSubmit", prompt="run the tests"),
    hook("PreToolUse", tool_name="Bash", tool_input={"command": "make test"}),
    hook("PermissionRequest", tool_name="Bash", tool_input={"command": "make test"}),
    hook("Notification", notification_type="permission_prompt", message="Claude needs you"),
    hook("PostToolUse", tool_name="Bash", tool_response={"stdout": "ok"}),
    hook("Stop", last_assistant_message="All tests pass."),
]

# Gemini CLI 0.6x: PreCompress (trigger auto) before every model call; AfterModel per streamed
# chunk; the permission prompt (Notification ToolPermission) comes after BeforeTool.
GEMINI_TURN: list[Step] = [
    hook("SessionStart", source="startup"),
    hook("BeforeAgent", prompt="run the tests"),
    hook("PreCompress", trigger="auto"),
    hook("BeforeModel"),
    hook("AfterModel", llm_response={"candidates": [{"content": {"parts": ["Let"]}}]}),
    hook(
        "AfterModel",
        llm_response={"candidates": [{"content": {"parts": []}, "finishReason": "STOP"}]},
    ),
    hook("BeforeTool", tool_name="run_shell_command"),
    hook(
        "Notification",
        notification_type="ToolPermission",
        message="Allow?",
        details={"toolName": "run_shell_command"},
    ),
    hook("AfterTool", tool_name="run_shell_command", tool_response={}),
    hook("PreCompress", trigger="auto"),
    hook("BeforeModel"),
    hook(
        "AfterModel",
        llm_response={"candidates": [{"content": {"parts": ["ok"]}, "finishReason": "STOP"}]},
    ),
    hook("AfterAgent", prompt_response="All tests pass."),
]

# Codex hooks, with the legacy notify program configured too.
CODEX_TURN: list[Step] = [
    hook("SessionStart", source="startup"),
    hook("UserPromptSubmit", prompt="run the tests", turn_id="t1"),
    hook("PreModelRequest", turn_id="t1"),
    hook("PreToolUse", tool_name="Bash", turn_id="t1"),
    hook("PermissionRequest", tool_name="Bash", turn_id="t1"),
    hook("PostToolUse", tool_name="Bash", turn_id="t1"),
    hook("PreModelRequest", turn_id="t1"),
    hook("Stop", last_assistant_message="All tests pass.", turn_id="t1"),
    notify("agent-turn-complete", **{"last-assistant-message": "All tests pass."}),
]


def test_claude_a_turn_with_an_answered_permission_prompt() -> None:
    derived = derive("claude", CLAUDE_TURN)
    assert activities(derived) == ["thinking", "executing", "waiting_for_input", "thinking", "idle"]
    assert names(derived).count("notification") == 1  # one prompt, told twice by Claude
    assert "task-completed" not in names(derived)


def test_gemini_a_turn_is_not_idle_until_its_end_and_compacts_nothing() -> None:
    derived = derive("gemini", GEMINI_TURN)
    assert activities(derived) == ["thinking", "executing", "waiting_for_input", "thinking", "idle"]
    assert "pre-compact" not in names(derived)
    assert names(derived).count("model-end") == 2  # one per model call, not per chunk


def test_codex_a_turn_with_an_approval_ends_once_though_stop_and_notify_both_tell_it() -> None:
    derived = derive("codex", CODEX_TURN)
    assert activities(derived) == ["thinking", "executing", "waiting_for_input", "thinking", "idle"]
    assert names(derived).count("agent-end") == 1
    assert "task-completed" not in names(derived)  # as for Claude Code and Gemini CLI


def test_codex_notify_alone_ends_each_turn() -> None:
    turn_end = notify("agent-turn-complete", **{"last-assistant-message": "Done."})
    derived = derive("codex", [turn_end, turn_end])
    assert names(derived).count("agent-end") == 2


def test_codex_completes_a_headless_task_at_the_turn_end_when_asked() -> None:
    derived = derive("codex", CODEX_TURN, turn_end_completes_task=True)
    completed = [d for d in derived if d.event == "task-completed"]
    assert [d.fields["TASK_SUMMARY"] for d in completed] == ["All tests pass."]


@pytest.mark.parametrize(
    ("dialect", "turn"), [("claude", CLAUDE_TURN), ("gemini", GEMINI_TURN), ("codex", CODEX_TURN)]
)
def test_the_same_moments_give_the_same_events_in_every_dialect(
    dialect: str, turn: list[Step]
) -> None:
    derived = derive(dialect, turn)
    prompts = [d for d in derived if d.event == "notification"]
    assert [(p.fields["NOTIFICATION_TYPE"], p.fields["ACTIVITY"]) for p in prompts] == [
        ("permission_prompt", "waiting_for_input")
    ]
    turn_end = next(i for i, d in enumerate(derived) if d.event == "agent-end")
    assert derived[turn_end + 1] == Derived(
        "activity-change", {"ACTIVITY": "idle", "PREVIOUS_ACTIVITY": "thinking"}
    )
    assert all(d.fields.get("HARNESS_SESSION_ID") == "harness-session-1" for d in prompts)
    assert not any("SESSION_ID" in d.fields for d in derived)


@pytest.mark.parametrize(
    ("dialect", "turn"), [("claude", CLAUDE_TURN), ("gemini", GEMINI_TURN), ("codex", CODEX_TURN)]
)
def test_a_headless_run_completes_its_task_at_the_end_of_its_turn_when_asked(
    dialect: str, turn: list[Step]
) -> None:
    derived = derive(dialect, turn, turn_end_completes_task=True)
    completed = [d for d in derived if d.event == "task-completed"]
    assert [(d.fields["TASK_SUMMARY"], d.fields["ASSISTANT_TEXT"]) for d in completed] == [
        ("All tests pass.", "All tests pass.")
    ]
    assert activities(derived)[-1] == "completed"


def test_a_manual_gemini_compression_is_a_compaction() -> None:
    derived = derive("gemini", [hook("PreCompress", trigger="manual")])
    assert names(derived) == ["pre-compact"]


def test_claude_ask_user_question_waits_until_its_answer_comes_back() -> None:
    derived = derive(
        "claude",
        [
            hook("UserPromptSubmit", prompt="plan it"),
            hook("PreToolUse", tool_name="AskUserQuestion"),
            hook("PostToolUse", tool_name="AskUserQuestion"),
            hook("PreToolUse", tool_name="Write"),
            hook("PostToolUse", tool_name="Write"),
            hook("Stop", last_assistant_message="Written."),
        ],
    )
    assert activities(derived) == [
        "thinking",
        "waiting_for_input",
        "thinking",
        "executing",
        "thinking",
        "idle",
    ]
