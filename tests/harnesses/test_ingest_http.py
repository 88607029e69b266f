"""Claude Code's `http` hooks into the supervisor: loopback only, a per-session token, bounded
bodies, answered at once, translated by the claude dialect, delivered in order."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from otel_lifecycle_hooks.loopback import is_loopback_host
from otel_lifecycle_hooks.supervisor.ingest_http import MAX_BODY_BYTES, HttpIngest
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
            self.arrived.wait_for(lambda: len(self.messages) >= count, timeout=10)
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
            f"Content-Type: application/json\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
            .encode()
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
                response = client.post("/claude", json={"hook_event_name": "Stop"},
                                       headers=auth(ingest))
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
    [("127.0.0.1", True), ("127.9.9.9", True), ("::1", True), ("::ffff:127.0.0.1", True),
     ("10.0.0.1", False), ("::ffff:10.0.0.1", False), ("192.168.1.2", False), ("name", False)],
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
    result = harness.run(tmp_path, script, extra=["--allowedTools", "Bash"],
                         program=["/bin/false"], after_install=_uninstall_command_hooks)
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
            queued = [client.post("/claude", content=body, headers=auth(ingest)).status_code
                      for _ in range(5)]
    finally:
        release.set()
        ingest.close()
    # Three more fit in 64 KiB while the delivery waits; the rest are refused, not buffered.
    assert (first, queued) == (200, [200, 200, 200, 503, 503])
