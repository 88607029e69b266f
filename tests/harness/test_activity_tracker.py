"""The activity tracker follows Scion's rules, sticky states included, without I/O or sleeps."""

from __future__ import annotations

import pytest

from otel_lifecycle_hooks.harness.activity import ActivityTracker, Derived, turn_end_completes_task
from otel_lifecycle_hooks.harness.normalized import NormalizedEvent

SETTING = "LIFECYCLE_HOOKS_TURN_END_COMPLETES_TASK"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ev(name: str, **fields: str) -> NormalizedEvent:
    return NormalizedEvent(name, "test", fields=fields)


def activity_after(start: str, *events: NormalizedEvent) -> str:
    tracker = ActivityTracker(start, clock=FakeClock())
    for event in events:
        tracker.observe(event)
    return tracker.activity


@pytest.mark.parametrize(
    ("start", "event", "expected"),
    [
        ("idle", ev("prompt-submit"), "thinking"),
        ("idle", ev("agent-start"), "thinking"),
        ("executing", ev("model-start"), "thinking"),
        ("thinking", ev("tool-start", TOOL_NAME="Bash"), "executing"),
        ("thinking", ev("tool-start", TOOL_NAME="AskUserQuestion"), "waiting_for_input"),
        ("thinking", ev("tool-start", TOOL_NAME="ExitPlanMode"), "waiting_for_input"),
        ("executing", ev("notification"), "waiting_for_input"),
        ("thinking", ev("response-complete"), "completed"),
        ("thinking", ev("session-start"), "idle"),
    ],
)
def test_each_event_moves_a_working_agent_to_its_activity(
    start: str, event: NormalizedEvent, expected: str
) -> None:
    assert activity_after(start, event) == expected


@pytest.mark.parametrize("ending", ["tool-end", "model-end", "subagent-end"])
def test_within_a_turn_the_model_keeps_working_after_a_call_ends(ending: str) -> None:
    assert activity_after("idle", ev("prompt-submit"), ev("tool-start"), ev(ending)) == "thinking"


@pytest.mark.parametrize("ending", ["agent-end"])
def test_the_end_of_the_turn_is_idle(ending: str) -> None:
    assert activity_after("idle", ev("prompt-submit"), ev("tool-start"), ev(ending)) == "idle"


def test_a_model_end_after_the_turn_ended_is_idle() -> None:
    assert activity_after("idle", ev("agent-end"), ev("model-end")) == "idle"


@pytest.mark.parametrize("sticky", ["blocked", "completed", "limits_exceeded"])
@pytest.mark.parametrize(
    "event", ["model-start", "tool-end", "agent-end", "model-end", "response-complete"]
)
def test_held_activities_hold_against_work_events(sticky: str, event: str) -> None:
    assert activity_after(sticky, ev(event)) == sticky


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ("tool-end", "thinking"),  # Gemini and Codex ask after BeforeTool/PreToolUse
        ("model-start", "thinking"),
        ("model-end", "thinking"),
        ("tool-start", "executing"),
        ("agent-end", "idle"),
        ("response-complete", "completed"),
    ],
)
def test_waiting_for_input_ends_when_work_resumes_whatever_event_shows_it(
    event: str, expected: str
) -> None:
    asked = (ev("prompt-submit"), ev("tool-start", TOOL_NAME="Bash"), ev("notification"))
    assert activity_after("idle", *asked, ev(event, TOOL_NAME="Bash")) == expected


@pytest.mark.parametrize("event", ["pre-compact", "post-compact", "notification"])
def test_events_that_are_no_work_leave_waiting_for_input_alone(event: str) -> None:
    assert activity_after("waiting_for_input", ev(event)) == "waiting_for_input"


@pytest.mark.parametrize("sticky", ["waiting_for_input", "blocked", "completed", "limits_exceeded"])
@pytest.mark.parametrize(
    ("work", "expected"),
    [("prompt-submit", "thinking"), ("agent-start", "thinking"), ("session-start", "idle")],
)
def test_new_work_clears_every_sticky_activity(sticky: str, work: str, expected: str) -> None:
    assert activity_after(sticky, ev(work)) == expected


def test_a_tool_start_means_the_user_answered_but_does_not_end_other_sticky_states() -> None:
    assert activity_after("waiting_for_input", ev("tool-start", TOOL_NAME="Bash")) == "executing"
    for sticky in ("blocked", "completed", "limits_exceeded"):
        assert activity_after(sticky, ev("tool-start", TOOL_NAME="Bash")) == sticky


def test_notification_and_waiting_tools_override_any_sticky_state() -> None:
    assert activity_after("blocked", ev("notification")) == "waiting_for_input"
    assert (
        activity_after("completed", ev("tool-start", TOOL_NAME="AskUserQuestion"))
        == "waiting_for_input"
    )


