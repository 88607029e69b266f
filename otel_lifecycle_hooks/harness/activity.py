"""Activity derivation: a pure state machine over normalized events.

`ActivityTracker.observe(event)` returns what to dispatch, in order:

1. the runtime event itself (templates may name runtime events), with ACTIVITY added and the
   harness's own session id as HARNESS_SESSION_ID (SESSION_ID stays the supervised session's);
2. `activity-change` with ACTIVITY, PREVIOUS_ACTIVITY (and TOOL_NAME while executing), only
   when the activity really changed;
3. `task-completed` when the event completed the task (see below).

The rules start from Scion's status handler, corrected by what the real harnesses do
(docs/harness-protocol.md has the sequences):

- new work clears any sticky activity: prompt-submit and agent-start -> thinking (a turn
  opens), session-start -> idle;
- tool-start -> executing; the tools that wait for the user (AskUserQuestion, ExitPlanMode)
  -> waiting_for_input;
- within a turn the model keeps working after a call ends: tool-end, model-end and
  subagent-end -> thinking (idle only outside a turn), model-start -> thinking. Idle comes with
  the end of the turn (agent-end), completed with response-complete. A turn opens with
  prompt-submit, agent-start or any model or tool start, and closes with its end;
- notification -> waiting_for_input, whatever the activity was (except a notification that
  asks nothing of the user, such as Claude's `auth_success`). Harnesses tell one permission
  prompt twice (Claude: PermissionRequest and Notification): a second notification of the same
  kind while still waiting derives nothing;
- waiting_for_input ends with whatever shows that work resumed after the answer: any tool,
  model or turn event. Gemini and Codex ask after BeforeTool/PreToolUse, so no tool-start
  follows the answer; the tool's end, the next model call or the end of the turn does;
- blocked, completed and limits_exceeded are sticky: only new work clears them.

Completion: a `response-complete` that moves the activity to completed emits `task-completed`
with TASK_SUMMARY (the assistant's text). An end of turn (`agent-end`) does not, unless the
tracker was made with `turn_end_completes_task=True` (the setting
`LIFECYCLE_HOOKS_TURN_END_COMPLETES_TASK`, meant for headless runs whose one turn is the
task): then a turn that ends without an error completes the task with the turn's final text.
Otherwise the agent says a task is done with `status task_completed`, as under Scion.

Explicit status signals (`signal`): ask_user -> waiting_for_input, blocked -> blocked,
task_completed -> completed plus `task-completed` (always, with the message as TASK_SUMMARY),
limits_exceeded -> limits_exceeded plus `limits-exceeded`.

Counters for the supervisor's limits: `turns` counts the agent-ends that close a turn,
`model_calls` counts model-start (Codex tells no model-end; Claude Code tells neither). The
tracker does no I/O; its only clock is the one it is given.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..events import ACTIVITY_CHANGE, LIMITS_EXCEEDED, REPORTED_LIMIT, TASK_COMPLETED
from .dialects._common import WAITING_TOOLS
from .normalized import (
    ASSISTANT_TEXT,
    ERROR_TYPE,
    HARNESS_SESSION_ID,
    MESSAGE,
    NOTIFICATION_TYPE,
    TASK_SUMMARY,
    TOOL_NAME,
    NormalizedEvent,
)

STATUS_SIGNALS: dict[str, str] = {
    "ask_user": "waiting_for_input",
    "blocked": "blocked",
    "task_completed": "completed",
    "limits_exceeded": "limits_exceeded",
}

# The setting (an environment variable, or the template's `env:`) that makes an end of turn a
# completed task; "true", "1" or "yes" turn it on.
TURN_END_COMPLETES_TASK = "LIFECYCLE_HOOKS_TURN_END_COMPLETES_TASK"

_NEW_WORK: dict[str, str] = {
    "prompt-submit": "thinking",
    "agent-start": "thinking",
    "session-start": "idle",
}
# Work that starts (and so opens a turn, if none is open), and the ends of calls within one:
# inside a turn the model goes on with their results (thinking); outside one, nothing runs.
_OPENS_TURN = frozenset({"prompt-submit", "agent-start", "model-start", "tool-start"})
_CALL_ENDS = frozenset({"model-end", "tool-end", "subagent-end"})
_TURN_ENDS = frozenset({"agent-end", "response-complete"})
# Only new work ends these; waiting_for_input also ends when work resumes.
_HELD = frozenset({"blocked", "completed", "limits_exceeded"})
# Notifications that tell the user something without waiting for an answer.
_NOT_WAITING = frozenset({"auth_success"})


@dataclass(frozen=True)
class Derived:
    """One event to dispatch: a template or runtime event name and its variables."""

    event: str
    fields: dict[str, str] = field(default_factory=dict)


def turn_end_completes_task(*sources: Mapping[str, str]) -> bool:
    """`LIFECYCLE_HOOKS_TURN_END_COMPLETES_TASK` from the first of `sources` that sets it."""
    for source in sources:
        value = source.get(TURN_END_COMPLETES_TASK)
        if value:
            return value.strip().lower() in ("1", "true", "yes")
    return False


class ActivityTracker:
    """The current activity of one agent, moved by normalized events and status signals."""

    def __init__(
        self,
        activity: str = "idle",
        *,
        tool_name: str = "",
        turns: int = 0,
        model_calls: int = 0,
        since: float | None = None,
        in_turn: bool = False,
        waiting_on: str | None = None,
        turn_end_completes_task: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self.activity = activity
        self.tool_name = tool_name
        self.turns = turns
        self.model_calls = model_calls
        self.since = clock() if since is None else since
        # Whether a turn is open: work seen since the last end of turn.
        self.in_turn = in_turn
        # The harness event that ended the last turn, while nothing else has come since.
        self.turn_ended_by: str | None = None
        # The notification kind the agent waits on, None when the wait did not come from one.
        self.waiting_on = waiting_on
        self.turn_end_completes_task = turn_end_completes_task

    def observe(self, event: NormalizedEvent) -> list[Derived]:
        """Apply one harness event; return what to dispatch, in order."""
        name = event.event
        if name == "notification" and self._repeats_the_prompt(event):
            return []  # the same prompt told a second time: the first one was dispatched
        if self._repeats_the_turn_end(event):
            return []  # Codex tells one turn's end twice (Stop, then notify)
        self.turn_ended_by = (event.raw_event or name) if name in _TURN_ENDS else None
        previous = self.activity
        completes = False
        if name == "model-start":
            # Counted at its start: Codex reports only that (PreModelRequest), Gemini both.
            self.model_calls += 1
        if name in _TURN_ENDS:
            if name == "agent-end" and self.in_turn:
                self.turns += 1
            completes = name == "response-complete" or (
                self.turn_end_completes_task and self.in_turn and not event.fields.get(ERROR_TYPE)
            )
            self.in_turn = False
        elif name == "session-start":
            self.in_turn = False
        elif name in _OPENS_TURN:
            self.in_turn = True
        tool = event.fields.get(TOOL_NAME, "")
        target = self._target(name, tool, event, completes)
        if target is not None:
            self._move(target, tool)
            if name == "notification":
                self.waiting_on = event.fields.get(NOTIFICATION_TYPE, "")
        fields = dict(event.fields)
        fields["ACTIVITY"] = self.activity
        if event.session_id:
            fields[HARNESS_SESSION_ID] = event.session_id
        derived = [Derived(name, fields)]
        derived += self._change(previous)
        if completes and previous != "completed" and self.activity == "completed":
            summary = event.fields.get(TASK_SUMMARY) or event.fields.get(ASSISTANT_TEXT, "")
            derived.append(Derived(TASK_COMPLETED, self._completion_fields(event, summary)))
        return derived

    def signal(self, status: str, message: str = "") -> list[Derived]:
        """Apply an explicit status signal (`status ask_user|blocked|...`)."""
        target = STATUS_SIGNALS.get(status)
        if target is None:
            raise ValueError(f"unknown status {status!r}: use one of {', '.join(STATUS_SIGNALS)}")
        previous = self.activity
        self._move(target, "")
        derived = self._change(previous, {MESSAGE: message} if message else {})
        if status == "task_completed":
            derived.append(
                Derived(TASK_COMPLETED, {TASK_SUMMARY: message, "ACTIVITY": self.activity})
            )
        elif status == "limits_exceeded":
            fields = {"LIMIT_NAME": REPORTED_LIMIT, MESSAGE: message, "ACTIVITY": self.activity}
            derived.append(Derived(LIMITS_EXCEEDED, fields))
        return derived

    def snapshot(self) -> dict[str, object]:
        """The tracker's state as plain JSON values (see `from_snapshot`)."""
        return {
            "activity": self.activity,
            "tool_name": self.tool_name,
            "turns": self.turns,
            "model_calls": self.model_calls,
            "since": self.since,
            "in_turn": self.in_turn,
            "waiting_on": self.waiting_on,
        }

    @classmethod
    def from_snapshot(
        cls,
        snapshot: Mapping[str, object],
        clock: Callable[[], float] = time.time,
        *,
        turn_end_completes_task: bool = False,
    ) -> ActivityTracker:
        """A tracker resumed from `snapshot()`; values of the wrong type fall back to defaults."""

        def pick(key: str, kind: type | tuple[type, ...], default: Any) -> Any:
            value = snapshot.get(key)
            if kind is bool:
                return value if isinstance(value, bool) else default
            return value if isinstance(value, kind) and not isinstance(value, bool) else default

        return cls(
            pick("activity", str, "idle"),
            tool_name=pick("tool_name", str, ""),
            turns=pick("turns", int, 0),
            model_calls=pick("model_calls", int, 0),
            since=pick("since", (int, float), None),
            in_turn=pick("in_turn", bool, False),
            waiting_on=pick("waiting_on", str, None),
            turn_end_completes_task=turn_end_completes_task,
            clock=clock,
        )

    def _repeats_the_turn_end(self, event: NormalizedEvent) -> bool:
        """An end of turn right after another one told by a different harness event: the same
        moment twice. One source telling consecutive turn ends (notify alone) is not."""
        return (
            event.event == "agent-end"
            and not self.in_turn
            and self.turn_ended_by is not None
            and self.turn_ended_by != (event.raw_event or event.event)
        )

    def _repeats_the_prompt(self, event: NormalizedEvent) -> bool:
        return (
            self.activity == "waiting_for_input"
            and self.waiting_on is not None
            and self.waiting_on == event.fields.get(NOTIFICATION_TYPE, "")
        )

    def _target(self, name: str, tool: str, event: NormalizedEvent, completes: bool) -> str | None:
        """The activity `name` moves to, or None to stay where we are."""
        if name in _NEW_WORK:
            return _NEW_WORK[name]
        if name == "notification":
            kind = event.fields.get(NOTIFICATION_TYPE, "")
            return None if kind in _NOT_WAITING else "waiting_for_input"
        if name == "tool-start" and tool in WAITING_TOOLS:
            return "waiting_for_input"
        if self.activity in _HELD:
            return None
        if name == "tool-start":
            return "executing"
        if name == "model-start":
            return "thinking"
        if name in _CALL_ENDS:
            return "thinking" if self.in_turn else "idle"
        if name in _TURN_ENDS:
            return "completed" if completes else "idle"
        return None

    def _move(self, activity: str, tool: str) -> None:
        tool = tool if activity == "executing" else ""
        if (activity, tool) != (self.activity, self.tool_name):
            self.since = self._clock()
        self.activity, self.tool_name = activity, tool
        self.waiting_on = None  # `observe` names the notification a wait came from

    def _change(self, previous: str, extra: Mapping[str, str] | None = None) -> list[Derived]:
        if previous == self.activity:
            return []
        fields = {"ACTIVITY": self.activity, "PREVIOUS_ACTIVITY": previous, **(extra or {})}
        if self.tool_name:
            fields[TOOL_NAME] = self.tool_name
        return [Derived(ACTIVITY_CHANGE, fields)]

    def _completion_fields(self, event: NormalizedEvent, summary: str) -> dict[str, str]:
        fields = {TASK_SUMMARY: summary, "ACTIVITY": self.activity}
        if ASSISTANT_TEXT in event.fields:
            fields[ASSISTANT_TEXT] = event.fields[ASSISTANT_TEXT]
        if event.session_id:
            fields[HARNESS_SESSION_ID] = event.session_id
        return fields
