"""opencode plugin events (https://opencode.ai/docs/plugins).

opencode runs plugins in-process, so a small plugin forwards what it sees as JSON on stdin
(docs/harness-protocol.md has one). Accepted shapes:

- a bus event, as the plugin's `event` hook receives it: `{"type": "session.idle",
  "properties": {"sessionID": ...}}`, bare or wrapped as `{"event": {...}}`;
- a functional hook: `{"type": "tool.execute.before", "input": {"tool", "sessionID",
  "callID"}, "output": {"args"}}`; `tool.execute.after` has `input.args` and `output: {title,
  output, metadata}`; `chat.message` has the prompt's text parts in `output.parts`.

These are the shapes opencode 1.18.33 sends (tests/harness/payloads/opencode/ holds recorded
ones). `session.idle` (the assistant finished and waits) is the end of a turn, `agent-end`; it
carries no text, so the plugin adds `answer`, the last text part of the turn's assistant
messages. `session.error` also ends the turn, with ERROR_MESSAGE.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..normalized import (
    ASSISTANT_TEXT,
    ERROR_MESSAGE,
    ERROR_TYPE,
    MESSAGE,
    NOTIFICATION_TYPE,
    PROMPT,
    TOOL_CALL_ID,
    TOOL_INPUT,
    TOOL_NAME,
    TOOL_OUTPUT,
    NormalizedEvent,
    as_text,
)
from ._common import event, nested, text

NAME = "opencode"

_SIMPLE: dict[str, str] = {
    "session.created": "session-start",
    "chat.message": "prompt-submit",
    "tool.execute.before": "tool-start",
    "tool.execute.after": "tool-end",
    "permission.asked": "notification",
    "permission.updated": "notification",
    "session.idle": "agent-end",
    "session.error": "agent-end",
    "experimental.session.compacting": "pre-compact",
    "session.compacted": "post-compact",
}
# Every raw event or plugin hook this dialect gives meaning to: what the plugin forwards.
TRANSLATED: frozenset[str] = frozenset(_SIMPLE)


def translate(payload: dict[str, object], argv_extra: list[str]) -> list[NormalizedEvent]:
    """opencode plugin event -> normalized events."""
    wrapped = payload.get("event")
    body: Mapping[str, object] = wrapped if isinstance(wrapped, dict) else payload
    raw = text(body, "type")
    name = _SIMPLE.get(raw)
    if name is None:
        return []
    properties = _mapping(body.get("properties"))
    hook_input = _mapping(body.get("input"))
    fields: dict[str, str] = {TOOL_NAME: text(hook_input, "tool")}
    if raw.startswith("tool.execute."):
        fields[TOOL_CALL_ID] = text(hook_input, "callID")
        # Before the call the arguments are the hook's output (a plugin may rewrite them);
        # after it, opencode hands them back in the input.
        arguments = nested(body, "output", "args") if raw == "tool.execute.before" else None
        fields[TOOL_INPUT] = as_text(arguments if arguments is not None else hook_input.get("args"))
        if raw == "tool.execute.after":
            fields[TOOL_OUTPUT] = as_text(nested(body, "output", "output"))
    elif raw == "session.idle":
        fields[ASSISTANT_TEXT] = text(body, "answer")
    elif raw == "chat.message":
        fields[PROMPT] = _parts_text(nested(body, "output", "parts"))
    elif raw.startswith("permission."):
        fields[MESSAGE] = _permission_message(properties)
        fields[NOTIFICATION_TYPE] = "permission_prompt"
        fields[TOOL_NAME] = text(properties, "tool", "type", "permission")
    elif raw == "session.error":
        error = _mapping(properties.get("error"))
        fields[ERROR_TYPE] = text(error, "name")
        fields[ERROR_MESSAGE] = as_text(nested(error, "data", "message")) or text(error, "name")
    session_id = (
        text(properties, "sessionID")
        or as_text(nested(properties, "info", "id"))
        or text(hook_input, "sessionID")
    )
    return [event(name, NAME, raw, {"session_id": session_id}, **fields)]


def _permission_message(properties: Mapping[str, object]) -> str:
    """A title where the event has one; opencode 1.18 sends none, so the permission and what
    it is asked for (`bash: go test ./...`)."""
    titled = text(properties, "title", "message")
    if titled:
        return titled
    asked = text(properties, "permission")
    patterns = properties.get("patterns")
    wanted = [p for p in patterns if isinstance(p, str)] if isinstance(patterns, list) else []
    if asked and wanted:
        return f"{asked}: {', '.join(wanted)}"
    return asked or "Permission requested"


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def _parts_text(parts: object) -> str:
    if not isinstance(parts, list):
        return ""
    texts = [
        part["text"]
        for part in parts
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts).strip()
