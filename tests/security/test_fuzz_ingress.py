"""Property-based fuzzing of everything an agent can hand the supervisor: the socket protocol
(bytes, JSON and wire-shaped objects) and every dialect's translator (arbitrary payloads).
Nothing raises, and nothing that comes out carries a field its event may not set."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_lifecycle_hooks.events import RUNTIME_EVENTS
from otel_lifecycle_hooks.harness.dialects import (
    BUILTIN_DIALECTS,
    get_dialect,
    shipped_dialect_names,
)
from otel_lifecycle_hooks.harness.normalized import NormalizedEvent
from otel_lifecycle_hooks.reported import allowed_fields
from otel_lifecycle_hooks.supervisor.admission import Admission, IngressCounts
from otel_lifecycle_hooks.supervisor.server import EventServer

# Text with the awkward cases: lone surrogates, controls, non-ASCII.
awkward_text = st.text(
    alphabet=st.characters(blacklist_categories=()), max_size=24
) | st.sampled_from(["\ud800", "a\udfffb", "\x00", "\u202e", "é", ""])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | awkward_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(awkward_text, children, max_size=4)
    ),
    max_leaves=16,
)
FIELD_NAMES = [
    "TOOL_NAME",
    "ASSISTANT_TEXT",
    "PHASE",
    "AGENT_ID",
    "TIMESTAMP",
    "REGISTRY_URL",
    "SESSION_ID",
    "EVENT",
    "MESSAGE",
    "TRANSCRIPT_PATH",
    "PROMPT",
]
wire_like = st.fixed_dictionaries(
    {},
    optional={
        "v": st.sampled_from([1, 2, "1", None, 1.0, True]),
        "kind": st.sampled_from(["event", "status", "", None, 1, "other"]),
        "event": st.sampled_from([*RUNTIME_EVENTS, "pre-stop", "error", ""]) | json_values,
        "status": st.sampled_from(
            ["ask_user", "blocked", "task_completed", "limits_exceeded", "reboot", ""]
        )
        | json_values,
        "message": json_values,
        "dialect": json_values,
        "raw_event": json_values,
        "session_id": json_values,
        "fields": st.dictionaries(
            st.sampled_from(FIELD_NAMES) | awkward_text, awkward_text | json_values, max_size=6
        )
        | json_values,
    },
)


def assert_only_reportable(event: NormalizedEvent) -> None:
    assert set(event.fields) <= allowed_fields(event.event), (event.event, dict(event.fields))
    for value in (*event.fields.values(), event.session_id, event.raw_event, event.dialect):
        value.encode("utf-8")  # never a lone surrogate past the boundary


@given(wire_like | json_values)
@settings(max_examples=600, deadline=None)
def test_admission_never_raises_and_admits_only_reportable_fields(message: Any) -> None:
    counts = IngressCounts()
    admitted = Admission(counts).admit(message)
    if admitted is None:
        assert counts.total >= 1  # every refusal is counted
        return
    if admitted.kind == "event":
        assert admitted.event is not None
        assert_only_reportable(admitted.event)
    else:
        assert admitted.status in {"ask_user", "blocked", "task_completed", "limits_exceeded"}
        admitted.message.encode("utf-8")


class Collected:
    def __init__(self) -> None:
        self.admission = Admission(IngressCounts())
        self.markers: list[str] = []
        self.arrived = threading.Condition()

    def deliver(self, message: dict[str, Any]) -> None:
        admitted = self.admission.admit(message)
        if admitted is not None and admitted.event is not None:
            assert_only_reportable(admitted.event)
        with self.arrived:
            if admitted is not None and admitted.kind == "status":
                self.markers.append(admitted.message)
            self.arrived.notify_all()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EventServer, Collected]]:
    collected = Collected()
    events = EventServer(
        collected.deliver,
        directory=str(tmp_path_factory.mktemp("sock")),
        refuse=collected.admission.counts.refuse,
    ).start()
    yield events, collected
    events.close()


def send(path: str, payload: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(5)
        connection.connect(path)
        # The server may close on an oversized line: that is its right.
        with contextlib.suppress(OSError):
            connection.sendall(payload)


socket_payloads = (
    st.binary(max_size=4096)
    | st.lists(wire_like | json_values, max_size=6).map(
        lambda items: b"\n".join(json.dumps(item).encode() for item in items)
    )
    | st.lists(st.binary(max_size=64), max_size=8).map(b"\n".join)
)


@given(socket_payloads)
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_whatever_a_client_writes_the_socket_keeps_serving(
    server: tuple[EventServer, Collected], payload: bytes
) -> None:
    events, collected = server
    send(events.path, payload)
    marker = f"alive-{time.monotonic_ns()}"
    line = {"v": 1, "kind": "status", "status": "blocked", "message": marker}
    send(events.path, json.dumps(line).encode() + b"\n")
    with collected.arrived:
        assert collected.arrived.wait_for(lambda: marker in collected.markers, timeout=60)


# --- every dialect -----------------------------------------------------------------------

RAW_EVENT_NAMES = sorted(
    {
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "Notification",
        "PermissionRequest",
        "Stop",
        "StopFailure",
        "SubagentStop",
        "PreCompact",
        "PostCompact",
        "BeforeAgent",
        "AfterAgent",
        "BeforeModel",
        "AfterModel",
        "BeforeTool",
        "AfterTool",
        "PreCompress",
        "agent-turn-complete",
        "approval-requested",
        "session.created",
        "chat.message",
        "tool.execute.before",
        "tool.execute.after",
        "permission.asked",
        "session.idle",
        "session.error",
        "session.compacted",
        "sessionStart",
        "beforeSubmitPrompt",
        "preToolUse",
        "postToolUseFailure",
        "stop",
        "subagentStop",
        "preCompact",
        *RUNTIME_EVENTS,
    }
)
PAYLOAD_KEYS = [
    "tool_name",
    "prompt",
    "message",
    "error",
    "error_message",
    "error_type",
    "last_assistant_message",
    "assistant_text",
    "task_summary",
    "source",
    "trigger",
    "notification_type",
    "session_id",
    "conversation_id",
    "prompt_response",
    "tool_response",
    "details",
    "properties",
    "input",
    "output",
    "status",
    "thread-id",
    "last-assistant-message",
    "title",
    "PHASE",
    "AGENT_ID",
    "fields",
]


@pytest.fixture(scope="module")
def transcript_paths(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Paths an agent might give as its transcript: a FIFO nobody writes, a device, nothing."""
    directory = tmp_path_factory.mktemp("transcripts")
    fifo = directory / "fifo"
    os.mkfifo(fifo)
    return [str(fifo), "/dev/zero", str(directory), str(directory / "missing"), ""]


