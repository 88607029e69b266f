"""Claude Code's `http` hooks into the supervisor: loopback only, a per-session token, bounded
bodies, answered at once, translated by the claude dialect, delivered in order."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from otel_lifecycle_hooks.loopback import is_loopback_host
from otel_lifecycle_hooks.supervisor.ingest_http import (
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    MAX_HEADER_BYTES,
    MAX_JSON_DEPTH,
    MAX_JSON_TOKENS,
    REQUEST_DEADLINE,
    HttpIngest,
    json_token_count,
)
from tests.harnesses.fake_models import Step
from tests.harnesses.real import Claude, harness_binary
from tests.harnesses.session import PACKAGE_CLI


class Delivered:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.arrived = threading.Condition()

    def __call__(self, message: dict[str, Any]) -> None:
        with self.arrived:
            self.messages.append(message)
            self.arrived.notify_all()

    def wait_for(self, count: int) -> list[dict[str, Any]]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.messages) >= count, timeout=60)
        return self.messages


@pytest.fixture
def route() -> Any:
    delivered = Delivered()
    ingest = HttpIngest(delivered, lambda: len(delivered.messages)).start()
    client = httpx.Client(base_url=ingest.url, trust_env=False, timeout=10)
    yield ingest, delivered, client
    client.close()
    ingest.close()


def auth(ingest: HttpIngest) -> dict[str, str]:
    return {"Authorization": f"Bearer {ingest.token}"}


def test_each_payload_is_translated_and_delivered_in_order_with_an_empty_200(route: Any) -> None:
    ingest, delivered, client = route
    for payload in (
        {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "prompt": "go"},
        {"hook_event_name": "PreToolUse", "session_id": "s1", "tool_name": "Bash"},
        {"hook_event_name": "PostToolUse", "session_id": "s1", "tool_name": "Bash"},
    ):
        response = client.post("/claude", json=payload, headers=auth(ingest))
        assert (response.status_code, response.content) == (200, b"")
    messages = delivered.wait_for(3)
    assert [m["event"] for m in messages] == ["prompt-submit", "tool-start", "tool-end"]
    assert messages[1]["fields"]["TOOL_NAME"] == "Bash"
    assert all(m["kind"] == "event" and m["dialect"] == "claude" for m in messages)


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "Basic abc", "Bearer"])
def test_a_missing_or_wrong_token_gets_401_and_delivers_nothing(
    route: Any, header: str | None
) -> None:
    _ingest, delivered, client = route
    headers = {} if header is None else {"Authorization": header}
    response = client.post("/claude", json={"hook_event_name": "Stop"}, headers=headers)
    assert response.status_code == 401
    assert client.get("/v1/status", headers=headers).status_code == 401
    assert delivered.messages == []


def test_a_body_over_the_limit_is_refused_before_it_is_read(route: Any) -> None:
    ingest, delivered, _client = route
    host, port = ingest.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(
            f"POST /claude HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ingest.token}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode()
        )
        status_line = connection.makefile("rb").readline()
    assert status_line.split()[1] == b"413"
    assert delivered.messages == []


def test_a_body_without_a_length_is_refused(route: Any) -> None:
    ingest, delivered, client = route
    chunks = iter([b'{"hook_event_name": ', b'"Stop"}'])
    response = client.post("/claude", content=chunks, headers=auth(ingest))
    assert response.status_code == 411
    assert delivered.messages == []


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_a_body_that_is_not_a_json_object_gets_400(route: Any, body: bytes) -> None:
    ingest, delivered, client = route
    response = client.post("/claude", content=body, headers=auth(ingest))
    assert response.status_code == 400
    assert delivered.messages == []


def test_other_paths_and_methods_are_refused(route: Any) -> None:
    ingest, _delivered, client = route
    assert client.post("/gemini", json={}, headers=auth(ingest)).status_code == 404
    assert client.put("/claude", json={}, headers=auth(ingest)).status_code == 405


def test_a_slow_delivery_never_holds_up_the_answer(tmp_path: Path) -> None:
    release = threading.Event()
    delivered: list[dict[str, Any]] = []

    def stalled(message: dict[str, Any]) -> None:
        release.wait(30)
        delivered.append(message)

    ingest = HttpIngest(stalled).start()
    try:
        with httpx.Client(base_url=ingest.url, trust_env=False, timeout=10) as client:
            for _ in range(3):
                response = client.post(
                    "/claude", json={"hook_event_name": "Stop"}, headers=auth(ingest)
                )
                assert response.status_code == 200
        assert delivered == []  # all three answered while the first delivery still waits
    finally:
        release.set()
        ingest.close()


def test_status_tells_how_many_messages_the_session_received(route: Any) -> None:
    ingest, delivered, client = route
    client.post("/claude", json={"hook_event_name": "Stop"}, headers=auth(ingest))
    delivered.wait_for(1)
    assert client.get("/v1/status", headers=auth(ingest)).json() == {"received": 1}


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("192.168.1.2", False),
        ("name", False),
    ],
)
def test_only_loopback_peers_are_served(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_real_claude_code_posts_its_events_to_the_supervisor_with_no_hook_process(
    tmp_path: Path,
) -> None:
    """Claude Code launched with the settings file the supervisor wrote (its http hooks), and
    no command hook installed: every event still arrives, and only SessionStart (where Claude
    Code runs no http hook) starts a hook process."""

    class ClaudeOverHttp(Claude):
        def command(self, prompt: str, extra: Any) -> list[str]:
            claude = " ".join([str(self.binary), "-p", json.dumps(prompt), *extra])
            return ["sh", "-c", f'exec {claude} --settings "$LIFECYCLE_HOOKS_CLAUDE_SETTINGS"']

    harness = ClaudeOverHttp(harness_binary("claude"))
    script = [
        Step.shell(f"{PACKAGE_CLI} status task_completed 'over http' && echo tool-ran"),
        Step.reply("Done."),
    ]
    # A project with no hooks of ours: nothing is installed, only the session's settings act.
    result = harness.run(
        tmp_path,
        script,
        extra=["--allowedTools", "Bash"],
        program=["/bin/false"],
        after_install=_uninstall_command_hooks,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runtime = [e["hook_event_name"] for e in result.runtime_events()]
    assert runtime[:2] == ["session-start", "prompt-submit"], runtime
    assert {"tool-start", "tool-end", "agent-end"} <= set(runtime), runtime
    assert [c["TASK_SUMMARY"] for c in result.fired("task-completed")] == ["over http"]
    assert "[hook]" not in result.hook_log()


def _uninstall_command_hooks(session: Any) -> None:
    (session.home / ".claude" / "settings.json").unlink()


def test_a_flood_of_large_bodies_is_refused_while_delivery_waits_not_buffered() -> None:
    delivering, release = threading.Event(), threading.Event()

    def stalled(message: dict[str, Any]) -> None:
        delivering.set()
        release.wait(30)

    ingest = HttpIngest(stalled, max_queued_bytes=64 * 1024).start()
    body = json.dumps({"hook_event_name": "Stop", "padding": "x" * 20_000}).encode()
    try:
        with httpx.Client(base_url=ingest.url, trust_env=False, timeout=10) as client:
            first = client.post("/claude", content=body, headers=auth(ingest)).status_code
            assert delivering.wait(10)  # the first one is out of the queue, being delivered
            queued = [
                client.post("/claude", content=body, headers=auth(ingest)).status_code
                for _ in range(5)
            ]
    finally:
        release.set()
        ingest.close()
    # Three more fit in 64 KiB while the delivery waits; the rest are refused, not buffered.
    assert (first, queued) == (200, [200, 200, 200, 503, 503])


# -- the route's bounds (supervisor/ingest_http.py) ---------------------------------------------


class Refusals:
    """The reasons `refuse` was called with, in order (thread-safe)."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.changed = threading.Condition()

    def __call__(self, reason: str) -> None:
        with self.changed:
            self.reasons.append(reason)
            self.changed.notify_all()

    def wait_for(self, reason: str) -> list[str]:
        with self.changed:
            self.changed.wait_for(lambda: reason in self.reasons, timeout=30)
        return self.reasons


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def counted() -> Any:
    delivered, refusals, clock = Delivered(), Refusals(), FakeClock()
    ingest = HttpIngest(delivered, refuse=refusals, clock=clock).start()
    yield ingest, delivered, refusals, clock
    ingest.close()


