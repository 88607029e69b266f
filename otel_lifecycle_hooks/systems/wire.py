"""What the other seeds' hooks are told about an event: plain JSON, snake_case keys."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

# The script protocols of the other seeds' hooks, as `action.protocol` names them.
CORE_AGENT_PROTOCOL = "core-agent"  # seed 001: core-agent's envelope on stdin
HOST_PROTOCOL = "host-v1"  # seed 003: `<script> <stage>`, JSONL on stdout


def event_context(fields: Mapping[str, str]) -> dict[str, Any]:
    """An event's variables as JSON keys: `TOOL_NAME` -> `tool_name`."""
    return {name.lower(): value for name, value in fields.items()}


def hook_context(
    event: str,
    session_id: str,
    fields: Mapping[str, str],
    metadata: Mapping[str, str],
    timestamp: float,
) -> dict[str, Any]:
    """The context an executor receives: the event, its session, its variables and the agent."""
    return {
        "event": event,
        "session_id": session_id,
        "timestamp": datetime.fromtimestamp(timestamp, tz=UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
        "context": event_context(fields),
        "agent": event_context(metadata),
    }