def test_a_notification_that_asks_nothing_is_not_a_wait() -> None:
    assert activity_after("thinking", ev("notification", NOTIFICATION_TYPE="auth_success")) == (
        "thinking"
    )


def test_one_permission_prompt_told_twice_is_dispatched_once() -> None:
    # Claude Code tells one prompt as PermissionRequest and as Notification(permission_prompt).
    tracker = ActivityTracker("executing", clock=FakeClock())
    prompt = {"NOTIFICATION_TYPE": "permission_prompt"}
    first = tracker.observe(ev("notification", TOOL_NAME="Bash", **prompt))
    assert [d.event for d in first] == ["notification", "activity-change"]
    assert (
        tracker.observe(ev("notification", MESSAGE="Claude needs your permission", **prompt)) == []
    )
    tracker.observe(ev("tool-end", TOOL_NAME="Bash"))
    again = tracker.observe(ev("notification", TOOL_NAME="Bash", **prompt))
    assert [d.event for d in again] == ["notification", "activity-change"]


def test_compaction_events_leave_the_activity_alone() -> None:
    for name in ("pre-compact", "post-compact"):
        assert activity_after("executing", ev(name)) == "executing"


def test_the_runtime_event_comes_first_then_the_activity_change() -> None:
    tracker = ActivityTracker("thinking", clock=FakeClock())
    derived = tracker.observe(
        NormalizedEvent("tool-start", "claude", "PreToolUse", "s-1", {"TOOL_NAME": "Bash"})
    )
    assert derived == [
        Derived(
            "tool-start",
            {"TOOL_NAME": "Bash", "ACTIVITY": "executing", "HARNESS_SESSION_ID": "s-1"},
        ),
        Derived(
            "activity-change",
            {"ACTIVITY": "executing", "PREVIOUS_ACTIVITY": "thinking", "TOOL_NAME": "Bash"},
        ),
    ]


def test_activity_change_is_emitted_only_on_a_real_change() -> None:
    tracker = ActivityTracker("idle", clock=FakeClock())
    names = [
        [d.event for d in tracker.observe(e)]
        for e in (
            ev("model-start"),
            ev("model-start"),
            ev("tool-start", TOOL_NAME="Read"),
            ev("tool-start", TOOL_NAME="Grep"),
        )
    ]
    assert names == [
        ["model-start", "activity-change"],
        ["model-start"],
        ["tool-start", "activity-change"],
        ["tool-start"],
    ]
    assert tracker.tool_name == "Grep"


def test_response_complete_completes_the_task_once() -> None:
    tracker = ActivityTracker("thinking", clock=FakeClock())
    first = tracker.observe(ev("response-complete", ASSISTANT_TEXT="Fixed the bug."))
    assert first[1:] == [
        Derived("activity-change", {"ACTIVITY": "completed", "PREVIOUS_ACTIVITY": "thinking"}),
        Derived(
            "task-completed",
            {
                "TASK_SUMMARY": "Fixed the bug.",
                "ACTIVITY": "completed",
                "ASSISTANT_TEXT": "Fixed the bug.",
            },
        ),
    ]
    again = tracker.observe(ev("response-complete", ASSISTANT_TEXT="Fixed the bug."))
    assert [d.event for d in again] == ["response-complete"]


def test_an_end_of_turn_is_not_a_completed_task() -> None:
    tracker = ActivityTracker("thinking", in_turn=True, clock=FakeClock())
    assert "task-completed" not in [
        d.event for d in tracker.observe(ev("agent-end", ASSISTANT_TEXT="hi"))
    ]


def test_with_the_turn_end_setting_an_end_of_turn_completes_the_task_with_its_text() -> None:
    tracker = ActivityTracker(turn_end_completes_task=True, clock=FakeClock())
    tracker.observe(ev("prompt-submit"))
    derived = tracker.observe(
        NormalizedEvent("agent-end", "claude", "Stop", "s-1", {"ASSISTANT_TEXT": "Done: 4"})
    )
    assert derived[1:] == [
        Derived("activity-change", {"ACTIVITY": "completed", "PREVIOUS_ACTIVITY": "thinking"}),
        Derived(
            "task-completed",
            {
                "TASK_SUMMARY": "Done: 4",
                "ACTIVITY": "completed",
                "ASSISTANT_TEXT": "Done: 4",
                "HARNESS_SESSION_ID": "s-1",
            },
        ),
    ]
    # Codex then also says agent-turn-complete: the task is not completed twice.
    assert [d.event for d in tracker.observe(ev("response-complete"))] == ["response-complete"]


