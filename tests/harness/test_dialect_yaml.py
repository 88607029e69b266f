"""Data-driven dialects: a dialect.yaml in Scion's mapping format translates like code would."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_lifecycle_hooks.harness.dialect_yaml import DialectFileError, load_dialect_file
from otel_lifecycle_hooks.harness.dialects import get_dialect
from otel_lifecycle_hooks.harness.normalized import NormalizedEvent

# The example of Scion's harness-plugin design (a Cursor-like harness), with our extensions.
DIALECT = """\
dialect: acme
event_name_fields: [hook_event_name, event.kind]
mappings:
  BeforeToolCall:
    event: tool-start
    fields:
      tool_name: .tool_name
      session_id: .conversation.id
      transcript_path: tool_input.files.0
  AfterToolCall:
    event: tool-end
    fields:
      tool_name: .tool_name
      error: .failure.reason
  SessionBegin: session-start
responses:
  BeforeToolCall: {permission: allow}
  default: "{}"
"""


def write(tmp_path: Path, text: str, name: str = "acme.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_mapped_event_takes_its_fields_from_dotted_paths(tmp_path: Path) -> None:
    dialect = load_dialect_file(write(tmp_path, DIALECT))
    payload = {
        "hook_event_name": "BeforeToolCall",
        "tool_name": "shell",
        "conversation": {"id": "conv-7"},
        "tool_input": {"files": ["a.py", "b.py"]},
    }
    assert dialect.translate(payload, []) == [
        NormalizedEvent(
            "tool-start",
            "acme",
            "BeforeToolCall",
            session_id="conv-7",
            fields={"TOOL_NAME": "shell", "TRANSCRIPT_PATH": "a.py"},
        )
    ]


def test_the_event_name_is_read_from_the_first_name_field_that_has_one(tmp_path: Path) -> None:
    dialect = load_dialect_file(write(tmp_path, DIALECT))
    [event] = dialect.translate(
        {"event": {"kind": "AfterToolCall"}, "failure": {"reason": "boom"}}, []
    )
    assert (event.event, dict(event.fields)) == ("tool-end", {"ERROR_MESSAGE": "boom"})
    [started] = dialect.translate({"hook_event_name": "SessionBegin"}, [])
    assert started.event == "session-start"


def test_unmapped_events_and_missing_paths_give_nothing(tmp_path: Path) -> None:
    dialect = load_dialect_file(write(tmp_path, DIALECT))
    assert dialect.translate({"hook_event_name": "Unknown"}, []) == []
    [event] = dialect.translate({"hook_event_name": "BeforeToolCall", "tool_input": "x"}, [])
    assert dict(event.fields) == {}


def test_responses_are_printed_per_raw_event_with_a_default(tmp_path: Path) -> None:
    dialect = load_dialect_file(write(tmp_path, DIALECT))
    assert dialect.response({"hook_event_name": "BeforeToolCall"}) == '{"permission":"allow"}'
    assert dialect.response({"hook_event_name": "AfterToolCall"}) == "{}"


def test_a_dialect_is_found_by_name_in_the_dialects_directories(tmp_path: Path) -> None:
    write(tmp_path, DIALECT)
    dialect = get_dialect("acme", environ={"OTEL_LIFECYCLE_HOOKS_DIALECTS": str(tmp_path)})
    assert dialect.name == "acme"


def test_the_shipped_cursor_dialect_translates_cursor_payloads() -> None:
    # https://cursor.com/docs/agent/hooks: hook_event_name, conversation_id, per-event fields.
    cursor = get_dialect("cursor", environ={})
    payload = {
        "hook_event_name": "preToolUse",
        "conversation_id": "c-1",
        "generation_id": "g-1",
        "workspace_roots": ["/workspace"],
        "tool_name": "Shell",
        "tool_input": {"command": "make"},
    }
    assert cursor.translate(payload, []) == [
        NormalizedEvent("tool-start", "cursor", "preToolUse", "c-1", {"TOOL_NAME": "Shell"})
    ]
    assert cursor.response(payload) == '{"permission":"allow"}'


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("- a list\n", "must be a mapping"),
        ("mappings: {X: tool-start}\n", "'dialect' must name"),
        ("dialect: d\n", "'mappings' must map"),
        (
            "dialect: d\nmappings: {X: {event: tool-begin}}\n",
            r"mappings\.X\.event: 'tool-begin' is not one of session-start",
        ),
        (
            "dialect: d\nmappings: {X: {event: tool-start, fields: {bad-name: .x}}}\n",
            "not a valid field name",
        ),
        (
            "dialect: d\nmappings: {X: {event: tool-start, fields: {tool_name: 3}}}\n",
            "expected a dotted path",
        ),
        ("dialect: d\nevent_name_fields: []\nmappings: {X: tool-start}\n", "non-empty list"),
        ("dialect: d\nmappings: {X: tool-start}\nresponses: [1]\n", "'responses' must map"),
        ("dialect: [unclosed\n", "cannot read dialect file"),
    ],
)
def test_a_broken_dialect_file_is_refused_naming_the_file_and_the_problem(
    tmp_path: Path, text: str, complaint: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(DialectFileError, match=complaint) as raised:
        load_dialect_file(path)
    assert str(path) in str(raised.value)
