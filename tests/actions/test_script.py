"""One script attempt, as real subprocesses: exit codes, stdin, output bounds, process groups."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_lifecycle_hooks.actions.script import ScriptOutcome, _PipePump, run_script
from otel_lifecycle_hooks.render import RenderedCommand

PY = sys.executable
# A hang guard, not a timing claim: far above a loaded machine's start-up and scheduling
# delays, far below the 60 s the hanging scripts below would take.
SLACK = 15.0


def python(code: str, *args: str, stdin: bytes = b"", env: dict[str, str] | None = None):
    return RenderedCommand(argv=(PY, "-c", code, *args), env=env or {}, stdin=stdin)


def write_script(path: Path, text: str, mode: int = 0o755) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def live_group_members(pgid: int) -> list[int]:
    """Processes of group `pgid` that are not zombies (zombies wait for a reaper, harmlessly)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def assert_group_gone(pgid: int) -> None:
    # SIGKILL is delivered asynchronously; give the kernel a moment to finish the exits.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not live_group_members(pgid):
            return
        time.sleep(0.02)
    pytest.fail(f"processes of group {pgid} still alive: {live_group_members(pgid)}")


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_exit_0_is_ok_and_the_script_reads_its_json_stdin():
    event = {"hook_event_name": "post-start", "agent": {"name": "coder"}}
    lines: list[tuple[str, str]] = []
    code = (
        "import json, sys\n"
        "event = json.load(sys.stdin)\n"
        "print('event', event['hook_event_name'])\n"
        "print('agent', event['agent']['name'])\n"
        "sys.stderr.write('no newline at the end')\n"
    )

    outcome = run_script(
        python(code, stdin=json.dumps(event).encode()),
        10.0,
        on_output=lambda stream, line: lines.append((stream, line)),
    )

    assert outcome.result.kind == "ok"
    assert outcome.result.exit_code == 0
    assert outcome.stdout == "event post-start\nagent coder\n"
    assert outcome.stderr == "no newline at the end"
    assert not outcome.truncated
    assert ("stdout", "event post-start") in lines and ("stdout", "agent coder") in lines
    assert ("stderr", "no newline at the end") in lines


def test_a_non_zero_exit_is_a_transient_failure_that_retry_may_repeat():
    outcome = run_script(
        python("import sys; print('bad input', file=sys.stderr); sys.exit(3)"), 10.0
    )

    assert outcome.result.kind == "transient"
    assert (outcome.result.exit_code, outcome.result.error_type) == (3, "exit.3")
    assert outcome.stderr == "bad input\n"
    assert "bad input" not in outcome.result.message  # output may hold secrets


def test_a_script_killed_by_a_signal_names_it():
    outcome = run_script(python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"), 10.0)

    assert (outcome.result.kind, outcome.result.error_type) == ("permanent", "signal.SIGSEGV")


def test_a_missing_executable_is_a_permanent_failure(tmp_path: Path):
    outcome = run_script(RenderedCommand(argv=(str(tmp_path / "nope.sh"),)), 10.0)

    assert (outcome.result.kind, outcome.result.error_type) == ("permanent", "FileNotFoundError")
    assert "nope.sh" in outcome.result.message
    assert outcome.pid is None


def test_a_file_that_is_not_executable_is_a_permanent_failure(tmp_path: Path):
    script = write_script(tmp_path / "plain.sh", "#!/bin/sh\necho hi\n", mode=0o644)

    outcome = run_script(RenderedCommand(argv=(str(script),)), 10.0)

    assert (outcome.result.kind, outcome.result.error_type) == ("permanent", "PermissionError")


def test_an_empty_command_is_refused_without_running_anything():
    outcome = run_script(RenderedCommand(argv=()), 10.0)

    assert (outcome.result.kind, outcome.result.error_type) == ("permanent", "ValueError")


def test_a_script_that_hangs_is_ended_with_its_whole_group(tmp_path: Path):
    script = write_script(tmp_path / "hang.sh", "#!/bin/sh\nsleep 60 &\nsleep 60\n")

    started = time.monotonic()
    outcome = run_script(RenderedCommand(argv=(str(script),)), 0.5, kill_grace=1.0)
    elapsed = time.monotonic() - started

    assert (outcome.result.kind, outcome.result.error_type) == ("timeout", "timeout")
    assert "SIGTERM" in outcome.result.message
    assert elapsed < 0.5 + 1.0 + SLACK
    assert outcome.pid is not None
    assert_group_gone(outcome.pid)


def test_a_script_that_ignores_sigterm_is_killed_after_the_grace_period():
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )

    started = time.monotonic()
    outcome = run_script(python(code), 1.0, kill_grace=0.5)
    elapsed = time.monotonic() - started

    assert outcome.result.kind == "timeout"
    assert "SIGKILL" in outcome.result.message
    assert outcome.stdout == "ready\n"  # output written before the timeout is kept
    assert 1.0 + 0.5 <= elapsed < 1.0 + 0.5 + SLACK
    assert outcome.pid is not None
    assert_group_gone(outcome.pid)


