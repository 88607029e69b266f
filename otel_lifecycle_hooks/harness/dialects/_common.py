"""Small readers shared by the dialects: payloads are untrusted JSON of any shape."""

from __future__ import annotations

from collections.abc import Mapping

from ..normalized import NormalizedEvent

# Claude Code tools that stop and wait for the user; the activity tracker reads TOOL_NAME.
WAITING_TOOLS = frozenset({"AskUserQuestion", "ExitPlanMode"})


def text(payload: Mapping[str, object], *keys: str) -> str:
    """The first non-empty string value among `keys`, else ""."""
    for key in keys:
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def nested(value: object, *path: str) -> object:
    """`value[path[0]][path[1]]...`, or None where the shape does not match."""
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def event(
    name: str, dialect: str, raw_event: str, payload: Mapping[str, object], **fields: str
) -> NormalizedEvent:
    """A NormalizedEvent with the payload's session id (`session_id`, or camelCase forms)."""
    session_id = text(payload, "session_id", "sessionID", "sessionId", "conversation_id")
    return NormalizedEvent(
        event=name, dialect=dialect, raw_event=raw_event, session_id=session_id, fields=fields
    )
