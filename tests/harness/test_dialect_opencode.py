"""The opencode dialect on the payloads the real opencode 1.18.33 hands its plugin's hooks.

The samples in payloads/opencode/ were recorded from the binary by
`python -m tests.harnesses.record_opencode` (a tool call, a permission prompt that headless
`run` rejects, a model API that refuses the key); `session_idle`'s `answer` is the plugin's
addition (harness/install_opencode.py). `session_compacted` and `file_edited` are written by
hand from https://opencode.ai/docs/plugins (no scenario compacts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from otel_lifecycle_hooks.harness.dialects import get_dialect
from otel_lifecycle_hooks.harness.normalized import NormalizedEvent
from otel_lifecycle_hooks.systems.host_protocol import stage_keys

Loader = Callable[[str, str], dict[str, Any]]
SESSION = "ses_dcb2052d0ffedZI7LUARGdsvzG"  # the tool call's session
ARGS = '{"command":"echo tool-ran","description":"Run a command"}'
CASES: dict[str, tuple[str, str, str, dict[str, str]]] = {
    "session_created": ("session-start", "session.created", SESSION, {}),
    "chat_message": (
        "prompt-submit",
        "chat.message",
        SESSION,
        # opencode's `run` quotes the message it was given.
        {"PROMPT": '"Run the command, then say what it printed."'},
    ),
    "tool_execute_before": (
        "tool-start",
        "tool.execute.before",
        SESSION,
        {"TOOL_NAME": "bash", "TOOL_CALL_ID": "call_0002", "TOOL_INPUT": ARGS},
    ),
    "tool_execute_after": (
        "tool-end",
        "tool.execute.after",
        SESSION,
        {
            "TOOL_NAME": "bash",
            "TOOL_CALL_ID": "call_0002",
            "TOOL_INPUT": ARGS,
            "TOOL_OUTPUT": "tool-ran\n",
        },
    ),
    "session_idle": (
        "agent-end",
        "session.idle",
        SESSION,
        {"ASSISTANT_TEXT": "It printed tool-ran."},
    ),
    "permission_asked": (
        "notification",
        "permission.asked",
        "ses_dcb200593ffetspHhUAL751YwU",
        {
            "MESSAGE": "bash: echo tool-ran",
            "NOTIFICATION_TYPE": "permission_prompt",
            "TOOL_NAME": "bash",
        },
    ),
    "session_error": (
        "agent-end",
        "session.error",
        "ses_dcb1fd5d3ffeYI090FoMDpXNEO",
        {"ERROR_TYPE": "APIError", "ERROR_MESSAGE": "invalid API key"},
    ),
    "session_compacted": ("post-compact", "session.compacted", "ses_7f3a", {}),
}


@pytest.mark.parametrize("sample", sorted(CASES))
def test_opencode_events_become_their_normalized_event(sample: str, load_payload: Loader) -> None:
    event, raw, session, fields = CASES[sample]
    events = get_dialect("opencode").translate(load_payload("opencode", sample), [])
    assert events == [NormalizedEvent(event, "opencode", raw, session_id=session, fields=fields)]


def test_opencode_events_without_a_meaning_here_give_nothing(load_payload: Loader) -> None:
    assert get_dialect("opencode").translate(load_payload("opencode", "file_edited"), []) == []


def test_a_bus_event_wrapped_as_the_event_hook_receives_it_is_read_the_same(
    load_payload: Loader,
) -> None:
    bare = load_payload("opencode", "session_idle")
    dialect = get_dialect("opencode")
    assert dialect.translate({"event": bare}, []) == dialect.translate(bare, [])


def fields_of(sample: str, load_payload: Loader) -> dict[str, str]:
    [event] = get_dialect("opencode").translate(load_payload("opencode", sample), [])
    return dict(event.fields)


def test_a_host_protocol_script_reads_the_tools_args_output_and_call_id(
    load_payload: Loader,
) -> None:
    before = stage_keys("tool_before", fields_of("tool_execute_before", load_payload))
    after = stage_keys("tool_after", fields_of("tool_execute_after", load_payload))
    for keys in (before, after):
        assert keys["args"] == {"command": "echo tool-ran", "description": "Run a command"}
        assert keys["callID"] == "call_0002"
    assert after["output"] == "tool-ran\n"


def test_a_host_protocol_script_reads_the_turns_answer(load_payload: Loader) -> None:
    keys = stage_keys("idle", fields_of("session_idle", load_payload))
    assert keys["answer"] == "It printed tool-ran."
