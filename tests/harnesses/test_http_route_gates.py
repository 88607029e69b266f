"""Gates on Claude Code's HTTP hook route: a refusable event's post waits for its gates'
decision and is answered in Claude Code's hook-output JSON; every other event at once.

The route is driven directly (a fake `ask` stands for the supervisor), then under `run` with a
program that posts as Claude Code does and a real policy endpoint (the real Claude Code binary
is in tests/harnesses/test_real_gates.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from otel_lifecycle_hooks.supervisor import ingest_http
from otel_lifecycle_hooks.supervisor.ingest_http import HttpIngest
from otel_lifecycle_hooks.supervisor.server import Reply
from tests.supervisor.supervised import wait_until
from tests.support.target_server import Reply as Answer
from tests.support.target_server import TargetServer

CLI = Path(sys.executable).with_name("otel-lifecycle-hooks")
RUN_TIMEOUT = 120  # seconds: a hang guard only
PRE_TOOL = {
    "session_id": "s1",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "rm -rf /"},
    "tool_use_id": "t-1",
}


class Supervisor:
    """The route's `deliver` and `ask`: what each got, and how `ask` answers."""

    def __init__(self, decision: dict[str, str] | None) -> None:
        self.decision = decision  # None: the reply is closed with no decision
        self.delivered: list[dict[str, Any]] = []
        self.asked: list[dict[str, Any]] = []
        self.held: list[Reply] = []
        self.hold = False  # never answer (the reply is kept open)
        self.lock = threading.Lock()

    def deliver(self, message: dict[str, Any]) -> None:
        with self.lock:
            self.delivered.append(message)

    def ask(self, message: dict[str, Any], reply: Reply) -> None:
        with self.lock:
            self.asked.append(message)
        if self.hold:
            self.held.append(reply)
        elif self.decision is None:
            reply.close()
        else:
            reply.send(self.decision)


@pytest.fixture
def supervisor() -> Supervisor:
    return Supervisor({"decision": "deny", "reason": "no rm -rf here", "gate": "shell-policy"})


@pytest.fixture
def client(supervisor: Supervisor) -> Iterator[tuple[HttpIngest, httpx.Client]]:
    ingest = HttpIngest(supervisor.deliver, ask=supervisor.ask).start()
    with httpx.Client(base_url=ingest.url, trust_env=False, timeout=30) as http:
        http.headers["Authorization"] = f"Bearer {ingest.token}"
        yield ingest, http
    for reply in supervisor.held:
        reply.close()
    ingest.close()


def post(http: httpx.Client, payload: dict[str, Any]) -> httpx.Response:
    response = http.post("/claude", json=payload)
    assert response.status_code == 200
    return response


def test_a_denied_tool_call_is_answered_with_claude_codes_permission_decision(
    supervisor: Supervisor, client: tuple[HttpIngest, httpx.Client]
) -> None:
    _, http = client
    response = post(http, PRE_TOOL)
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "no rm -rf here",
        }
    }
    [asked] = supervisor.asked
    assert (asked["event"], asked["fields"]["TOOL_NAME"]) == ("tool-start", "Bash")
    assert supervisor.delivered == []  # the asked message is not also delivered


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (
            {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "prompt": "go"},
            {"decision": "block", "reason": "no rm -rf here"},
        ),
        (
            {"hook_event_name": "Stop", "session_id": "s1", "stop_hook_active": False},
            {"decision": "block", "reason": "no rm -rf here"},
        ),
        (
            {
                "hook_event_name": "PermissionRequest",
                "session_id": "s1",
                "tool_name": "Bash",
                "tool_input": {"command": "ls"},
            },
            {
                "hookSpecificOutput": {
                    "hookEventName": "PermissionRequest",
                    "decision": {"behavior": "deny", "message": "no rm -rf here"},
                }
            },
        ),
    ],
)
def test_each_refusable_event_is_answered_in_its_own_shape(
    client: tuple[HttpIngest, httpx.Client], payload: dict[str, Any], expected: dict[str, Any]
) -> None:
    _, http = client
    assert post(http, payload).json() == expected


@pytest.mark.parametrize("decision", [{"decision": "allow", "reason": "", "gate": ""}, None])
def test_an_allow_or_no_decision_is_an_empty_200_so_claude_code_goes_on(
    supervisor: Supervisor, client: tuple[HttpIngest, httpx.Client], decision: Any
) -> None:
    supervisor.decision = decision
    _, http = client
    assert post(http, PRE_TOOL).content == b""
    assert len(supervisor.asked) == 1


def test_an_event_claude_code_cannot_refuse_is_answered_without_asking(
    supervisor: Supervisor, client: tuple[HttpIngest, httpx.Client]
) -> None:
    supervisor.hold = True  # an ask would never be answered
    _, http = client
    payload = {"hook_event_name": "PostToolUse", "session_id": "s1", "tool_name": "Bash"}
    assert post(http, payload).content == b""
    assert supervisor.asked == []


