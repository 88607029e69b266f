"""NormalizedEvent: the vocabulary is enforced, and the wire form round-trips."""

from __future__ import annotations

from typing import Any

import pytest

from otel_lifecycle_hooks.harness.normalized import (
    MAX_FIELD_CHARS,
    NormalizedEvent,
    WireFormatError,
)


def test_an_event_round_trips_through_its_wire_form() -> None:
    event = NormalizedEvent("tool-start", "claude", "PreToolUse", "s-1", {"TOOL_NAME": "Bash"})
    wire = event.to_wire()
    assert wire == {
        "v": 1,
        "kind": "event",
        "event": "tool-start",
        "dialect": "claude",
        "raw_event": "PreToolUse",
        "session_id": "s-1",
        "fields": {"TOOL_NAME": "Bash"},
    }
    assert NormalizedEvent.from_wire(wire) == event


def test_only_runtime_events_can_be_normalized_events() -> None:
    with pytest.raises(ValueError, match="pre-stop"):
        NormalizedEvent("pre-stop", "claude")


def test_empty_fields_are_dropped_and_long_ones_cut() -> None:
    event = NormalizedEvent(
        "agent-end", "claude", fields={"ASSISTANT_TEXT": "x" * 100_000, "TOOL_NAME": ""}
    )
    assert list(event.fields) == ["ASSISTANT_TEXT"]
    assert len(event.fields["ASSISTANT_TEXT"]) == MAX_FIELD_CHARS
    assert event.fields["ASSISTANT_TEXT"].endswith("…")


@pytest.mark.parametrize(
    ("wire", "complaint"),
    [
        ({"v": 1, "kind": "status", "event": "tool-start"}, "kind"),
        ({"v": 2, "kind": "event", "event": "tool-start"}, "version"),
        ({"v": 1, "kind": "event", "event": "tool-begin"}, "unknown event"),
        ({"v": 1, "kind": "event", "event": "tool-start", "fields": {"A": 1}}, "fields"),
        ({"v": 1, "kind": "event", "event": "tool-start", "session_id": 5}, "session_id"),
    ],
)
def test_a_malformed_wire_object_is_refused(wire: dict[str, Any], complaint: str) -> None:
    with pytest.raises(WireFormatError, match=complaint):
        NormalizedEvent.from_wire(wire)
