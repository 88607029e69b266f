"""The plugin `harness install opencode` writes, run by node against a recorded-shape event
stream, with a hook program that records what it is given (no opencode, no supervisor).

The real opencode runs the same plugin in tests/harnesses/test_real_opencode.py; here each
property is checked alone and fast: which events start a hook process, in which order their
payloads arrive, and the answer added to `session.idle`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest

from otel_lifecycle_hooks.harness.dialects import opencode as dialect
from otel_lifecycle_hooks.harness.install_opencode import (
    FORWARDED_EVENTS,
    PLUGIN_HOOKS,
    plugin_source,
)

SESSION = "ses_1"
# A hook program that takes longer the earlier it starts: started together, the payloads
# would arrive last-first.
SLOW_RECORDER = """\
import json, sys, time
record, delay = sys.argv[1], float(sys.argv[2])
body = sys.stdin.read()
count = sum(1 for _ in open(record)) if __import__("os").path.exists(record) else 0
time.sleep(max(0.0, delay - 0.05 * count))
with open(record, "a") as out:
    out.write(body + "\\n")
"""


def bus(kind: str, **properties: Any) -> dict[str, Any]:
    return {"type": kind, "properties": properties}


def assistant_text(message: str, text: str) -> dict[str, Any]:
    part = {"type": "text", "text": text, "messageID": message, "sessionID": SESSION}
    return bus("message.part.updated", sessionID=SESSION, part=part)


# What one prompt with one tool call looks like to the plugin (opencode 1.18.33's shapes).
STREAM: list[tuple[str, Any]] = [
    ("event", bus("session.created", sessionID=SESSION, info={"id": SESSION})),
    ("event", bus("plugin.added", id="anthropic")),
    ("chat.message", ({"sessionID": SESSION}, {"parts": [{"type": "text", "text": "go"}]})),
    ("event", bus("message.updated", sessionID=SESSION, info={"id": "msg_u", "role": "user"})),
    ("event", assistant_text("msg_u", "the user's own words")),
    ("event", bus("session.status", sessionID=SESSION, status={"type": "busy"})),
    (
        "event",
        bus(
            "message.updated",
            sessionID=SESSION,
            info={"id": "msg_a", "role": "assistant", "sessionID": SESSION},
        ),
    ),
    ("tool.execute.before", ({"tool": "bash", "sessionID": SESSION, "callID": "c1"}, {})),
    ("tool.execute.after", ({"tool": "bash", "sessionID": SESSION, "callID": "c1"}, {})),
    ("event", assistant_text("msg_a", "It printed ok.")),
    ("event", bus("session.idle", sessionID=SESSION)),
]

DRIVER = """\
import {{ OtelLifecycleHooks }} from {plugin}
const hooks = await OtelLifecycleHooks({{}})
const stream = {stream}
const pending = []
for (const [kind, value] of stream) {{
  // opencode does not wait for one bus event's handlers before it publishes the next
  if (kind === "event") pending.push(hooks.event({{ event: value }}))
  else pending.push(hooks[kind](value[0], value[1]))
}}
await Promise.all(pending)
"""


@pytest.fixture(scope="module")
def delivered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    root = tmp_path_factory.mktemp("plugin")
    recorder, record = root / "recorder.py", root / "record.jsonl"
    recorder.write_text(SLOW_RECORDER)
    plugin = root / "plugin.mjs"
    plugin.write_text(plugin_source([sys.executable, str(recorder), str(record), "0.4"]))
    # hook_argv appends `hook --dialect opencode`: the recorder ignores extra arguments.
    driver = root / "driver.mjs"
    driver.write_text(DRIVER.format(plugin=json.dumps(plugin.as_uri()), stream=json.dumps(STREAM)))
    subprocess.run([node, str(driver)], check=True, timeout=60)
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_only_the_events_the_dialect_reads_start_a_hook_process(
    delivered: list[dict[str, Any]],
) -> None:
    kinds = {payload["type"] for payload in delivered}
    assert kinds <= set(FORWARDED_EVENTS) | set(PLUGIN_HOOKS)
    assert len(delivered) == 5


def test_payloads_reach_the_hook_in_the_order_opencode_gave_them(
    delivered: list[dict[str, Any]],
) -> None:
    assert [payload["type"] for payload in delivered] == [
        "session.created",
        "chat.message",
        "tool.execute.before",
        "tool.execute.after",
        "session.idle",
    ]


def test_the_end_of_the_turn_carries_the_last_assistant_text_not_the_users(
    delivered: list[dict[str, Any]],
) -> None:
    assert delivered[-1]["answer"] == "It printed ok."


def test_the_plugin_forwards_exactly_what_the_dialect_translates() -> None:
    assert set(FORWARDED_EVENTS) | set(PLUGIN_HOOKS) == dialect.TRANSLATED
    source = plugin_source(["hook"])
    for hook in PLUGIN_HOOKS:
        assert f'"{hook}": async' in source