def test_no_decision_within_the_wait_is_an_empty_200(
    supervisor: Supervisor, client: tuple[HttpIngest, httpx.Client], monkeypatch: Any
) -> None:
    monkeypatch.setattr(ingest_http, "GATE_WAIT", 0.5)
    supervisor.hold = True
    _, http = client
    assert post(http, PRE_TOOL).content == b""
    # The connection is served again afterwards: the next post is answered too.
    supervisor.hold = False
    assert post(http, PRE_TOOL).json()["hookSpecificOutput"]["permissionDecision"] == "deny"


@pytest.mark.parametrize(
    ("payload", "said"),
    [
        (PRE_TOOL, lambda body: body["hookSpecificOutput"]["permissionDecision"]),
        (
            {"hook_event_name": "Stop", "session_id": "s1", "stop_hook_active": False},
            lambda body: body["decision"],
        ),
    ],
)
def test_no_decision_within_the_wait_denies_where_the_gate_is_fail_closed(
    supervisor: Supervisor, monkeypatch: Any, payload: dict[str, Any], said: Any
) -> None:
    """Past `GATE_WAIT` (a flood ahead of the event, a slow gate) the route answers by the
    gate's own policy: deny at an event with a fail-closed gate, allow (empty) elsewhere."""
    monkeypatch.setattr(ingest_http, "GATE_WAIT", 0.5)
    supervisor.hold = True
    closed = {"tool-start", "agent-end"}
    ingest = HttpIngest(
        supervisor.deliver, ask=supervisor.ask, fail_closed=closed.__contains__
    ).start()
    try:
        with httpx.Client(base_url=ingest.url, trust_env=False, timeout=30) as http:
            http.headers["Authorization"] = f"Bearer {ingest.token}"
            body = post(http, payload).json()
            assert said(body) in ("deny", "block")
            assert "fail-closed" in json.dumps(body)
            prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "prompt": "go"}
            assert post(http, prompt).content == b""  # no fail-closed gate there: allow
    finally:
        for reply in supervisor.held:
            reply.close()
        ingest.close()


def test_the_routes_event_names_are_the_claude_dialects() -> None:
    """The route names the lifecycle event of a refusable post before it is translated (its
    policy past `GATE_WAIT`): the same name the claude dialect gives it."""
    from otel_lifecycle_hooks.harness.dialects import claude
    from otel_lifecycle_hooks.harness.refusals import REFUSABLE

    for name in REFUSABLE["claude"]:
        payload = {"hook_event_name": name, "session_id": "s1", "tool_name": "Bash"}
        [event, *_] = claude.translate_hook_payload(payload, claude.NAME, lambda *_: None)
        assert ingest_http.REFUSABLE_EVENTS[name] == event.event


def test_a_waiting_post_never_holds_up_another_connection(
    supervisor: Supervisor, client: tuple[HttpIngest, httpx.Client]
) -> None:
    ingest, http = client
    supervisor.hold = True
    waiting = threading.Thread(target=post, args=(http, PRE_TOOL), daemon=True)
    waiting.start()
    with httpx.Client(base_url=ingest.url, trust_env=False, timeout=30) as other:
        other.headers["Authorization"] = f"Bearer {ingest.token}"
        payload = {"hook_event_name": "PostToolUse", "session_id": "s1", "tool_name": "Bash"}
        assert post(other, payload).content == b""
    deadline = time.monotonic() + 30  # a hang guard only
    while not supervisor.held and time.monotonic() < deadline:
        time.sleep(0.01)
    assert waiting.is_alive()  # still waiting for its decision
    supervisor.held[0].send({"decision": "allow"})
    waiting.join(timeout=30)
    assert not waiting.is_alive()


def test_without_a_token_nothing_is_asked(
    supervisor: Supervisor, client: tuple[HttpIngest, httpx.Client]
) -> None:
    ingest, _ = client
    with httpx.Client(base_url=ingest.url, trust_env=False, timeout=30) as anonymous:
        assert anonymous.post("/claude", json=PRE_TOOL).status_code == 401
    assert supervisor.asked == []


# -- under `run`: the supervisor's own gates ---------------------------------------------------

POSTER = textwrap.dedent(
    """
    import json, os, sys, urllib.request
    payload, out = sys.argv[1:3]
    request = urllib.request.Request(
        os.environ["LIFECYCLE_HOOKS_HTTP_URL"] + "/claude", data=payload.encode(),
        headers={"Authorization": "Bearer " + os.environ["LIFECYCLE_HOOKS_HTTP_TOKEN"],
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        open(out, "w").write(json.dumps({"status": response.status,
                                         "body": response.read().decode()}))
    """
)


