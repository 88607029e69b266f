"""`hook`: delivers a harness payload to the supervisor socket, and never fails its harness."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_lifecycle_hooks.cli import hook

Loader = Callable[[str, str], dict[str, Any]]
SUBPROCESS_TIMEOUT = 120  # seconds: a hang check, far above a normal run


def run_hook(
    args: list[str], stdin: bytes, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    """`python -m otel_lifecycle_hooks hook ARGS`, as a harness runs it."""
    return subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", *args],
        input=stdin,
        capture_output=True,
        check=False,
        env=env,
        timeout=SUBPROCESS_TIMEOUT,
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A clean environment: a home of its own, no supervisor, no template."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_LIFECYCLE_HOOKS_")}
    return {**clean, "HOME": str(tmp_path), "OTEL_LIFECYCLE_HOOKS_LOG": str(tmp_path / "hook.log")}


def log_lines(env: dict[str, str]) -> list[str]:
    path = Path(env["OTEL_LIFECYCLE_HOOKS_LOG"])
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def test_a_claude_pre_tool_use_reaches_the_supervisor_as_one_wire_line(
    line_server: Any, env: dict[str, str], load_payload: Loader
) -> None:
    env["OTEL_LIFECYCLE_HOOKS_SOCKET"] = line_server.path
    payload = load_payload("claude", "pre_tool_use")
    result = run_hook(["--dialect", "claude"], json.dumps(payload).encode(), env)
    assert result.returncode == 0
    assert result.stdout == b""
    [[line]] = line_server.wait_for(1)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    # A tool call is one Claude Code lets a hook refuse: the line asks for its gates' decision.
    assert json.loads(line) == {
        "v": 1,
        "kind": "event",
        "reply": True,
        "event": "tool-start",
        "dialect": "claude",
        "raw_event": "PreToolUse",
        "session_id": payload["session_id"],
        "fields": {
            "TOOL_NAME": "Bash",
            "TRANSCRIPT_PATH": payload["transcript_path"],
            "TOOL_INPUT": json.dumps(payload["tool_input"], separators=(",", ":")),
            "TOOL_CALL_ID": payload["tool_use_id"],
        },
    }
    # This server never answers: the gate's unreachable policy (allow) answered, and said so.
    [logged] = log_lines(env)
    assert "no decision was answered; event not delivered, answered allow" in logged


def test_codex_notify_is_read_from_the_last_argument(
    line_server: Any, env: dict[str, str], load_payload: Loader
) -> None:
    env["OTEL_LIFECYCLE_HOOKS_SOCKET"] = line_server.path
    notify = json.dumps(load_payload("codex", "notify_agent_turn_complete"))
    # Codex leaves stdin alone; the command must not wait on it.
    result = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "codex", notify],
        stdin=subprocess.PIPE,
        capture_output=True,
        check=False,
        env=env,
        timeout=SUBPROCESS_TIMEOUT,
    )
    assert result.returncode == 0
    [[line]] = line_server.wait_for(1)
    wire = json.loads(line)
    assert (wire["event"], wire["fields"]) == (
        "agent-end",
        {"ASSISTANT_TEXT": "It printed tool-ran."},
    )


def test_a_dialect_file_answers_the_harness_on_stdout(
    line_server: Any, env: dict[str, str], tmp_path: Path
) -> None:
    env["OTEL_LIFECYCLE_HOOKS_SOCKET"] = line_server.path
    dialect = tmp_path / "acme.yaml"
    dialect.write_text(
        "dialect: acme\nmappings: {Begin: {event: tool-start, fields: {tool_name: .tool}}}\n"
        "responses: {Begin: {permission: allow}}\n"
    )
    stdin = json.dumps({"hook_event_name": "Begin", "tool": "shell"}).encode()
    result = run_hook(["--dialect-file", str(dialect)], stdin, env)
    assert (result.returncode, result.stdout) == (0, b'{"permission":"allow"}\n')
    [[line]] = line_server.wait_for(1)
    assert json.loads(line)["fields"] == {"TOOL_NAME": "shell"}


@pytest.mark.parametrize(
    "stdin",
    [
        b"{",
        b"\xff\xfe\x00garbage sk-live-SECRET",
        b"[1, 2, 3]",
        b'"a string"',
        b"null",
        b'{"hook_event_name": 42, "tool_name": ["x"]}',
        b"[" * 100_000,
    ],
)
def test_garbage_on_stdin_exits_0_and_is_logged_without_its_content(
    stdin: bytes, env: dict[str, str]
) -> None:
    result = run_hook(["--dialect", "claude"], stdin, env)
    assert result.returncode == 0
    assert b"SECRET" not in result.stderr
    assert not any("SECRET" in line for line in log_lines(env))


def test_an_oversized_payload_is_ignored_and_logged(env: dict[str, str]) -> None:
    result = run_hook(["--dialect", "claude"], b" " * (hook.MAX_PAYLOAD_BYTES + 10), env)
    assert result.returncode == 0
    assert "larger than" in log_lines(env)[-1]


def test_no_supervisor_and_no_template_is_logged_once_at_the_sessions_start_and_exits_0(
    env: dict[str, str], load_payload: Loader
) -> None:
    # Not under `run` (hooks installed at user level): silent for the harness, one line in
    # the hook log at the session's start (tests/harness/test_hook_unsupervised.py has more).
    stop = run_hook(
        ["--dialect", "claude"], json.dumps(load_payload("claude", "stop")).encode(), env
    )
    start = run_hook(
        ["--dialect", "claude"], json.dumps(load_payload("claude", "session_start")).encode(), env
    )
    assert (stop.returncode, start.returncode) == (0, 0)
    assert (stop.stderr, start.stderr) == (b"", b"")
    [line] = log_lines(env)
    assert "$LIFECYCLE_HOOKS_SOCKET is not set" in line and "not delivered" in line


def test_a_socket_nobody_listens_on_is_logged_and_exits_0(
    env: dict[str, str], socket_dir: Path, load_payload: Loader
) -> None:
    env["OTEL_LIFECYCLE_HOOKS_SOCKET"] = str(socket_dir / "gone.sock")
    result = run_hook([], json.dumps(load_payload("claude", "stop")).encode(), env)
    assert result.returncode == 0
    assert "gone.sock" in log_lines(env)[-1]


def test_an_unknown_dialect_is_logged_with_the_known_ones(env: dict[str, str]) -> None:
    result = run_hook(["--dialect", "nonesuch"], b'{"hook_event_name": "Stop"}', env)
    assert result.returncode == 0
    assert "unknown dialect 'nonesuch'" in log_lines(env)[-1]
    assert "claude" in log_lines(env)[-1]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=20), children, max_size=6)
    ),
    max_leaves=20,
)
EVENT_NAMES = st.sampled_from(
    [
        "PreToolUse",
        "Stop",
        "BeforeTool",
        "AfterModel",
        "tool-start",
        "session.idle",
        "agent-turn-complete",
    ]
)
PAYLOADS = JSON | st.fixed_dictionaries(
    {"hook_event_name": EVENT_NAMES, "type": EVENT_NAMES},
    optional={"tool_name": JSON, "transcript_path": JSON, "event": JSON},
)
DIALECTS = st.sampled_from(
    ["claude", "gemini", "codex", "opencode", "core-agent", "cursor"]
) | st.text(max_size=12)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(payload=PAYLOADS, dialect=DIALECTS, extra=st.lists(st.text(max_size=30), max_size=2))
def test_any_json_any_dialect_returns_0_and_never_raises(
    payload: Any, dialect: str, extra: list[str], env: dict[str, str]
) -> None:
    stdin = io.BytesIO(json.dumps(payload).encode())
    assert hook.main(["--dialect", dialect, *extra], stdin=stdin, environ=env) == 0


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.binary(max_size=200), args=st.lists(st.text(max_size=20), max_size=4))
def test_any_bytes_and_any_arguments_return_0_and_never_raise(
    raw: bytes, args: list[str], env: dict[str, str]
) -> None:
    assert hook.main(args, stdin=io.BytesIO(raw), environ=env) == 0


class FakeEngine:
    """Stands in for harness.standalone: records what `fire` was handed."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[Any], dict[str, Any]]] = []

    def fire(self, templates: list[str], derived: list[Any], state: dict[str, Any]) -> None:
        self.calls.append((templates, list(derived), json.loads(json.dumps(state))))

    def template_env(self, templates: list[str]) -> dict[str, str]:
        return {}


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    engine = FakeEngine()
    module = types.ModuleType("otel_lifecycle_hooks.harness.standalone")
    module.fire = engine.fire  # type: ignore[attr-defined]
    module.template_env = engine.template_env  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "otel_lifecycle_hooks.harness.standalone", module)
    return engine


