"""docs/events-and-variables.md's table of how runtime events move the activity is the
tracker's behaviour: each row is fed to `ActivityTracker`, within a turn and outside one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from otel_lifecycle_hooks.harness.activity import ActivityTracker
from otel_lifecycle_hooks.harness.normalized import NormalizedEvent

PAGE = Path(__file__).resolve().parents[2] / "docs" / "events-and-variables.md"


def _rows() -> list[tuple[str, str, str]]:
    text = PAGE.read_text()
    table = text.split("| runtime event | activity within a turn |", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        events, within, outside = (cell.strip() for cell in line.strip("|").split("|"))
        first_word = re.compile(r"`([a-z_-]+)`")
        for event in first_word.findall(events):
            rows.append((event, first_word.findall(within)[0], first_word.findall(outside)[0]))
    return rows


def test_the_table_has_every_runtime_event_it_should() -> None:
    named = {event for event, _, _ in _rows()}
    assert {"tool-end", "model-end", "agent-end", "tool-start", "notification"} <= named


@pytest.mark.parametrize(("event", "within", "outside"), _rows())
def test_each_row_is_what_the_tracker_does(event: str, within: str, outside: str) -> None:
    in_turn = ActivityTracker("thinking", in_turn=True, clock=lambda: 0.0)
    in_turn.observe(NormalizedEvent(event, "test", fields={"TOOL_NAME": "Bash"}))
    assert in_turn.activity == within
    idle = ActivityTracker("idle", in_turn=False, clock=lambda: 0.0)
    idle.observe(NormalizedEvent(event, "test", fields={"TOOL_NAME": "Bash"}))
    assert idle.activity == outside
