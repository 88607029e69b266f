"""Activity derivation: Scion's rules, as a pure state machine over normalized events.

`ActivityTracker.observe(event)` returns what to dispatch, in order:

1. the runtime event itself (templates may name runtime events), with ACTIVITY added;
2. `activity-change` with ACTIVITY, PREVIOUS_ACTIVITY (and TOOL_NAME while executing), only
   when the activity really changed;
3. `task-completed` when the event completed the task (see below).

The rules (SPEC section 3, Scion's status handler):

- new work clears any sticky activity: prompt-submit and agent-start -> thinking,
  session-start -> idle;
- tool-start -> executing; the tools that wait for the user (AskUserQuestion, ExitPlanMode)
  -> waiting_for_input; a tool-start also ends waiting_for_input (the user answered), but
  never blocked, completed or limits_exceeded;
- model-start -> thinking; tool-end, agent-end, model-end -> idle;
- notification -> waiting_for_input, whatever the activity was;
- response-complete -> completed;
- waiting_for_input, blocked, completed and limits_exceeded are sticky: the rules above that
  do not clear them leave them as they are.

Completion: a `response-complete` that moves the activity to completed emits `task-completed`
with TASK_SUMMARY (the assistant's text). A harness's end of turn (`agent-end`, Claude's Stop)
does not: the agent says a task is done with `status task_completed`, as under Scion.

Explicit status signals (`signal`): ask_user -> waiting_for_input, blocked -> blocked,
task_completed -> completed plus `task-completed` (always, with the message as TASK_SUMMARY),
limits_exceeded -> limits_exceeded plus `limits-exceeded`.

Counters for the supervisor's limits: `turns` counts agent-end, `model_calls` counts model-end.
The tracker does no I/O; its only clock is the one it is given.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..events import ACTIVITY_CHANGE, LIMITS_EXCEEDED, STICKY_ACTIVITIES, TASK_COMPLETED
from .dialects._common import WAITING_TOOLS
from .normalized import ASSISTANT_TEXT, MESSAGE, TASK_SUMMARY, TOOL_NAME, NormalizedEvent

STATUS_SIGNALS: dict[str, str] = {
    "ask_user": "waiting_for_input",
    "blocked": "blocked",
    "task_completed": "completed",
    "limits_exceeded": "limits_exceeded",
}

_NEW_WORK: dict[str, str] = {
    "prompt-submit": "thinking",
    "agent-start": "thinking",
    "session-start": "idle",
}
_ORDINARY: dict[str, str] = {
    "model-start": "thinking",
    "tool-end": "idle",
    "agent-end": "idle",
    "model-end": "idle",
    "response-complete": "completed",
}


@dataclass(frozen=True)
class Derived:
    """One event to dispatch: a template or runtime event name and its variables."""

    event: str
    fields: dict[str, str] = field(default_factory=dict)


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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self.activity = activity
        self.tool_name = tool_name
        self.turns = turns
        self.model_calls = model_calls
        self.since = clock() if since is None else since

    def observe(self, event: NormalizedEvent) -> list[Derived]:
        """Apply one harness event; return what to dispatch, in order."""
        name = event.event
        if name == "agent-end":
            self.turns += 1
        elif name == "model-end":
            self.model_calls += 1
        previous = self.activity
        tool = event.fields.get(TOOL_NAME, "")
        target = self._target(name, tool)
        if target is not None:
            self._move(target, tool)
        fields = dict(event.fields)
        fields["ACTIVITY"] = self.activity
        if event.session_id:
            fields["SESSION_ID"] = event.session_id
        derived = [Derived(name, fields)]
        derived += self._change(previous)
        became_completed = previous != "completed" and self.activity == "completed"
        if name == "response-complete" and became_completed:
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
            derived.append(Derived(LIMITS_EXCEEDED, {MESSAGE: message, "ACTIVITY": self.activity}))
        return derived

    def snapshot(self) -> dict[str, Any]:
        """The tracker's state as plain JSON values (see `from_snapshot`)."""
        return {
            "activity": self.activity,
            "tool_name": self.tool_name,
            "turns": self.turns,
            "model_calls": self.model_calls,
            "since": self.since,
        }

    @classmethod
    def from_snapshot(
        cls, snapshot: Mapping[str, Any], clock: Callable[[], float] = time.time
    ) -> ActivityTracker:
        """A tracker resumed from `snapshot()`; values of the wrong type fall back to defaults."""

        def pick(key: str, kind: type | tuple[type, ...], default: Any) -> Any:
            value = snapshot.get(key)
            return value if isinstance(value, kind) and not isinstance(value, bool) else default

        return cls(
            pick("activity", str, "idle"),
            tool_name=pick("tool_name", str, ""),
            turns=pick("turns", int, 0),
            model_calls=pick("model_calls", int, 0),
            since=pick("since", (int, float), None),
            clock=clock,
        )

    def _target(self, name: str, tool: str) -> str | None:
        """The activity `name` moves to, or None to stay where we are."""
        if name in _NEW_WORK:
            return _NEW_WORK[name]
        if name == "notification":
            return "waiting_for_input"
        if name == "tool-start":
            if tool in WAITING_TOOLS:
                return "waiting_for_input"
            if self.activity in STICKY_ACTIVITIES and self.activity != "waiting_for_input":
                return None
            return "executing"
        target = _ORDINARY.get(name)
        if target is None or self.activity in STICKY_ACTIVITIES:
            return None
        return target

    def _move(self, activity: str, tool: str) -> None:
        tool = tool if activity == "executing" else ""
        if (activity, tool) != (self.activity, self.tool_name):
            self.since = self._clock()
        self.activity, self.tool_name = activity, tool

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
            fields["SESSION_ID"] = event.session_id
        return fields
