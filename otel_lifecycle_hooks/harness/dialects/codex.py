"""OpenAI Codex: its hooks and its legacy `notify` program.

Hooks (https://developers.openai.com/codex/hooks) send a Claude-shaped object on stdin
(`hook_event_name`, `session_id`, `turn_id`, `transcript_path`, `model`, ...), translated as the
claude dialect does, plus `PreModelRequest` (before each model request) as `model-start`.
`PermissionRequest` is the approval prompt, a `notification` as for Claude. `SessionEnd` is not
translated, for the reason given in the claude dialect. The legacy `notify = [...]` program instead
receives one JSON object as its LAST argv element: `{"type": "agent-turn-complete", "thread-id":
..., "turn-id": ..., "input-messages": [...], "last-assistant-message": ...}`; that one is the end
of the turn (`agent-end`, as the Stop hook is), so that a turn ends with the same events as under
Claude Code and Gemini CLI; told by both Stop and notify, the turn ends once (harness/activity.py).
Already-normalized names (`tool-start`, ...) in `type` or `event` pass through.
"""

from __future__ import annotations

import json

from ...events import RUNTIME_EVENTS
from ..normalized import ASSISTANT_TEXT, MESSAGE, NOTIFICATION_TYPE, TOOL_NAME, NormalizedEvent
from ._common import event, text
from .claude import translate_hook_payload

NAME = "codex"

_NOTIFY_TYPES: dict[str, str] = {
    "agent-turn-complete": "agent-end",
    "approval-requested": "notification",
    "notification": "notification",
}


def notify_payload(argv_extra: list[str]) -> dict[str, object] | None:
    """The JSON object Codex's `notify` passes as the last argument, if there is one."""
    if not argv_extra:
        return None
    try:
        value = json.loads(argv_extra[-1])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def translate(payload: dict[str, object], argv_extra: list[str]) -> list[NormalizedEvent]:
    """Codex hook payload (stdin) or notify payload (last argv element) -> normalized events."""
    notified = notify_payload(argv_extra)
    if notified is not None:
        payload = notified
    hook_name = text(payload, "hook_event_name")
    if hook_name == "PreModelRequest":
        return [event("model-start", NAME, hook_name, payload)]
    if hook_name and hook_name not in RUNTIME_EVENTS and not text(payload, "type"):
        return translate_hook_payload(payload, NAME)
    raw = text(payload, "type", "event", "hook_event_name")
    name = _NOTIFY_TYPES.get(raw) or (raw if raw in RUNTIME_EVENTS else None)
    if name is None:
        return []
    fields = {
        ASSISTANT_TEXT: text(payload, "last-assistant-message", "last_assistant_message").strip(),
        MESSAGE: text(payload, "title", "message"),
        TOOL_NAME: text(payload, "tool_name"),
        # The approval prompt, named as the hooks' PermissionRequest (and Claude's) name it.
        NOTIFICATION_TYPE: "permission_prompt" if raw == "approval-requested" else "",
    }
    session = {"session_id": text(payload, "thread-id", "session_id", "thread_id")}
    return [event(name, NAME, raw, session, **fields)]
