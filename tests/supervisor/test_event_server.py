"""The event socket's server on a real Unix socket: what each kind of client's lines become."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from otel_lifecycle_hooks.supervisor.server import EventServer


class Received:
    def __init__(self) -> None:
        self.messages: list[dict[str, object]] = []
        self.refused: list[str] = []
        self.lock = threading.Lock()

    def deliver(self, message: dict[str, object]) -> None:
        with self.lock:
            self.messages.append(message)

    def refuse(self, reason: str) -> None:
        with self.lock:
            self.refused.append(reason)

    def wait_for(self, count: int, timeout: float = 60.0) -> list[dict[str, object]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.messages) >= count:
                    return list(self.messages)
            time.sleep(0.01)
        with self.lock:
            return list(self.messages)


@pytest.fixture
def served() -> Iterator[tuple[EventServer, Received]]:
    received = Received()
    server = EventServer(received.deliver, refuse=received.refuse).start()
    try:
        yield server, received
    finally:
        server.close()


def connect(path: str) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    return client


def line(number: int, padding: str = "") -> bytes:
    return json.dumps({"n": number, "pad": padding}).encode() + b"\n"


def test_one_line_per_connection_arrives_in_the_order_the_clients_sent(
    served: tuple[EventServer, Received],
) -> None:
    server, received = served
    for number in range(300):
        with connect(server.path) as client:
            client.sendall(line(number))
    messages = received.wait_for(300)
    assert [m["n"] for m in messages] == list(range(300))
    assert received.refused == []


def test_a_client_that_connects_then_waits_before_writing_is_still_read(
    served: tuple[EventServer, Received],
) -> None:
    server, received = served
    with connect(server.path) as client:
        time.sleep(0.3)  # the server has accepted it and found nothing to read yet
        client.sendall(b'{"n": 1, "pad": ""')
        time.sleep(0.3)
        client.sendall(b"}")  # the last line, without its newline, ended by end of file
    assert [m["n"] for m in received.wait_for(1)] == [1]
    assert received.refused == []


def test_lines_larger_than_one_read_arrive_whole_and_in_order(
    served: tuple[EventServer, Received],
) -> None:
    server, received = served
    payload = b"".join(line(number, "x" * 5000) for number in range(40))  # about 200 KB
    with connect(server.path) as client:
        client.sendall(payload)
    messages = received.wait_for(40)
    assert [m["n"] for m in messages] == list(range(40))
    assert all(m["pad"] == "x" * 5000 for m in messages)


def test_a_connection_that_closes_without_writing_is_no_message_and_no_refusal(
    served: tuple[EventServer, Received],
) -> None:
    server, received = served
    connect(server.path).close()
    with connect(server.path) as client:
        client.sendall(line(7))
    assert [m["n"] for m in received.wait_for(1)] == [7]
    assert received.refused == []


def test_settle_returns_only_after_every_line_already_sent_was_delivered(
    served: tuple[EventServer, Received],
) -> None:
    # The agent's last `status` may still sit in the socket when the agent exits: the
    # supervisor settles the server before it ends the session, so the event is not lost.
    server, received = served
    for number in range(20):
        client = connect(server.path)
        client.sendall(line(number))
        client.close()
    assert server.settle(timeout=10.0)
    with received.lock:
        assert [m["n"] for m in received.messages] == list(range(20))


def test_settle_gives_up_at_its_timeout_while_delivery_is_held_back() -> None:
    # A supervisor not taking messages (its inbox full) must not hang the exit on settle.
    release = threading.Event()
    received = Received()

    def held_back(message: dict[str, object]) -> None:
        release.wait(10.0)
        received.deliver(message)

    server = EventServer(held_back, refuse=received.refuse).start()
    try:
        client = connect(server.path)
        client.sendall(line(1) + line(2))
        client.close()
        assert server.settle(timeout=0.3) is False
        release.set()
        assert server.settle(timeout=10.0) is True
        assert [m["n"] for m in received.messages] == [1, 2]
    finally:
        release.set()
        server.close()
