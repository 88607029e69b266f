"""Faults in script hooks, through the whole engine: each is bounded in time and memory, leaves
no process behind, and is recorded in the hook span and the journal.

The scripts are real processes. The per-attempt behaviour of each case (signals, pipes, the
output cap) is pinned in tests/actions/test_script.py; here it is the engine's view.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import pytest

from otel_lifecycle_hooks.actions.script import DEFAULT_KILL_GRACE
from tests.reliability.conftest import EngineRunner

# A hang guard, not a timing claim: far above a loaded machine's start-up and scheduling
# delays, far below the 60 s the hanging scripts below would take.
SLACK = 15.0


def script_hook(argv: list[str], timeout: str = "1s", on_error: str = "log") -> str:
    return f"""
    - name: job
      on: [post-start]
      action:
        type: script
        command: {json.dumps(argv)}
      on_error: {on_error}
      timeout: {timeout}
      blocking: true
    """


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (zombies hold nothing but a table slot)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def assert_all_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 30  # SIGKILL lands asynchronously
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return
        time.sleep(0.02)
    pytest.fail(f"still running: {[pid for pid in pids if alive(pid)]}")


def pids_in(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()]


def executable(path: Path, text: str, mode: int = 0o755) -> str:
    path.write_text(text)
    path.chmod(mode)
    return str(path)


@pytest.mark.parametrize("on_error", ["log", "retry"])
def test_a_missing_executable_fails_once_and_is_recorded(
    engine_runner: EngineRunner, tmp_path: Path, on_error: str
) -> None:
    run = engine_runner.fire(script_hook([str(tmp_path / "no-such-program")], on_error=on_error))

    assert (run.outcome, run.row.attempts, run.row.error_type) == ("failed", 1, "FileNotFoundError")
    assert run.span_attributes["error.type"] == "FileNotFoundError"
    assert run.span_attributes["process.command"] == str(tmp_path / "no-such-program")


def test_a_file_that_is_not_executable_fails_once_and_is_recorded(
    engine_runner: EngineRunner, tmp_path: Path
) -> None:
    script = executable(tmp_path / "plain.sh", "#!/bin/sh\necho hi\n", mode=0o644)

    run = engine_runner.fire(script_hook([script], on_error="retry"))

    assert (run.outcome, run.row.attempts, run.row.error_type) == ("failed", 1, "PermissionError")
    assert run.span_attributes["agent.lifecycle_hook.outcome"] == "failed"


def test_a_hanging_script_and_its_children_are_ended_at_the_timeout(
    engine_runner: EngineRunner, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pids"
    script = executable(
        tmp_path / "hang.sh", f"#!/bin/sh\nsleep 60 &\necho $$ $! > {pid_file}\nsleep 60\n"
    )

    run = engine_runner.fire(script_hook([script], timeout="1s"))

    assert (run.outcome, run.row.outcome, run.row.error_type) == ("timeout", "timeout", "timeout")
    assert run.span_attributes["error.type"] == "timeout"
    assert run.elapsed < 1.0 + DEFAULT_KILL_GRACE + SLACK
    assert_all_gone(pids_in(pid_file))


def test_a_script_ignoring_sigterm_is_killed_after_the_grace(
    engine_runner: EngineRunner, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    code = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(60)\n"
    )

    run = engine_runner.fire(script_hook([sys.executable, "-c", code], timeout="1s"))

    assert run.outcome == "timeout"
    assert "SIGKILL" in run.row.message
    assert run.elapsed < 1.0 + DEFAULT_KILL_GRACE + SLACK
    assert_all_gone(pids_in(pid_file))


def test_children_outliving_the_script_are_ended_with_it(
    engine_runner: EngineRunner, tmp_path: Path
) -> None:
    pid_file = tmp_path / "child"
    # The background sleep holds stdout open: unless it is killed, the engine would wait on it.
    script = executable(
        tmp_path / "fork.sh", f"#!/bin/sh\nsleep 60 &\necho $! > {pid_file}\nexit 0\n"
    )

    run = engine_runner.fire(script_hook([script], timeout="120s"))

    assert (run.outcome, run.row.exit_code) == ("success", 0)
    assert run.span_attributes["process.exit.code"] == 0
    assert run.elapsed < 30.0  # neither the 120 s timeout nor the child's 60 s
    assert_all_gone(pids_in(pid_file))


def test_100_mb_of_stdout_is_discarded_beyond_the_cap(engine_runner: EngineRunner) -> None:
    code = (
        "import sys\n"
        "chunk = (b'x' * 1023 + b'\\n') * 1024\n"
        "for _ in range(100):\n"
        "    sys.stdout.buffer.write(chunk)\n"
    )
    peak_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    run = engine_runner.fire(script_hook([sys.executable, "-c", code], timeout="60s"))

    assert (run.outcome, run.row.exit_code) == ("success", 0)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before_kib < 32 * 1024
    assert run.elapsed < 60.0