def test_without_a_supervisor_a_template_fires_in_process_and_state_carries_over(
    fake_engine: FakeEngine, env: dict[str, str], tmp_path: Path, load_payload: Loader
) -> None:
    env["OTEL_LIFECYCLE_HOOKS_TEMPLATE"] = str(tmp_path / "scion-agent.yaml")
    env["OTEL_LIFECYCLE_HOOKS_STATE"] = str(tmp_path / "state.json")
    for sample in ("user_prompt_submit", "pre_tool_use"):
        stdin = io.BytesIO(json.dumps(load_payload("claude", sample)).encode())
        assert hook.main(["--dialect", "claude"], stdin=stdin, environ=env) == 0
    (templates, first, _), (_, second, state) = fake_engine.calls
    assert templates == [str(tmp_path / "scion-agent.yaml")]
    assert [d.event for d in first] == ["prompt-submit", "activity-change"]
    assert [d.event for d in second] == ["tool-start", "activity-change"]
    assert second[1].fields["PREVIOUS_ACTIVITY"] == "thinking"  # read back from the state file
    assert state["tracker"]["activity"] == "executing"
    saved = json.loads((tmp_path / "state.json").read_text())
    session_id = load_payload("claude", "pre_tool_use")["session_id"]
    assert saved["current"] == session_id
    assert saved["sessions"][session_id]["tracker"]["activity"] == "executing"


def test_a_missing_engine_is_logged_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], tmp_path: Path, load_payload: Loader
) -> None:
    monkeypatch.setitem(sys.modules, "otel_lifecycle_hooks.harness.standalone", None)
    env["OTEL_LIFECYCLE_HOOKS_STATE"] = str(tmp_path / "state.json")
    stdin = io.BytesIO(json.dumps(load_payload("claude", "stop")).encode())
    args = ["--dialect", "claude", "--template", str(tmp_path / "t.yaml")]
    assert hook.main(args, stdin=stdin, environ=env) == 0
    assert "in-process engine is not available" in log_lines(env)[-1]


def test_help_describes_the_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--help"],
        capture_output=True,
        check=False,
        timeout=SUBPROCESS_TIMEOUT,
    )
    assert result.returncode == 0
    assert b"--dialect" in result.stdout and b"Always exits 0" in result.stdout
