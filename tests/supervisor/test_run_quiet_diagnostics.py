"""The package's warnings (an unresolved variable) and errors (a hook log that cannot be
written) reach the operator as `run`'s other lines do: prefixed, held while an interactive
agent owns the terminal, and with `-q` nothing but the errors. The hook log has every warning
either way. The in-process `hook` keeps warnings off its harness's stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.supervisor.supervised import Workspace, script_hook
from tests.support.terminal import run_on_a_terminal

UNRESOLVED = "hook renders-empty: unresolved variables NOPE_UNSET rendered empty"


def _unresolved_template(workspace: Workspace) -> Path:
    return workspace.template(
        script_hook(
            "renders-empty", ["post-start"], ["sh", "-c", "exit 0", "${NOPE_UNSET}"],
            blocking="true",
        )
    )  # fmt: skip


def test_quiet_run_prints_no_warning_and_the_hook_log_still_has_it(workspace: Workspace) -> None:
    run = workspace.start(_unresolved_template(workspace), workspace.agent_command(exit=0), "-q")
    assert run.wait() == 0
    assert run.stderr == ""
    assert f"warning: {UNRESOLVED}" in workspace.hook_log.read_text()


def test_without_quiet_the_warning_is_a_line_of_run(workspace: Workspace) -> None:
    run = workspace.start(_unresolved_template(workspace), workspace.agent_command(exit=0))
    assert run.wait() == 0
    assert f"otel-lifecycle-hooks: {UNRESOLVED}" in run.stderr.splitlines(), run.stderr
    assert f"warning: {UNRESOLVED}" in workspace.hook_log.read_text()


def test_quiet_run_still_shows_an_error_the_operator_must_see(workspace: Workspace) -> None:
    # A hook log that cannot be written: the hooks keep running, and nothing records them.
    unwritable = workspace.root / "a-directory"
    unwritable.mkdir()
    run = workspace.start(
        _unresolved_template(workspace),
        workspace.agent_command(exit=0),
        "-q",
        "--hook-log",
        str(unwritable),
    )
    assert run.wait() == 0
    # One line (the hook log is one, shared by the executions and the warnings), and still
    # no warning.
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"otel-lifecycle-hooks: hook log {unwritable}: could not write")


def test_a_warning_waits_until_an_interactive_agent_has_left_the_terminal(
    workspace: Workspace,
) -> None:
    template = workspace.template(
        script_hook(
            "renders-empty", ["pre-start"], ["sh", "-c", "exit 0", "${NOPE_UNSET}"],
            blocking="true",
        )
    )  # fmt: skip
    agent = "print('AGENT FIRST'); print('AGENT LAST')"
    code, screen = run_on_a_terminal(
        [sys.executable, "-m", "otel_lifecycle_hooks", "run", "--template", str(template),
         "--", sys.executable, "-c", agent],
        {**workspace.env, "NO_COLOR": "1"},
        cwd=workspace.root, stdin=True, new_session=True,
    )  # fmt: skip
    assert code == 0
    assert screen.index("AGENT LAST") < screen.index(UNRESOLVED), screen


def test_the_in_process_hook_keeps_warnings_off_the_harness_stderr(workspace: Workspace) -> None:
    template = workspace.template(
        script_hook("renders-empty", ["tool-start"], ["sh", "-c", "exit 0", "${NOPE_UNSET}"])
    )
    env = {key: value for key, value in workspace.env.items() if not key.endswith("HOOKS_SOCKET")}
    result = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "claude",
         "--template", str(template)],
        input='{"hook_event_name": "PreToolUse", "tool_name": "Bash", "session_id": "s1"}',
        env=env,
        cwd=workspace.root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    log = workspace.hook_log.read_text()
    assert "hook=renders-empty event=tool-start outcome=success" in log  # the hook ran here
    assert "warning: hook renders-empty: unresolved variables NOPE_UNSET rendered empty" in log
