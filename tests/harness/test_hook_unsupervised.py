"""Hooks installed at user level, the agent not under `run` (a user's normal day once installed):
every hook event ends at once and silently. Nothing reaches the harness's stderr (Gemini shows
it to the user, ten times a prompt); the hook log gets at most one line per harness session, at
its start; and the command loads no more than the way to the socket needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SESSION = "7f0c6e2a-1111-4222-8333-944455556666"
BEFORE_TOOL = {"hook_event_name": "BeforeTool", "session_id": SESSION, "tool_name": "ls"}
SESSION_START = {"hook_event_name": "SessionStart", "session_id": SESSION, "source": "startup"}
# What the unsupervised path must not import: the in-process engine's way, the hook log (its
# logging and pathlib), the activity state machine.
NOT_LOADED = (
    "otel_lifecycle_hooks.harness.without_supervisor",
    "otel_lifecycle_hooks.harness.activity",
    "otel_lifecycle_hooks.hooklog",
    "logging",
)


def _environment(home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if "LIFECYCLE_HOOKS" not in key and not key.startswith("OTEL_")
    }
    env["HOME"] = str(home)
    env.pop("XDG_RUNTIME_DIR", None)  # no supervisor's pointer file can be found
    return env


def _hook(home: Path, payload: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "gemini"],
        input=json.dumps(payload),
        env=_environment(home),
        capture_output=True,
        text=True,
        timeout=60,  # a hang guard only
    )


def test_ten_events_of_one_session_say_nothing_to_the_harness(tmp_path: Path) -> None:
    results = [_hook(tmp_path, SESSION_START)] + [_hook(tmp_path, BEFORE_TOOL) for _ in range(9)]
    assert [result.returncode for result in results] == [0] * 10
    assert [result.stderr for result in results] == [""] * 10
    assert [result.stdout.strip() for result in results[1:]] == [""] * 9
    lines = (tmp_path / "agent.log").read_text().splitlines()
    assert len(lines) == 1, lines  # the session's start, once
    assert "no supervisor" in lines[0] and "not delivered" in lines[0]


def test_an_event_other_than_the_sessions_start_leaves_no_line(tmp_path: Path) -> None:
    assert _hook(tmp_path, BEFORE_TOOL).stderr == ""
    assert not (tmp_path / "agent.log").exists()


@pytest.mark.parametrize("payload", [BEFORE_TOOL, SESSION_START], ids=["tool", "session-start"])
def test_the_unsupervised_path_loads_only_what_the_way_to_the_socket_needs(
    tmp_path: Path, payload: dict[str, str]
) -> None:
    program = (
        "import io, json, sys\n"
        "from otel_lifecycle_hooks.cli.hook import main\n"
        f"main(['--dialect', 'gemini'], stdin=io.BytesIO({json.dumps(payload).encode()!r}))\n"
        f"print(json.dumps([m for m in {list(NOT_LOADED)!r} if m in sys.modules]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        env=_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    if payload is BEFORE_TOOL:
        assert loaded == []
    else:  # the one line of the session's start is written through the hook log
        assert "otel_lifecycle_hooks.harness.without_supervisor" not in loaded
