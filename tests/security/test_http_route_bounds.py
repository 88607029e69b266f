"""Claude Code's HTTP route stays bounded whoever connects: a root `run --user nobody` with the
route open, attacked with large bodies of empty objects (by the agent, which has the token) and
with thousands of trickling connections (by any local user, without it). The supervisor's
memory, threads and descriptors stay under the bounds stated here (and in
supervisor/ingest_http.py), a valid post is still taken meanwhile, every refusal is counted by
the supervisor, and nothing reaches the operator's terminal as a traceback.
"""

from __future__ import annotations

import contextlib
import re
import resource
import signal
import socket
import threading
from collections.abc import Iterator

import pytest

from otel_lifecycle_hooks.supervisor.ingest_http import MAX_BODY_BYTES, MAX_CONNECTIONS
from tests.security.http_route import (
    AgentUserWorkspace,
    agent_user_workspace,
    kib,
    needs_root,
    needs_system_python,
    open_descriptors,
    post,
    proc_status,
    read_report,
)
from tests.supervisor.supervised import Run, recorded, recorder_hook, wait_until
from tests.support.target_server import TargetServer

pytestmark = [needs_root, needs_system_python]

# Stated bounds. Memory: what the route may hold at once is 32 MiB of bodies in flight, one
# parse (at most 200,000 JSON tokens) and 32 MiB charged to the delivery queue; before, 8 such
# bodies added about 945 MB.
MAX_RSS_GROWTH_KIB = 96 * 1024
# Descriptors: the route's open connections, at most MAX_CONNECTIONS, and a few spare for what
# the supervisor opens meanwhile (the journal, a hook's connection).
SPARE_DESCRIPTORS = 16
# Threads: the route has three (serving, parsing, delivering) whatever connects; a few spare
# for the hook engine's workers, which a delivered event may start.
SPARE_THREADS = 4
BODIES = 8
TRICKLERS = 2000


@pytest.fixture
def space() -> Iterator[AgentUserWorkspace]:
    with agent_user_workspace() as workspace:
        yield workspace


def start_route(
    space: AgentUserWorkspace, target_server: TargetServer, descriptors: int | None = None
) -> tuple[Run, str, str]:
    """A root supervisor whose agent (nobody) reports the route's URL and token; with
    `descriptors`, the supervisor's descriptor limit (the common 1,024)."""
    template = space.template(recorder_hook(target_server.url("/events"), ["tool-end"]))
    command, report_path = space.posting_command()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if descriptors is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(descriptors, hard), hard))
    try:
        run = space.start_as_nobody(template, command)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    report = read_report(report_path)
    return run, report["url"], report["token"]


def valid_post(url: str, token: str, name: str) -> int:
    return post(
        url,
        token,
        {
            "hook_event_name": "PostToolUse",
            "session_id": "s-1",
            "cwd": "/",
            "transcript_path": "",
            "tool_name": name,
            "tool_input": {},
            "tool_response": {},
        },
    )


def tool_ends(target_server: TargetServer) -> list[str]:
    return [e["TOOL_NAME"] for e in recorded(target_server) if e["EVENT"] == "tool-end"]


def refusals(stderr: str) -> dict[str, int]:
    """The supervisor's closing count: `agent input: refused N (reason: n, ...)`."""
    found = re.search(r"agent input: refused \d+ \(([^)]*)\)", stderr)
    if found is None:
        return {}
    pairs = (part.split(": ") for part in found.group(1).split(", "))
    return {reason: int(count) for reason, count in pairs}


def stop(run: Run) -> str:
    run.signal(signal.SIGTERM)
    run.wait(timeout=60)
    return run.stderr


def empty_objects_body(size: int) -> bytes:
    """A Claude payload of `size` bytes, nearly all of it empty objects (`{},` each)."""
    head = b'{"hook_event_name": "PostToolUse", "tool_name": "flood", "tool_response": ['
    tail = b"{}]}"
    count = (size - len(head) - len(tail)) // 3
    body = head + b"{}," * count + tail
    return body + b" " * (size - len(body))