def test_children_that_outlive_the_script_are_ended_and_do_not_hold_us(tmp_path: Path):
    # The background sleep inherits stdout: unless it is killed, our pipe never closes.
    script = write_script(tmp_path / "fork.sh", "#!/bin/sh\nsleep 60 &\necho $!\n")

    started = time.monotonic()
    outcome = run_script(RenderedCommand(argv=(str(script),)), 120.0)
    elapsed = time.monotonic() - started

    assert outcome.result.kind == "ok"
    child = int(outcome.stdout.strip())
    assert elapsed < 30.0  # not the script's 120 s timeout, nor the child's 60 s
    deadline = time.monotonic() + 30
    while pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pid_alive(child)
    assert outcome.pid is not None
    assert_group_gone(outcome.pid)


def test_100_mb_of_stdout_is_captured_up_to_the_limit_and_the_rest_discarded():
    lines: list[tuple[str, str]] = []
    command = python(
        "import sys\n"
        "chunk = (b'x' * 1023 + b'\\n') * 1024\n"
        "for _ in range(100):\n"
        "    sys.stdout.buffer.write(chunk)\n"
        "print('done', file=sys.stderr)\n"
    )

    outcome = run_script(
        command,
        60.0,
        output_limit=8192,
        on_output=lambda stream, line: lines.append((stream, line)),
    )

    assert outcome.result.kind == "ok"
    assert len(outcome.stdout) == 8192
    assert outcome.truncated
    assert outcome.stderr == "done\n"
    assert len([line for stream, line in lines if stream == "stdout"]) == 8  # 8 KiB of 1 KiB lines


def test_a_script_that_does_not_read_a_large_stdin_does_not_block_us():
    outcome = run_script(python("print('ignored stdin')", stdin=b"x" * (4 * 1024 * 1024)), 10.0)

    assert outcome.result.kind == "ok"
    assert outcome.stdout == "ignored stdin\n"


def test_the_environment_is_the_base_overlaid_with_the_command_env():
    code = "import os, json; print(json.dumps({k: os.environ.get(k) for k in ('KEEP', 'OVER')}))"
    base = {"PATH": os.environ["PATH"], "KEEP": "base", "OVER": "base"}

    outcome = run_script(python(code, env={"OVER": "overlay"}), 10.0, base_env=base)

    assert json.loads(outcome.stdout) == {"KEEP": "base", "OVER": "overlay"}


def test_a_value_with_spaces_quotes_and_shell_syntax_stays_one_argv_element():
    tricky = "a b \"c\" 'd' $(touch pwned) ; rm -rf ~ `id`"

    outcome = run_script(python("import sys, json; print(json.dumps(sys.argv[1:]))", tricky), 10.0)

    assert json.loads(outcome.stdout) == [tricky]


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_script_runs_as_the_named_user_with_its_home():
    report = 'echo "$(id -u) $(id -g) [$(id -G)] $HOME $USER $LOGNAME"'

    outcome = run_script(RenderedCommand(argv=("/bin/sh", "-c", report)), 10.0, user="nobody")

    assert outcome.result.kind == "ok", outcome.result.message
    # No supplementary groups are inherited from root.
    assert outcome.stdout == "65534 65534 [65534] /nonexistent nobody nobody\n"


def test_an_unknown_user_is_a_permanent_failure():
    outcome = run_script(python("print(1)"), 10.0, user="no-such-user-here")

    assert (outcome.result.kind, outcome.result.error_type) == ("permanent", "UnknownUser")
    assert "no-such-user-here" in outcome.result.message


def test_a_failing_output_callback_does_not_break_the_run():
    def explode(stream: str, line: str) -> None:
        raise RuntimeError("sink down")

    outcome = run_script(python("print('a'); print('b')"), 10.0, on_output=explode)

    assert isinstance(outcome, ScriptOutcome)
    assert (outcome.result.kind, outcome.stdout) == ("ok", "a\nb\n")


def test_signal_names_are_reported_for_sigterm_sent_by_others(tmp_path: Path):
    script = write_script(tmp_path / "self.sh", "#!/bin/sh\nkill -TERM $$\n")

    outcome = run_script(RenderedCommand(argv=(str(script),)), 10.0)

    assert outcome.result.error_type == "signal.SIGTERM"
    assert outcome.result.kind == "permanent"
    assert signal.SIGTERM.name in outcome.result.message


def test_output_an_exited_script_left_in_its_pipe_is_read_even_when_the_drain_starts_late() -> None:
    """On a loaded machine the pump may get the processor back only after its drain deadline:
    what the script wrote before exiting is still in the pipe and must not be lost."""
    stdin_read, stdin_write = os.pipe()
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    os.close(stdin_read)
    os.write(out_write, b"agent reviewer exited with 0\n")
    os.write(err_write, b"a warning")
    os.close(out_write)
    os.close(err_write)
    process = subprocess.Popen(["true"])
    process.wait()
    lines: list[tuple[str, str]] = []
    pump = _PipePump(
        process,
        (stdin_write, out_read, err_read),
        b"",
        1 << 20,
        lambda stream, line: lines.append((stream, line)),
    )
    try:
        assert pump.run(until=time.monotonic() - 1.0, stop_on_exit=False)
    finally:
        pump.close()
    assert sorted(lines) == [("stderr", "a warning"), ("stdout", "agent reviewer exited with 0")]
