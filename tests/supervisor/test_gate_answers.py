"""Gates under `run`: the `hook` command a harness runs waits for the supervisor's decision on
the event's gates and prints it in the harness's protocol. The harness here is a small
program run as the agent that calls `hook` the way Claude Code and Gemini CLI do (the real
binaries are driven in tests/harnesses/test_real_gates.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.target_server import Reply, TargetServer

CLI = Path(sys.executable).with_name("otel-lifecycle-hooks")
RUN_TIMEOUT = 120  # seconds: a hang guard only

# Runs `hook` as a harness does, with one payload, and keeps what it printed.
HARNESS = textwrap.dedent(
    """
    import json, subprocess, sys
    cli, dialect, payload, out = sys.argv[1:5]
    extra = sys.argv[5:]
    done = subprocess.run([cli, "hook", "--dialect", dialect, *extra], input=payload.encode(),
                          capture_output=True)
    open(out, "w").write(json.dumps({"code": done.returncode, "stdout": done.stdout.decode()}))
    """
)
CLAUDE_PRE_TOOL = {
    "session_id": "s-1",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "rm -rf /"},
    "tool_use_id": "t-1",
    "permission_mode": "default",
}
GEMINI_BEFORE_TOOL = {
    "session_id": "s-1",
    "hook_event_name": "BeforeTool",
    "tool_name": "run_shell_command",
    "tool_input": {"command": "rm -rf /"},
    "timestamp": "2026-01-01T00:00:00Z",
}


def gate_template(tmp_path: Path, url: str, on_error: str = "log") -> Path:
    path = tmp_path / "scion-agent.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
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
        )
    )
    return path


def run_harness(
    tmp_path: Path, template: Path, dialect: str, payload: dict[str, object], *extra: str
) -> dict[str, object]:
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    out = tmp_path / "answer.json"
    argv = [
        str(CLI),
        "run",
        "--template",
        str(template),
        "--",
        sys.executable,
        str(harness),
        str(CLI),
        dialect,
        json.dumps(payload),
        str(out),
        *extra,
    ]
    env = {
        "HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "OTEL_LIFECYCLE_HOOKS_TRACE_DIR": str(tmp_path / "traces"),
    }
    done = subprocess.run(
        argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, object] = json.loads(out.read_text())
    return answer


@pytest.fixture
def policy() -> TargetServer:
    with TargetServer() as server:
        yield server


def test_a_deny_reaches_claude_code_as_a_pre_tool_use_permission_decision(
    tmp_path: Path, policy: TargetServer
) -> None:
    policy.on("/p", Reply.json(200, '{"decision": "deny", "reason": "no rm -rf here"}'))
    answer = run_harness(
        tmp_path, gate_template(tmp_path, policy.url("/p")), "claude", CLAUDE_PRE_TOOL
    )
    assert answer["code"] == 0
    assert json.loads(str(answer["stdout"])) == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "no rm -rf here",
        }
    }
    [request] = policy.requests
    assert json.loads(request.body) == {"tool": "Bash"}


def test_a_deny_reaches_gemini_cli_as_its_decision(tmp_path: Path, policy: TargetServer) -> None:
    policy.on("/p", Reply.json(200, '{"decision": "deny", "reason": "not here"}'))
    answer = run_harness(
        tmp_path, gate_template(tmp_path, policy.url("/p")), "gemini", GEMINI_BEFORE_TOOL
    )
    assert json.loads(str(answer["stdout"])) == {"decision": "deny", "reason": "not here"}


def test_an_allow_prints_nothing_so_the_harness_keeps_its_own_checks(
    tmp_path: Path, policy: TargetServer
) -> None:
    policy.on("/p", Reply.json(200, '{"decision": "allow"}'))
    answer = run_harness(
        tmp_path, gate_template(tmp_path, policy.url("/p")), "claude", CLAUDE_PRE_TOOL
    )
    assert answer == {"code": 0, "stdout": ""}
    assert len(policy.requests) == 1


def test_an_endpoint_down_is_open_by_default_and_closed_under_on_error_fail(
    tmp_path: Path,
) -> None:
    down = "http://127.0.0.1:9/p"
    (tmp_path / "open").mkdir()
    answer = run_harness(
        tmp_path / "open", gate_template(tmp_path / "open", down), "claude", CLAUDE_PRE_TOOL
    )
    assert answer["stdout"] == ""
    (tmp_path / "closed").mkdir()
    closed = gate_template(tmp_path / "closed", down, on_error="fail")
    answer = run_harness(tmp_path / "closed", closed, "claude", CLAUDE_PRE_TOOL)
    said = json.loads(str(answer["stdout"]))["hookSpecificOutput"]
    assert said["permissionDecision"] == "deny"
    assert "fail-closed" in said["permissionDecisionReason"]


def test_without_a_supervisor_the_install_time_policy_answers(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    payload = json.dumps(CLAUDE_PRE_TOOL).encode()
    opened = subprocess.run(
        [str(CLI), "hook", "--dialect", "claude"],
        input=payload,
        env=env,
        capture_output=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert (opened.returncode, opened.stdout) == (0, b"")
    closed = subprocess.run(
        [str(CLI), "hook", "--dialect", "claude", "--on-unreachable", "deny"],
        input=payload,
        env=env,
        capture_output=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert closed.returncode == 0
    said = json.loads(closed.stdout)["hookSpecificOutput"]
    assert (
        said["permissionDecision"] == "deny" and "fail-closed" in said["permissionDecisionReason"]
    )


def test_an_agent_served_socket_cannot_forge_an_allow(tmp_path: Path) -> None:
    """The agent points the hook at a socket of its own that answers allow: the answer is
    refused (its server is no ancestor of the hook), and a fail-closed hook denies."""
    path = tmp_path / "fake.sock"
    ready = tmp_path / "ready"
    # Served by a process that is not the hook's ancestor: a sibling, as an agent's tool is.
    forger = textwrap.dedent(
        f"""
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind({str(path)!r})
        s.listen(1)
        open({str(ready)!r}, "w").close()
        c, _ = s.accept()
        c.recv(65536)
        c.sendall(b'{{"decision": "allow", "reason": "forged"}}\\n')
        c.close()
        """
    )
    serving = subprocess.Popen([sys.executable, "-c", forger])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LIFECYCLE_HOOKS_SOCKET": str(path)}
        done = subprocess.run(
            [str(CLI), "hook", "--dialect", "claude", "--on-unreachable", "deny"],
            input=json.dumps(CLAUDE_PRE_TOOL).encode(),
            env=env,
            capture_output=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
        said = json.loads(done.stdout)["hookSpecificOutput"]
        assert said["permissionDecision"] == "deny"
        assert b"served by no process this hook runs under" in done.stderr
    finally:
        serving.kill()
        serving.wait()