def test_eight_bodies_of_empty_objects_at_once_stay_under_the_memory_bound(
    space: AgentUserWorkspace, target_server: TargetServer
) -> None:
    run, url, token = start_route(space, target_server)
    pid = run.process.pid
    before = kib(proc_status(pid)["VmRSS"])
    body = empty_objects_body(MAX_BODY_BYTES)
    host, port = url.removeprefix("http://").split(":")
    half = len(body) // 2
    halfway = threading.Barrier(BODIES + 1, timeout=120)
    statuses: list[str] = []

    def flood() -> None:
        with socket.create_connection((host, int(port)), timeout=120) as connection:
            try:
                head = (
                    f"POST /claude HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                )
                connection.sendall(head.encode() + body[:half])
            except OSError:
                pass  # refused before its body was read: the rest is not wanted
            halfway.wait()
            with contextlib.suppress(OSError):
                connection.sendall(body[half:])
            try:
                statuses.append(connection.makefile("rb").readline().decode(errors="replace"))
            except OSError:
                statuses.append("reset")

    senders = [threading.Thread(target=flood) for _ in range(BODIES)]
    for sender in senders:
        sender.start()
    halfway.wait()  # every body is half sent: a valid post now, while they arrive
    assert valid_post(url, token, "valid-while-flooded") == 200
    for sender in senders:
        sender.join(timeout=120)
    wait_until(lambda: "valid-while-flooded" in tool_ends(target_server), what="the valid post")
    peak = kib(proc_status(pid)["VmHWM"])
    stderr = stop(run)

    assert peak - before < MAX_RSS_GROWTH_KIB, (before, peak)
    assert "Traceback" not in stderr, stderr[-3000:]
    counted = refusals(stderr)
    # Each body was refused, and counted: too many tokens once read, or no room to read it.
    assert counted.get("http_json_too_large", 0) + counted.get("http_bodies_in_flight", 0) == (
        BODIES
    ), (counted, statuses)
    assert tool_ends(target_server) == ["valid-while-flooded"]


def test_two_thousand_trickling_connections_hold_no_thread_and_few_descriptors(
    space: AgentUserWorkspace, target_server: TargetServer
) -> None:
    needed = TRICKLERS + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"this process may open {hard} descriptors, the attack needs {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        run, url, token = start_route(space, target_server, descriptors=1024)
        pid = run.process.pid
        threads_before = int(proc_status(pid)["Threads"])
        descriptors_before = open_descriptors(pid)
        host, port = url.removeprefix("http://").split(":")
        tricklers: list[socket.socket] = []
        threads, descriptors = [threads_before], [descriptors_before]
        try:
            for _ in range(TRICKLERS):
                # No token: any local user. The first byte of a request, then one a second.
                connection = socket.create_connection((host, int(port)), timeout=60)
                tricklers.append(connection)
                with contextlib.suppress(OSError):
                    connection.send(b"P")
            for _ in range(3):
                for connection in tricklers:
                    # Closed by the supervisor: it made room, or the deadline came.
                    with contextlib.suppress(OSError):
                        connection.send(b"O")
                threads.append(int(proc_status(pid)["Threads"]))
                descriptors.append(open_descriptors(pid))
                threading.Event().wait(1.0)  # a byte a second
            # While they are all still open on our side, a valid post is taken.
            assert valid_post(url, token, "valid-while-trickled") == 200
            wait_until(
                lambda: "valid-while-trickled" in tool_ends(target_server), what="the valid post"
            )
        finally:
            for connection in tricklers:
                connection.close()
        stderr = stop(run)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    assert max(threads) <= threads_before + SPARE_THREADS, (threads_before, threads)
    assert max(descriptors) <= descriptors_before + MAX_CONNECTIONS + SPARE_DESCRIPTORS, (
        descriptors_before,
        descriptors,
    )
    assert "Traceback" not in stderr, stderr[-3000:]
    # Every trickling connection was refused and counted once: closed to make room, at its
    # deadline, when it ended unfinished, or when the route closed.
    counted = refusals(stderr)
    trickled = sum(
        counted.get(reason, 0)
        for reason in (
            "http_too_many_connections",
            "http_request_deadline",
            "http_incomplete_request",
            "http_route_closed",
        )
    )
    assert trickled == TRICKLERS, counted
    assert tool_ends(target_server) == ["valid-while-trickled"]
