"""core-agent's hooks envelope (seed 001).

core-agent spawns its configured commands with one JSON object on stdin whose top-level
`hook_event_name` is already a name of the normalized vocabulary (`tool-start`, `tool-end`,
`model-start`, `agent-end`, ...) and whose `session_id` is the agent's session, when it has one.
The names pass through unchanged; the usual payload fields are read where present.
"""

from __future__ import annotations

from ...events import RUNTIME_EVENTS
from ..normalized import (
    ASSISTANT_TEXT,
    ERROR_MESSAGE,
    MESSAGE,
    PROMPT,
    TASK_SUMMARY,
    TOOL_NAME,
    NormalizedEvent,
)
from ._common import event, text

NAME = "core-agent"


def translate(payload: dict[str, object], argv_extra: list[str]) -> list[NormalizedEvent]:
    """core-agent envelope -> the normalized event it names."""
    raw = text(payload, "hook_event_name")
    if raw not in RUNTIME_EVENTS:
        return []
    fields = {
        TOOL_NAME: text(payload, "tool_name"),
        ASSISTANT_TEXT: text(payload, "assistant_text", "last_assistant_message").strip(),
        TASK_SUMMARY: text(payload, "task_summary"),
        MESSAGE: text(payload, "message"),
        PROMPT: text(payload, "prompt"),
        ERROR_MESSAGE: text(payload, "error_message", "error"),
    }
    return [event(raw, NAME, raw, payload, **fields)]
