"""Gemini CLI hooks (https://geminicli.com/docs/hooks/reference).

Base input: `session_id`, `transcript_path`, `cwd`, `hook_event_name`, `timestamp`, plus the
event's own fields. `AfterModel` fires for every streamed chunk, so only the chunk that carries a
`finishReason` becomes `model-end`: one model call counts once against `max_model_calls`.
`SessionEnd` is not translated, for the reason given in the claude dialect.
"""

from __future__ import annotations

from ..normalized import (
    ASSISTANT_TEXT,
    ERROR_MESSAGE,
    MESSAGE,
    NOTIFICATION_TYPE,
    PROMPT,
    SOURCE,
    TOOL_INPUT,
    TOOL_NAME,
    TOOL_OUTPUT,
    TRANSCRIPT_PATH,
    NormalizedEvent,
)
from ._common import as_text, event, nested, text

# The hook command runs this on every harness event: `typing` (milliseconds) is for checkers.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

NAME = "gemini"

_SIMPLE: dict[str, str] = {
    "SessionStart": "session-start",
    "BeforeAgent": "agent-start",
    "AfterAgent": "agent-end",
    "BeforeModel": "model-start",
    "AfterModel": "model-end",
    "BeforeTool": "tool-start",
    "AfterTool": "tool-end",
    "Notification": "notification",
    "PreCompress": "pre-compact",
}


def translate(payload: dict[str, Any], argv_extra: list[str]) -> list[NormalizedEvent]:
    """Gemini CLI hook payload -> normalized events."""
    raw = text(payload, "hook_event_name")
    name = _SIMPLE.get(raw)
    if name is None or (raw == "AfterModel" and not _is_final_chunk(payload)):
        return []
    fields: dict[str, str] = {
        TRANSCRIPT_PATH: text(payload, "transcript_path"),
        TOOL_NAME: text(payload, "tool_name"),
    }
    if raw == "BeforeAgent":
        fields[PROMPT] = text(payload, "prompt")
    elif raw == "AfterAgent":
        fields[ASSISTANT_TEXT] = text(payload, "prompt_response").strip()
    elif raw == "AfterTool":
        fields[ERROR_MESSAGE] = as_text(nested(payload, "tool_response", "error"))
        # What the model is given back (`llmContent`); the whole response when it has none.
        output = nested(payload, "tool_response", "llmContent")
        fields[TOOL_OUTPUT] = as_text(payload.get("tool_response") if output is None else output)
    elif raw == "Notification":
        fields[MESSAGE] = text(payload, "message")
        fields[NOTIFICATION_TYPE] = text(payload, "notification_type")
        fields[TOOL_NAME] = as_text(nested(payload, "details", "toolName")) or as_text(
            nested(payload, "details", "tool_name")
        )
    elif raw in ("SessionStart", "PreCompress"):
        fields[SOURCE] = text(payload, "source", "trigger")
    if raw in ("BeforeTool", "AfterTool"):
        fields[TOOL_INPUT] = as_text(payload.get("tool_input"))
    return [event(name, NAME, raw, payload, **fields)]


def _is_final_chunk(payload: dict[str, Any]) -> bool:
    candidates = nested(payload, "llm_response", "candidates")
    if not isinstance(candidates, list) or not candidates:
        return True  # nothing says it is a partial chunk
    return any(isinstance(c, dict) and c.get("finishReason") for c in candidates)