def connect(ingest: HttpIngest) -> socket.socket:
    host, port = ingest.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def head(ingest: HttpIngest, length: int, *extra: str) -> bytes:
    lines = [
        "POST /claude HTTP/1.1",
        "Host: x",
        f"Authorization: Bearer {ingest.token}",
        f"Content-Length: {length}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def closed_by_peer(connection: socket.socket) -> bool:
    """Waits until the route closes this connection (what it answered before is skipped);
    a connection left open fails the test with the socket's timeout."""
    try:
        while connection.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def test_a_request_not_finished_by_its_deadline_is_cut_off_and_counted(counted: Any) -> None:
    ingest, delivered, refusals, clock = counted
    with connect(ingest) as connection:
        connection.sendall(head(ingest, 100, "Expect: 100-continue"))
        assert connection.recv(100).startswith(b"HTTP/1.1 100 ")  # its head is taken
        connection.sendall(b'{"hook_event_name": ')  # and no more
        with connect(ingest) as idle:
            # Answered on a connection accepted after `idle`: `idle` is accepted too.
            with httpx.Client(base_url=ingest.url, trust_env=False, timeout=30) as client:
                assert client.get("/v1/status", headers=auth(ingest)).status_code == 200
            clock.now += REQUEST_DEADLINE + 1
            assert closed_by_peer(connection) and closed_by_peer(idle)
    assert refusals.wait_for("http_idle_connection")
    assert sorted(refusals.reasons) == ["http_idle_connection", "http_request_deadline"]
    assert delivered.messages == []


def test_at_the_bound_the_oldest_connection_without_the_token_makes_room(counted: Any) -> None:
    ingest, delivered, refusals, _clock = counted
    held = [connect(ingest) for _ in range(MAX_CONNECTIONS)]
    try:
        for connection in held:
            connection.sendall(b"POST /claude HTTP/1.1\r\n")  # a head that never ends
        with httpx.Client(base_url=ingest.url, trust_env=False, timeout=30) as client:
            answer = client.post("/claude", json={"hook_event_name": "Stop"}, headers=auth(ingest))
        assert answer.status_code == 200
        assert closed_by_peer(held[0])  # the oldest
        assert delivered.wait_for(1)[0]["event"] == "agent-end"
        assert refusals.reasons == ["http_too_many_connections"]
    finally:
        for connection in held:
            connection.close()


def test_when_every_open_connection_showed_the_token_a_new_one_is_refused(counted: Any) -> None:
    ingest, _delivered, refusals, _clock = counted
    held = [connect(ingest) for _ in range(MAX_CONNECTIONS)]
    try:
        for connection in held:  # each waits for its body: the agent holding every slot
            connection.sendall(head(ingest, 10, "Expect: 100-continue"))
        for connection in held:
            assert connection.recv(100).startswith(b"HTTP/1.1 100 ")
        with connect(ingest) as late:
            late.sendall(head(ingest, 2) + b"{}")
            assert closed_by_peer(late)
        assert refusals.wait_for("http_too_many_connections") == ["http_too_many_connections"]
    finally:
        for connection in held:
            connection.close()


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        (b'{"a": [' + b"{}," * (MAX_JSON_TOKENS // 2) + b"{}]}", 413, "http_json_too_large"),
        (
            b'{"a": ' + b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1) + b"}",
            413,
            "http_json_too_large",
        ),
        (b"[1, 2]", 400, "http_not_an_object"),
        (b"{nope", 400, "http_not_json"),
    ],
    ids=["too-many-tokens", "too-deep", "an-array", "not-json"],
)
def test_a_body_over_the_json_bounds_or_not_an_object_is_refused_and_counted(
    counted: Any, body: bytes, status: int, reason: str
) -> None:
    ingest, delivered, refusals, _clock = counted
    with httpx.Client(base_url=ingest.url, trust_env=False, timeout=30) as client:
        assert client.post("/claude", content=body, headers=auth(ingest)).status_code == status
    assert refusals.wait_for(reason) == [reason]
    assert delivered.messages == []


