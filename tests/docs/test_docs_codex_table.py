"""docs/harness-setup.md's table of Codex events is what the codex dialect does with the
payloads recorded from the real Codex: each recorded payload's row names the runtime event it
becomes ("nothing" when it becomes none)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from otel_lifecycle_hooks.harness.dialects.codex import translate

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "harness-setup.md"
RECORDED = sorted((ROOT / "tests" / "harness" / "payloads" / "codex").glob("*.json"))


def _table() -> dict[str, str]:
    """Codex event (or `notify TYPE`) -> the runtime event the row names, or "nothing"."""
    text = PAGE.read_text()
    table = text.split("| Codex event | runtime event |", 1)[1].split("\n\n", 1)[0]
    rows: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        codex, runtime = (cell.strip() for cell in line.strip("|").split("|"))
        names = re.findall(r"`([^`]+)`", codex)
        key = f"notify {names[1]}" if names[0] == "notify" else None
        target = re.match(r"`([a-z-]+)`", runtime)
        for name in [key] if key else names:
            rows[name] = target.group(1) if target else "nothing"
    return rows


@pytest.mark.parametrize("recorded", RECORDED, ids=[path.stem for path in RECORDED])
def test_the_row_of_each_recorded_codex_payload_is_what_the_dialect_does(
    recorded: Path,
) -> None:
    payload = json.loads(recorded.read_text())
    if "hook_event_name" in payload:
        key, events = payload["hook_event_name"], translate(payload, [])
    else:  # notify's object arrives as the last argument
        key, events = f"notify {payload['type']}", translate({}, [json.dumps(payload)])
    table = _table()
    assert key in table, f"docs/harness-setup.md's Codex table has no row for {key}"
    assert (events[0].event if events else "nothing") == table[key]
