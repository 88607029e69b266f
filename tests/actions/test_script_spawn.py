"""How a script is started (by subprocess.Popen): a new session, its three pipes and no other
descriptor, signals at their defaults, the script's own PATH, clear errors - real subprocesses
throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_lifecycle_hooks.actions.script import process_environ, run_script
from otel_lifecycle_hooks.render import RenderedCommand

PY = sys.executable
# A hang guard, not a timing claim: far above a loaded machine's start-up and scheduling
# delays, far below the 60 s the hanging scripts below would take.
SLACK = 15.0

# The child's open descriptors and where they point (the listing's own one is closed by then).
LIST_FDS = (
    "import json, os\n"
    "fds = {}\n"
    "for name in os.listdir('/proc/self/fd'):\n"
    "    try:\n"
    "        fds[name] = os.readlink('/proc/self/fd/' + name)\n"
    "    except OSError:\n"
    "        pass\n"
    "print(json.dumps(fds))\n"
)


def python(code: str, env: dict[str, str] | None = None, stdin: bytes = b"") -> RenderedCommand:
    return RenderedCommand(argv=(PY, "-c", code), env=env or {}, stdin=stdin)


def test_the_script_gets_its_three_pipes_and_no_other_descriptor(tmp_path: Path) -> None:
    # One descriptor we hold (close-on-exec, as Python opens them), one we were "given by our
    # parent" (inheritable).
    own = os.open(tmp_path / "ours.txt", os.O_CREAT | os.O_WRONLY, 0o600)
    inherited = os.open(tmp_path / "inherited.txt", os.O_CREAT | os.O_WRONLY, 0o600)
    os.set_inheritable(inherited, True)
    try:
        outcome = run_script(python(LIST_FDS), 10.0)
    finally:
        os.close(own)
        os.close(inherited)

    assert outcome.result.kind == "ok", outcome.result.message
    fds = json.loads(outcome.stdout)
    assert sorted(fds) == ["0", "1", "2"]
    assert all(target.startswith("pipe:") for target in fds.values())


def test_the_script_leads_its_own_session_and_process_group() -> None:
    code = "import os; print(os.getpid(), os.getpgid(0), os.getsid(0))"

    outcome = run_script(python(code), 10.0)

    pid, group, session = map(int, outcome.stdout.split())
    assert pid == group == session == outcome.pid


def test_sigpipe_and_sigxfsz_are_at_their_defaults_in_the_script() -> None:
    # Python ignores both; exec keeps ignored signals ignored unless they are reset.
    outcome = run_script(RenderedCommand(argv=("grep", "SigIgn", "/proc/self/status")), 10.0)

    ignored = int(outcome.stdout.split()[1], 16)
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (number - 1)), f"{signal.Signals(number).name} is ignored"


def test_a_shell_pipeline_ends_its_writer_with_sigpipe() -> None:
    # With SIGPIPE ignored, `yes` would see EPIPE instead and say so on stderr.
    command = RenderedCommand(argv=("/bin/sh", "-c", "yes | head -n 1"))

    outcome = run_script(command, 10.0)

    assert (outcome.result.kind, outcome.stdout, outcome.stderr) == ("ok", "y\n", "")


def test_a_bare_name_is_found_on_the_scripts_own_path(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "say-hello").write_text("#!/bin/sh\necho hello from tools\n")
    (tools / "say-hello").chmod(0o755)
    env = {"PATH": f"{tmp_path / 'empty'}:{tools}"}

    outcome = run_script(RenderedCommand(argv=("say-hello",), env=env), 10.0)

    assert (outcome.result.kind, outcome.stdout) == ("ok", "hello from tools\n")


def test_a_bare_name_on_no_path_is_a_clear_missing_file(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}

    outcome = run_script(RenderedCommand(argv=("no-such-tool-here",), env=env), 10.0)

    assert (outcome.result.kind, outcome.result.error_type) == ("permanent", "FileNotFoundError")
    assert outcome.result.message == "'no-such-tool-here': no such file"


def test_a_bare_name_that_is_not_executable_is_permission_denied(tmp_path: Path) -> None:
    (tmp_path / "not-runnable").write_text("#!/bin/sh\necho never\n")
    (tmp_path / "not-runnable").chmod(0o644)
    if os.access(tmp_path / "not-runnable", os.X_OK):
        pytest.skip("this user may execute any file")

    outcome = run_script(RenderedCommand(argv=("not-runnable",), env={"PATH": str(tmp_path)}), 10.0)

    assert (outcome.result.kind, outcome.result.error_type) == ("permanent", "PermissionError")


def test_a_nul_byte_in_a_variable_is_refused_without_quoting_it() -> None:
    outcome = run_script(python("print(1)", env={"TOKEN": "s3cret\0value"}), 10.0)

    assert (outcome.result.kind, outcome.result.error_type) == ("permanent", "ValueError")
    assert "s3cret" not in outcome.result.message


def test_a_timeout_ends_the_whole_group(tmp_path: Path) -> None:
    grandchild = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(grandchild)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()

    outcome = run_script(python(code), 1.0, kill_grace=0.5)

    assert outcome.result.kind == "timeout"
    assert time.monotonic() - started < 1.0 + 0.5 + SLACK
    pid = int(grandchild.read_text())
    deadline = time.monotonic() + 30  # SIGTERM is delivered asynchronously
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)


def test_without_a_pidfd_the_exit_is_still_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pidfd(pid: int) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    started = time.monotonic()

    # Both pipes close long before the exit: only the exit itself can end the run.
    code = "import os, time; os.close(1); os.close(2); time.sleep(0.3)"

    outcome = run_script(python(code), 60.0)

    assert outcome.result.kind == "ok"
    assert time.monotonic() - started < 0.3 + SLACK  # not the 60 s timeout


def test_the_base_environment_follows_changes_to_os_environ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPAWN_TEST_VALUE", "first")
    assert process_environ()["SPAWN_TEST_VALUE"] == "first"

    monkeypatch.setenv("SPAWN_TEST_VALUE", "second")
    copy = process_environ()
    copy["SPAWN_TEST_VALUE"] = "changed by a caller"

    assert process_environ()["SPAWN_TEST_VALUE"] == "second"
    monkeypatch.delenv("SPAWN_TEST_VALUE")
    assert "SPAWN_TEST_VALUE" not in process_environ()


def test_the_script_sees_os_environ_overlaid_with_its_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPAWN_BASE", "from the agent")
    monkeypatch.setenv("SPAWN_OVER", "from the agent")
    code = "import os; print(os.environ['SPAWN_BASE'], '|', os.environ['SPAWN_OVER'])"

    outcome = run_script(python(code, env={"SPAWN_OVER": "from the hook"}), 10.0)

    assert outcome.stdout == "from the agent | from the hook\n"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_script_starts_when_this_process_has_no_stdin_stdout_or_stderr(tmp_path: Path) -> None:
    # Our pipes then take descriptors 0-2: the child's must still end up on the right ones.
    result = tmp_path / "result.json"
    code = (
        "import json, os, sys\n"
        "from otel_lifecycle_hooks.actions.script import run_script\n"
        "from otel_lifecycle_hooks.render import RenderedCommand\n"
        "for fd in (0, 1, 2):\n"
        "    os.close(fd)\n"
        "command = RenderedCommand(argv=(sys.executable, '-c', 'import sys; "
        "sys.stdout.write(sys.stdin.read()); sys.stderr.write(\"e\")'), stdin=b'in')\n"
        "outcome = run_script(command, 10.0)\n"
        f"open({str(result)!r}, 'w').write(json.dumps("
        "[outcome.result.kind, outcome.stdout, outcome.stderr]))\n"
    )

    subprocess.run([PY, "-c", code], check=True, timeout=30)

    assert json.loads(result.read_text()) == ["ok", "in", "e"]