def payloads(paths: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"hook_event_name": st.sampled_from(RAW_EVENT_NAMES) | awkward_text},
        optional={
            "type": st.sampled_from(RAW_EVENT_NAMES) | json_values,
            "event": json_values
            | st.fixed_dictionaries(
                {"type": st.sampled_from(RAW_EVENT_NAMES)},
                optional={"properties": json_values, "input": json_values},
            ),
            "transcript_path": st.sampled_from(paths) | json_values,
            **{key: json_values for key in PAYLOAD_KEYS},
        },
    )


DIALECT_NAMES = sorted(BUILTIN_DIALECTS) + shipped_dialect_names()


@pytest.mark.parametrize("name", DIALECT_NAMES)
def test_every_dialect_translates_any_payload_to_reportable_fields_only(
    name: str, transcript_paths: list[str]
) -> None:
    dialect = get_dialect(name, {})

    @given(payloads(transcript_paths), st.lists(awkward_text | st.just('{"type": 1}'), max_size=2))
    @settings(max_examples=300, deadline=None)
    def check(payload: dict[str, Any], argv_extra: list[str]) -> None:
        for event in dialect.translate(payload, argv_extra):
            assert_only_reportable(event)
        dialect.response(payload)

    check()


def test_the_fuzzed_dialects_include_every_shipped_one() -> None:
    shipped = {p.stem for p in Path(get_dialect.__code__.co_filename).parent.glob("*.yaml")}
    assert set(DIALECT_NAMES) == set(BUILTIN_DIALECTS) | shipped
