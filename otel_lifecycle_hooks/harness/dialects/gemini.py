"""Gemini CLI hooks (https://geminicli.com/docs/hooks/reference).

Base input: `session_id`, `transcript_path`, `cwd`, `hook_event_name`, `timestamp`, plus the
event's own fields. `AfterModel` fires for every streamed chunk, so only the chunk that carries a
`finishReason` becomes `model-end`: one model call counts once against `max_model_calls`.
`SessionEnd` is not translated, for the reason given in the claude dialect.

`PreCompress` fires before every model call with `trigger: auto` (Gemini CLI calls its
compression service each time, and the hook runs before the service checks the token
threshold), so an automatic one says nothing about a compaction; only `trigger: manual`
(`/compress`) is one for sure and becomes `pre-compact`. A `ToolPermission` notification is
the permission prompt, named `permission_prompt` as in the other dialects.

A permission prompt's TOOL_NAME is the name the tool's own events carry (`tool_name` of
`BeforeTool`), as Claude Code's and Codex's prompts give it. Gemini CLI 0.61.0 sends no tool
name with the prompt: `details` is `{type, title}` plus, for `exec` (its shell tool)
`command` and `rootCommand`, for `mcp` the server's `serverName` and `toolName`, for `edit`
the file and its diff, for `info` a prompt and URLs. So `exec` reads as the shell tool, `mcp`
as the tool's name on its server (its `BeforeTool` name is `mcp_<server>_<tool>`), and the
other kinds (each sent by more than one tool) give none.
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
    as_text,
)
from ._common import event, nested, text

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

# Gemini's notification kinds, in the names the other dialects use for the same moment.
_NOTIFICATION_TYPES: dict[str, str] = {"ToolPermission": "permission_prompt"}

# The one tool that asks with `details.type` "exec": Gemini CLI's shell tool.
_SHELL_TOOL = "run_shell_command"


def translate(payload: dict[str, object], argv_extra: list[str]) -> list[NormalizedEvent]:
    """Gemini CLI hook payload -> normalized events."""
    raw = text(payload, "hook_event_name")
    name = _SIMPLE.get(raw)
    if name is None or (raw == "AfterModel" and not _is_final_chunk(payload)):
        return []
    if raw == "PreCompress" and text(payload, "trigger") != "manual":
        return []  # an automatic attempt, made before every model call
    fields: dict[str, str] = {
        TRANSCRIPT_PATH: text(payload, "transcript_path"),
        TOOL_NAME: text(payload, "tool_name"),
    }
    if raw == "BeforeAgent":
        fields[PROMPT] = text(payload, "prompt")
    elif raw == "AfterAgent":
        fields[ASSISTANT_TEXT] = text(payload, "prompt_response").strip()
    elif raw == "AfterTool":
        # Gemini CLI sends the tool result's `error` object, `{message, type}`.
        error = nested(payload, "tool_response", "error")
        fields[ERROR_MESSAGE] = as_text(nested(error, "message") or error)
        # What the model is given back (`llmContent`); the whole response when it has none.
        output = nested(payload, "tool_response", "llmContent")
        fields[TOOL_OUTPUT] = as_text(payload.get("tool_response") if output is None else output)
    elif raw == "Notification":
        fields[MESSAGE] = text(payload, "message") or as_text(nested(payload, "details", "title"))
        kind = text(payload, "notification_type")
        fields[NOTIFICATION_TYPE] = _NOTIFICATION_TYPES.get(kind, kind)
        fields[TOOL_NAME] = _prompted_tool(payload)
    elif raw in ("SessionStart", "PreCompress"):
        fields[SOURCE] = text(payload, "source", "trigger")
    if raw in ("BeforeTool", "AfterTool"):
        fields[TOOL_INPUT] = as_text(payload.get("tool_input"))
    return [event(name, NAME, raw, payload, **fields)]


def _prompted_tool(payload: dict[str, object]) -> str:
    """The tool a permission prompt asks about, from what Gemini CLI sends in `details`."""
    kind = as_text(nested(payload, "details", "type"))
    if kind == "exec":
        return _SHELL_TOOL
    if kind == "mcp":
        return as_text(nested(payload, "details", "toolName"))
    return ""


def _is_final_chunk(payload: dict[str, object]) -> bool:
    candidates = nested(payload, "llm_response", "candidates")
    if not isinstance(candidates, list) or not candidates:
        return True  # nothing says it is a partial chunk
    return any(isinstance(c, dict) and c.get("finishReason") for c in candidates)
