"""Claude Code hooks (https://code.claude.com/docs/en/hooks).

Every hook gets one JSON object on stdin with `session_id`, `transcript_path`, `cwd`,
`permission_mode` and `hook_event_name`, plus the event's own fields. Codex's hooks use the same
shape, so the codex dialect reuses `translate_hook_payload`.

`SessionEnd` is not translated: `session-end` is the supervisor's phase event (the agent
process exited), and a harness session also ends on `/clear` while the agent keeps running.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping

from ..normalized import (
    ASSISTANT_TEXT,
    ERROR_MESSAGE,
    ERROR_TYPE,
    MESSAGE,
    NOTIFICATION_TYPE,
    PROMPT,
    SOURCE,
    TOOL_CALL_ID,
    TOOL_INPUT,
    TOOL_NAME,
    TOOL_OUTPUT,
    TRANSCRIPT_PATH,
    NormalizedEvent,
    as_text,
)
from ._common import event, text

# On the hook path: `typing` (3 ms to import) is for checkers (bench_hook_path.py, 14.7 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    # (path, at most this many bytes) -> (the file's last bytes, whether its start was cut),
    # or None when it cannot be read. The `hook` process reads with its own rights (it is the
    # agent); a supervisor running as another user passes a reader that has the agent's.
    TailReader = Callable[[str, int], "tuple[bytes, bool] | None"]

NAME = "claude"

# Only the end of a transcript is read: it can grow to many megabytes over a long session.
TRANSCRIPT_TAIL_BYTES = 1024 * 1024

_SIMPLE: dict[str, str] = {
    "SessionStart": "session-start",
    "UserPromptSubmit": "prompt-submit",
    "PreToolUse": "tool-start",
    "PostToolUse": "tool-end",
    "PostToolUseFailure": "tool-end",
    "Notification": "notification",
    "PermissionRequest": "notification",
    "Stop": "agent-end",
    "StopFailure": "agent-end",
    "SubagentStop": "subagent-end",
    "PreCompact": "pre-compact",
    "PostCompact": "post-compact",
}


def translate(payload: dict[str, object], argv_extra: list[str]) -> list[NormalizedEvent]:
    """Claude Code hook payload -> normalized events (none for events we do not use)."""
    return translate_hook_payload(payload, NAME)


def translate_hook_payload(
    payload: Mapping[str, object], dialect: str, read: TailReader | None = None
) -> list[NormalizedEvent]:
    """The Claude-shaped hook payload that Claude Code and Codex both send; `read` reads the
    transcript's tail (default: `read_tail`, with this process's rights)."""
    raw = text(payload, "hook_event_name")
    name = _SIMPLE.get(raw)
    if name is None:
        return []
    fields: dict[str, str] = {
        TRANSCRIPT_PATH: text(payload, "transcript_path"),
        TOOL_NAME: text(payload, "tool_name"),
    }
    if raw in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        fields[TOOL_INPUT] = as_text(payload.get("tool_input"))
        fields[TOOL_CALL_ID] = text(payload, "tool_use_id")
    if raw == "PostToolUse":
        fields[TOOL_OUTPUT] = as_text(payload.get("tool_response"))
    if raw == "UserPromptSubmit":
        fields[PROMPT] = text(payload, "prompt")
    elif raw == "PostToolUseFailure":
        fields[ERROR_MESSAGE] = text(payload, "error", "error_message")
    elif raw == "Notification":
        fields[MESSAGE] = text(payload, "message")
        fields[NOTIFICATION_TYPE] = text(payload, "notification_type")
    elif raw == "PermissionRequest":
        fields[MESSAGE] = f"Permission requested for {fields[TOOL_NAME] or 'a tool'}"
        fields[NOTIFICATION_TYPE] = "permission_prompt"
    elif raw in ("Stop", "SubagentStop", "StopFailure"):
        fields[ASSISTANT_TEXT] = final_assistant_text(payload, read)
        if raw == "StopFailure":
            fields[ERROR_TYPE] = text(payload, "error_type", "error")
            fields[ERROR_MESSAGE] = text(payload, "error_message", "error_details", "error")
    elif raw == "SessionStart":
        fields[SOURCE] = text(payload, "source")
    elif raw in ("PreCompact", "PostCompact"):
        fields[SOURCE] = text(payload, "trigger")
    return [event(name, dialect, raw, payload, **fields)]


def final_assistant_text(payload: Mapping[str, object], read: TailReader | None = None) -> str:
    """The turn's final text: `last_assistant_message` if given, else the transcript's tail
    (read by `read`)."""
    given = payload.get("last_assistant_message")
    if isinstance(given, str) and given.strip():
        return given.strip()
    path = text(payload, "agent_transcript_path", "transcript_path")
    return transcript_final_text(path, read=read) if path else ""


def read_tail(path: str, tail_bytes: int) -> tuple[bytes, bool] | None:
    """The last `tail_bytes` of the regular file at `path`, read with this process's rights,
    and whether the file's start was cut; None when it is not a readable regular file."""
    try:
        # The path is the agent's: a FIFO or a device would block or never end. Opened without
        # blocking, read only when it is a regular file, and never more than the tail.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        with open(descriptor, "rb") as transcript:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                return None
            size = transcript.seek(0, os.SEEK_END)
            start = max(0, size - tail_bytes)
            transcript.seek(start)
            return transcript.read(tail_bytes), start > 0
    except (OSError, ValueError):
        return None


def transcript_final_text(
    path: str, tail_bytes: int = TRANSCRIPT_TAIL_BYTES, read: TailReader | None = None
) -> str:
    """Text of the trailing run of assistant entries in a Claude JSONL transcript, or "".
    `read` reads the file's tail (default: `read_tail`, with this process's rights)."""
    read_back = (read or read_tail)(path, tail_bytes)
    if read_back is None:
        return ""
    tail, cut = read_back
    if len(tail) > tail_bytes:  # never more than asked, whoever read it
        tail, cut = tail[len(tail) - tail_bytes :], True
    lines = tail.split(b"\n")
    if cut:
        lines = lines[1:]  # the first line was cut by the seek
    parts: list[str] = []
    for line in lines:
        entry = _json_object(line)
        if entry is None:
            continue
        message = entry.get("message")
        role = entry.get("type") or (message.get("role") if isinstance(message, dict) else None)
        if role == "user":
            parts = []  # a user entry (a prompt or a tool result) ends the previous run
        elif role == "assistant" and isinstance(message, dict):
            found = _content_text(message.get("content"))
            if found:
                parts.append(found)
    return "\n\n".join(parts).strip()


def _json_object(line: bytes) -> dict[str, object] | None:
    if not line.strip():
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    texts = [
        as_text(block.get("text"))
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    return "".join(texts).strip()
