"""Hostile input on the supervisor's side of the event socket: whatever bytes or JSON arrive,
the socket server keeps serving and a malformed event is refused with `WireFormatError` only.

The template loader, the condition parser, variable rendering, every dialect and `hook
--dialect` are fuzzed where they live (listed in docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_lifecycle_hooks.harness.normalized import NormalizedEvent, WireFormatError
from otel_lifecycle_hooks.supervisor.server import EventServer

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
# Objects shaped like wire events, with any field possibly wrong.
wire_like = st.fixed_dictionaries(
    {},
    optional={
        "v": st.sampled_from([1, 2, "1", None, 1.0, True]),
        "kind": st.sampled_from(["event", "status", "", None, 1]),
        "event": st.sampled_from(["tool-start", "tool-end", "pre-start", "nope", "", None, 3])
        | st.text(max_size=12),
        "dialect": json_values,
        "raw_event": json_values,
        "session_id": json_values,
        "fields": json_values | st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    },
)


@given(st.dictionaries(st.text(max_size=10), json_values, max_size=6) | wire_like)
@settings(max_examples=200)
def test_from_wire_accepts_a_valid_event_or_raises_only_wire_format_error(
    obj: dict[str, Any],
) -> None:
    try:
        event = NormalizedEvent.from_wire(obj)
    except WireFormatError:
        return
    assert event.to_wire()["event"] == obj["event"]


class Collected:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.arrived = threading.Condition()

    def deliver(self, message: dict[str, Any]) -> None:
        with self.arrived:
            self.messages.append(message)
            self.arrived.notify_all()

    def wait_for(self, predicate: Any, timeout: float = 60.0) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: predicate(self.messages), timeout)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[EventServer, Collected]]:
    collected = Collected()
    events = EventServer(collected.deliver).start()
    yield events, collected
    events.close()


def send(path: str, payload: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(path)
        # The server may close on an oversized or broken message: that is its right.
        with contextlib.suppress(OSError):
            conn.sendall(payload)


@given(
    st.binary(max_size=4096)
    | st.lists(json_values, max_size=6).map(lambda v: b"\n".join(json.dumps(x).encode() for x in v))
)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_random_bytes_and_json_never_stop_the_socket_server(
    server: tuple[EventServer, Collected], payload: bytes
) -> None:
    events, collected = server
    send(events.path, payload)
    marker = f"alive-{time.monotonic_ns()}"
    send(
        events.path,
        json.dumps({"kind": "status", "status": "blocked", "message": marker}).encode() + b"\n",
    )
    assert collected.wait_for(lambda messages: any(m.get("message") == marker for m in messages))
    # Everything delivered is a JSON object: the rest was refused at the socket.
    assert all(isinstance(message, dict) for message in collected.messages)