@pytest.mark.parametrize(
    ("request_bytes", "status", "reason"),
    [
        (
            b"POST /claude HTTP/1.1\r\nX: " + b"y" * MAX_HEADER_BYTES + b"\r\n\r\n",
            431,
            "http_header_too_large",
        ),
        (b"POST /claude HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 401, "http_unauthorized"),
        (b"POST /claude HTTP/2.0\r\n\r\n", 505, "http_bad_request"),
        (b"POST /claude HTTP/1.1\r\n folded\r\n\r\n", 400, "http_bad_request"),
    ],
    ids=["head-too-large", "no-token", "not-http-1", "folded-header"],
)
def test_a_bad_head_is_answered_and_counted_before_anything_else_is_read(
    counted: Any, request_bytes: bytes, status: int, reason: str
) -> None:
    ingest, _delivered, refusals, _clock = counted
    with connect(ingest) as connection:
        connection.sendall(request_bytes)
        assert connection.makefile("rb").readline().split()[1] == str(status).encode()
    assert refusals.wait_for(reason) == [reason]


def test_two_lengths_or_a_chunked_body_are_refused(counted: Any) -> None:
    ingest, _delivered, refusals, _clock = counted
    for extra, status in (("Content-Length: 3", 400), ("Transfer-Encoding: chunked", 411)):
        with connect(ingest) as connection:
            connection.sendall(head(ingest, 2, extra) + b"{}")
            assert connection.makefile("rb").readline().split()[1] == str(status).encode()
    refusals.wait_for("http_length_required")
    assert refusals.reasons == ["http_bad_request", "http_length_required"]


def test_posts_on_one_kept_alive_connection_are_each_answered_and_delivered(counted: Any) -> None:
    ingest, delivered, refusals, _clock = counted
    with httpx.Client(base_url=ingest.url, trust_env=False, timeout=30) as client:
        for name in ("PreToolUse", "PostToolUse", "Stop"):
            answer = client.post("/claude", json={"hook_event_name": name}, headers=auth(ingest))
            assert answer.status_code == 200
            assert answer.headers.get("connection") != "close"
    assert [m["event"] for m in delivered.wait_for(3)] == ["tool-start", "tool-end", "agent-end"]
    assert refusals.reasons == []


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        (b'{"a": "{[,:]}"}', 5),  # brackets inside a string are text, not structure
        (b'{"a": "say \\"{\\" ok", "b": [1, 2]}', 11),
        (b"", 0),
    ],
)
def test_json_tokens_are_counted_outside_strings_only(body: bytes, tokens: int) -> None:
    assert json_token_count(body) == tokens