def test_with_the_turn_end_setting_a_failed_turn_is_no_completed_task() -> None:
    tracker = ActivityTracker(turn_end_completes_task=True, clock=FakeClock())
    tracker.observe(ev("prompt-submit"))
    derived = tracker.observe(ev("agent-end", ERROR_TYPE="rate_limit"))
    assert [d.event for d in derived] == ["agent-end", "activity-change"]
    assert tracker.activity == "idle"


@pytest.mark.parametrize(
    ("environ", "template_env", "expected"),
    [
        ({}, {}, False),
        ({}, {SETTING: "true"}, True),
        ({SETTING: "no"}, {SETTING: "true"}, False),
        ({SETTING: "1"}, {}, True),
    ],
)
def test_the_turn_end_setting_comes_from_the_environment_then_the_template(
    environ: dict[str, str], template_env: dict[str, str], expected: bool
) -> None:
    assert turn_end_completes_task(environ, template_env) is expected


@pytest.mark.parametrize(
    ("status", "activity"),
    [
        ("ask_user", "waiting_for_input"),
        ("blocked", "blocked"),
        ("task_completed", "completed"),
        ("limits_exceeded", "limits_exceeded"),
    ],
)
def test_explicit_signals_set_their_sticky_activity(status: str, activity: str) -> None:
    tracker = ActivityTracker("executing", tool_name="Bash", clock=FakeClock())
    derived = tracker.signal(status, "why")
    assert derived[0] == Derived(
        "activity-change",
        {"ACTIVITY": activity, "PREVIOUS_ACTIVITY": "executing", "MESSAGE": "why"},
    )
    if status != "ask_user":
        assert tracker.observe(ev("tool-end"))[1:] == []  # and it sticks


def test_task_completed_signal_always_reports_the_summary() -> None:
    tracker = ActivityTracker("completed", clock=FakeClock())
    assert tracker.signal("task_completed", "Implemented feature X") == [
        Derived(
            "task-completed", {"TASK_SUMMARY": "Implemented feature X", "ACTIVITY": "completed"}
        )
    ]


def test_limits_exceeded_signal_fires_the_limits_event() -> None:
    derived = ActivityTracker("thinking", clock=FakeClock()).signal(
        "limits_exceeded", "max_turns of 5"
    )
    assert [d.event for d in derived] == ["activity-change", "limits-exceeded"]
    assert derived[1].fields["MESSAGE"] == "max_turns of 5"
    assert derived[1].fields["LIMIT_NAME"] == "reported"  # also without a supervisor


def test_an_unknown_signal_is_refused() -> None:
    with pytest.raises(ValueError, match="ask_user"):
        ActivityTracker(clock=FakeClock()).signal("done")


def test_turns_and_model_calls_are_counted_for_limits() -> None:
    tracker = ActivityTracker(clock=FakeClock())
    names = ("model-start", "model-end", "model-end", "agent-end", "model-start", "model-end")
    for name in (*names, "agent-end", "agent-end"):  # the last one closes no open turn
        tracker.observe(ev(name))
    assert (tracker.turns, tracker.model_calls) == (2, 2)  # each call counted at its start


def test_a_model_call_is_counted_from_codex_which_reports_only_its_start() -> None:
    tracker = ActivityTracker(clock=FakeClock())
    for name in ("prompt-submit", "model-start", "tool-start", "tool-end", "model-start"):
        tracker.observe(ev(name))
    assert tracker.model_calls == 2


def test_the_injected_clock_dates_each_change() -> None:
    clock = FakeClock()
    tracker = ActivityTracker(clock=clock)
    clock.now = 2000.0
    tracker.observe(ev("prompt-submit"))
    clock.now = 3000.0
    tracker.observe(ev("model-start"))  # thinking -> thinking: not a change
    assert tracker.since == 2000.0


def test_a_snapshot_resumes_the_same_tracker() -> None:
    tracker = ActivityTracker(
        "waiting_for_input",
        tool_name="",
        turns=3,
        model_calls=7,
        since=5.0,
        in_turn=True,
        waiting_on="permission_prompt",
        clock=FakeClock(),
    )
    resumed = ActivityTracker.from_snapshot(tracker.snapshot(), clock=FakeClock())
    assert resumed.snapshot() == tracker.snapshot()


def test_a_garbled_snapshot_falls_back_to_defaults() -> None:
    resumed = ActivityTracker.from_snapshot(
        {"activity": 3, "turns": "x", "model_calls": True}, clock=FakeClock()
    )
    assert (resumed.activity, resumed.turns, resumed.model_calls, resumed.since) == (
        "idle",
        0,
        0,
        1000.0,
    )
