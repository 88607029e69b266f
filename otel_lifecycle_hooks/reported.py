"""What an agent may report: the event-context variables each runtime event can set.

The agent is untrusted (docs/security.md). Whatever route an event takes into the package (the
supervisor's socket, the harness's HTTP hooks, a built-in dialect, a `dialect.yaml`, or `hook`
firing hooks itself when no supervisor runs), it becomes a `NormalizedEvent`, and a
`NormalizedEvent` keeps only the fields its event is allowed to carry here. Everything else
(PHASE, AGENT_ID, TIMESTAMP, metadata, `env:` names, process environment names, any invented
name) is dropped, and the names dropped are kept on the event so that the supervisor counts
them.

Text is also made safe at this boundary: a lone surrogate (`"\\ud800"` in JSON) cannot be
written as UTF-8, so it would fail the wire line, the trace file or the journal later; it is
replaced by U+FFFD here.

Standard library only: `hook` imports this on every harness event.
"""

from __future__ import annotations

from collections.abc import Mapping

# Fields every runtime event may carry.
_EVERY_EVENT: frozenset[str] = frozenset({"TRANSCRIPT_PATH"})

# The fields each runtime event may set (docs/harness-protocol.md's dialect table; SPEC 5).
REPORTED_FIELDS: Mapping[str, frozenset[str]] = {
    event: frozenset(names) | _EVERY_EVENT
    for event, names in {
        "session-start": {"SOURCE"},
        "prompt-submit": {"PROMPT"},
        "agent-start": {"PROMPT"},
        "agent-end": {"ASSISTANT_TEXT", "ERROR_TYPE", "ERROR_MESSAGE", "REASON"},
        "model-start": set(),
        "model-end": set(),
        "tool-start": {"TOOL_NAME", "TOOL_INPUT", "TOOL_CALL_ID"},
        "tool-end": {
            "TOOL_NAME",
            "TOOL_INPUT",
            "TOOL_CALL_ID",
            "TOOL_OUTPUT",
            "ERROR_TYPE",
            "ERROR_MESSAGE",
        },
        "notification": {"MESSAGE", "NOTIFICATION_TYPE", "TOOL_NAME"},
        "response-complete": {"ASSISTANT_TEXT", "TASK_SUMMARY"},
        "subagent-end": {"ASSISTANT_TEXT"},
        "pre-compact": {"SOURCE"},
        "post-compact": {"SOURCE"},
    }.items()
}

# Every variable whose value an agent can choose: the reported fields, the harness's session
# id (SESSION_ID is set from it), and MESSAGE / TASK_SUMMARY of `status` signals. Validation
# refuses these where a value would choose a request's destination or a shell's program text.
AGENT_CONTROLLED: frozenset[str] = frozenset(
    {name for names in REPORTED_FIELDS.values() for name in names}
    | {"SESSION_ID", "MESSAGE", "TASK_SUMMARY"}
)


def allowed_fields(event: str) -> frozenset[str]:
    """The fields `event` may carry (none for a name that is not a runtime event)."""
    return REPORTED_FIELDS.get(event, frozenset())


def admit_fields(event: str, fields: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """(the fields `event` may carry, with their text made safe; the names dropped)."""
    allowed = allowed_fields(event)
    kept: dict[str, str] = {}
    dropped: list[str] = []
    for name, value in fields.items():
        if name in allowed:
            kept[name] = safe_text(value)
        else:
            dropped.append(name)
    return kept, tuple(dropped)


def safe_text(text: str) -> str:
    """`text`, with any lone surrogate (which UTF-8 cannot encode) replaced by U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)
    return text