def test_json_past_either_bound_has_no_count() -> None:
    assert json_token_count(b"[" * (MAX_JSON_DEPTH + 1)) is None
    assert json_token_count(b"[" + b"0," * MAX_JSON_TOKENS + b"0]") is None
    assert json_token_count(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH) == 2 * MAX_JSON_DEPTH


@pytest.mark.parametrize("length", ["\u00b2", "+2", "0x2", "2 2", "9" * 13])
def test_a_length_that_is_not_plain_digits_is_refused_and_the_route_goes_on(
    counted: Any, length: str
) -> None:
    ingest, delivered, refusals, _clock = counted
    with connect(ingest) as connection:
        request = head(ingest, 0).replace(
            b"Content-Length: 0", f"Content-Length: {length}".encode("latin-1")
        )
        connection.sendall(request + b"{}")
        assert connection.makefile("rb").readline().split()[1] == b"400"
    with httpx.Client(base_url=ingest.url, trust_env=False, timeout=30) as client:
        answer = client.post("/claude", json={"hook_event_name": "Stop"}, headers=auth(ingest))
    assert answer.status_code == 200
    assert delivered.wait_for(1)[0]["event"] == "agent-end"
    assert refusals.reasons == ["http_bad_request"]


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        (b'["a\\"', 2),  # the last quote escaped: the string runs to the end
        (b'["a\\\\"]', 3),  # an escaped backslash, then the closing quote
        (b'["a', 2),
    ],
)
def test_a_string_left_open_ends_the_count(body: bytes, tokens: int) -> None:
    assert json_token_count(body) == tokens


def test_strings_left_open_from_every_quote_are_counted_in_one_pass() -> None:
    # Before: each escaped quote began a new attempt to the end, hours for 8 MiB (in one call
    # that holds the GIL: hence a process of its own, its timeout a hang guard).
    code = (
        "from otel_lifecycle_hooks.supervisor.ingest_http import MAX_BODY_BYTES, "
        "json_token_count\n"
        "print(json_token_count(b'\"' + b'\\\\\"' * (MAX_BODY_BYTES // 2 - 1)))"
    )
    counted = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert counted.stdout.strip() == "1"


# A route in a process of its own whose descriptors run out: it reports its URL and token,
# fills its descriptor table, waits for the first failed accept and one second more, says how
# many accepts failed, frees the descriptors, and reports each delivery.
OUT_OF_DESCRIPTORS = r"""
import json, os, resource, sys, threading, time
from otel_lifecycle_hooks.supervisor.ingest_http import HttpIngest

refused = []
ingest = HttpIngest(lambda m: print("delivered " + m["event"], flush=True),
                    refuse=refused.append).start()
print(json.dumps({"url": ingest.url, "token": ingest.token}), flush=True)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
print("full", flush=True)
while "http_accept_failed" not in refused:
    time.sleep(0.01)
time.sleep(1.0)
print("failed accepts " + str(refused.count("http_accept_failed")), flush=True)
for descriptor in held:
    os.close(descriptor)
sys.stdin.readline()
ingest.close()
"""


def test_out_of_descriptors_the_route_waits_instead_of_spinning_and_then_serves() -> None:
    route = subprocess.Popen(
        [sys.executable, "-c", OUT_OF_DESCRIPTORS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert route.stdin is not None and route.stdout is not None
    try:
        where = json.loads(route.stdout.readline())
        assert route.stdout.readline().strip() == "full"
        host, port = where["url"].removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=60) as waiting:
            # In the backlog while the route has no descriptor to accept it with.
            failed = route.stdout.readline().split()
            assert failed[:2] == ["failed", "accepts"]
            # A spinning listener fails thousands of times a second; one that waits, a few.
            assert 1 <= int(failed[2]) <= 20
            body = b'{"hook_event_name": "Stop"}'
            waiting.sendall(
                f"POST /claude HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {where['token']}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert waiting.makefile("rb").readline().split()[1] == b"200"
        assert route.stdout.readline().strip() == "delivered agent-end"
    finally:
        route.stdin.write("done\n")
        route.stdin.close()
        route.wait(timeout=120)
        route.stdout.close()