def run_posting(
    tmp_path: Path, template: str, payload: dict[str, Any], poster: str = POSTER
) -> dict[str, Any]:
    (tmp_path / "scion-agent.yaml").write_text(textwrap.dedent(template))
    (tmp_path / "poster.py").write_text(poster)
    out = tmp_path / "answer.json"
    env = {
        "HOME": str(tmp_path),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "OTEL_LIFECYCLE_HOOKS_TRACE_DIR": str(tmp_path / "traces"),
        "LIFECYCLE_HOOKS_HTTP": "1",
    }
    argv = [str(CLI), "run", "--template", str(tmp_path / "scion-agent.yaml"), "--"]
    argv += [sys.executable, str(tmp_path / "poster.py"), json.dumps(payload), str(out)]
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(out.read_text())
    return answer


def gate_template(url: str, on_error: str = "log") -> str:
    return f"""
        lifecycle_hooks:
          - name: shell-policy
            on: [tool-start]
            action:
              type: http
              method: POST
              url: "{url}"
              body: '{{"tool": "${{TOOL_NAME}}"}}'
            blocking: true
            on_error: {on_error}
            timeout: 2s
        """


def test_under_run_a_gate_deny_is_the_routes_answer(tmp_path: Path) -> None:
    with TargetServer() as policy:
        policy.on("/p", Answer.json(200, '{"decision": "deny", "reason": "no rm -rf here"}'))
        answer = run_posting(tmp_path, gate_template(policy.url("/p")), PRE_TOOL)
        assert len(policy.requests) == 1
    said = json.loads(answer["body"])["hookSpecificOutput"]
    assert (said["permissionDecision"], said["permissionDecisionReason"]) == (
        "deny",
        "no rm -rf here",
    )


def test_under_run_an_endpoint_down_is_open_or_closed_as_the_gate_says(tmp_path: Path) -> None:
    down = "http://127.0.0.1:9/p"
    (tmp_path / "open").mkdir()
    assert run_posting(tmp_path / "open", gate_template(down), PRE_TOOL)["body"] == ""
    (tmp_path / "closed").mkdir()
    answer = run_posting(tmp_path / "closed", gate_template(down, "fail"), PRE_TOOL)
    said = json.loads(answer["body"])["hookSpecificOutput"]
    assert said["permissionDecision"] == "deny"
    assert "fail-closed" in said["permissionDecisionReason"]


def test_under_run_an_event_with_no_gate_is_answered_empty(tmp_path: Path) -> None:
    template = """
        lifecycle_hooks:
          - name: note
            on: [tool-end]
            action: {type: http, method: POST, url: "http://127.0.0.1:9/n"}
        """
    assert run_posting(tmp_path, template, PRE_TOOL) == {"status": 200, "body": ""}


FLOOD_POSTER = textwrap.dedent(
    """
    import json, os, socket, sys, time, urllib.request
    payload, out = sys.argv[1:3]
    line = json.dumps({"v": 1, "kind": "event", "event": "tool-start",
                       "fields": {"TOOL_NAME": "t"}}) + "\\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(os.environ["LIFECYCLE_HOOKS_SOCKET"])
        connection.sendall((line * 15).encode())
        connection.shutdown(socket.SHUT_WR)
    # Post only once the flood is at work (the first forged call reached the policy): on a
    # busy machine the post could otherwise be admitted ahead of the forged lines.
    deadline = time.monotonic() + 120
    while not os.path.exists(out + ".go") and time.monotonic() < deadline:
        time.sleep(0.01)
    request = urllib.request.Request(
        os.environ["LIFECYCLE_HOOKS_HTTP_URL"] + "/claude", data=payload.encode(),
        headers={"Authorization": "Bearer " + os.environ["LIFECYCLE_HOOKS_HTTP_TOKEN"],
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        open(out, "w").write(json.dumps({"status": response.status,
                                         "body": response.read().decode()}))
    """
)


def test_under_run_a_flood_ahead_of_the_post_does_not_open_a_fail_closed_gate(
    tmp_path: Path,
) -> None:
    """The agent writes forged tool-start lines to the event socket, each costing the
    policy's answer time (1 s), before its harness posts: the real decision comes after
    `GATE_WAIT`, and the route answers by the fail-closed gate's policy, deny."""
    with TargetServer() as policy:
        slow_deny = b'{"decision": "deny", "reason": "no"}'
        policy.always("/p", Answer(200, {"content-type": "application/json"}, slow_deny, delay=1.0))
        go = tmp_path / "answer.json.go"

        def start_posting_once_flooded() -> None:
            wait_until(lambda: policy.requests, timeout=120, what="a forged call at the policy")
            go.touch()

        signaller = threading.Thread(target=start_posting_once_flooded, daemon=True)
        signaller.start()
        answer = run_posting(
            tmp_path, gate_template(policy.url("/p"), "fail"), PRE_TOOL, poster=FLOOD_POSTER
        )
        signaller.join(timeout=120)
    said = json.loads(answer["body"])["hookSpecificOutput"]
    assert said["permissionDecision"] == "deny"
    assert "fail-closed" in said["permissionDecisionReason"]
