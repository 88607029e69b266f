"""The real Claude Code, Gemini CLI and Codex, configured by `harness install`, under `run`.

Each runs offline against the fake model APIs (tests/harnesses/fake_models.py): turn 1 asks for
a shell command, turn 2 answers in text. The template has a webhook on each of the nine
template events and a script hook on the runtime events (tests/harnesses/session.py).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.harnesses import scenarios
from tests.harnesses.fake_models import Step
from tests.harnesses.real import (
    HARNESS_CLASSES,
    RealHarness,
    Session,
    harness_binary,
    kill_if_alive,
    wait_for_pid_file,
    wait_until_gone,
)
from tests.harnesses.scenarios import RUN_TOOLS
from tests.harnesses.session import PACKAGE_CLI

# What each harness calls its shell tool in hook payloads.
SHELL_TOOL = {
    "claude": "Bash",
    "gemini": "run_shell_command",
    "codex": "Bash",
    "opencode": "bash",
}
NEVER_IN_A_CLEAN_SESSION = {"pre-stop", "error", "limits-exceeded"}


@pytest.fixture(params=sorted(HARNESS_CLASSES))
def harness(request: pytest.FixtureRequest) -> RealHarness:
    name = request.param
    return HARNESS_CLASSES[name](harness_binary(name))


def test_a_session_fires_its_hooks_with_their_variables_in_one_trace(
    harness: RealHarness, tmp_path: Path
) -> None:
    script = [
        # By absolute path: Codex runs its tool in a login shell, which resets PATH.
        Step.shell(f"{PACKAGE_CLI} status task_completed 'summary from the tool' && echo tool-ran"),
        Step.reply("The command printed tool-ran."),
    ]
    result = harness.run(tmp_path, script, extra=RUN_TOOLS[harness.name])
    assert result.returncode == 0, result.stderr[-3000:]

    fired = set(result.fired_events())
    assert {
        "pre-start",
        "post-start",
        "phase-change",
        "activity-change",
        "task-completed",
        "session-end",
    } <= fired, (fired, result.hook_log()[-3000:])
    assert not fired & NEVER_IN_A_CLEAN_SESSION
    assert [v["PHASE"] for v in result.fired("phase-change")] == [
        "provisioning",
        "starting",
        "running",
        "stopping",
        "stopped",
    ]
    [post_start] = result.fired("post-start")
    assert post_start["PHASE"] == "running"
    assert post_start["AGENT_NAME"] == Path(harness.binary).name
    assert post_start["HARNESS_NAME"] == harness.name
    # `status` ran inside the agent's shell tool, where no OTEL_* variable reaches.
    [completed] = result.fired("task-completed")
    assert completed["TASK_SUMMARY"] == "summary from the tool"
    assert completed["ACTIVITY"] == "completed"
    [session_end] = result.fired("session-end")
    assert session_end["EXIT_CODE"] == "0"

    runtime = result.runtime_events()
    tool_starts = [e for e in runtime if e["hook_event_name"] == "tool-start"]
    assert [e["context"]["TOOL_NAME"] for e in tool_starts] == [SHELL_TOOL[harness.name]]
    assert "tool-end" in [e["hook_event_name"] for e in runtime]
    # Every hook request of the session carried the same trace.
    assert len(result.trace_ids()) == 1
    assert "not delivered" not in result.hook_log()


# Gemini CLI starts its shell tool with `setsid`, out of the agent's process group: that case
# is in test_real_harness_activity.py, with the other expectations on the supervisor's side.
@pytest.mark.parametrize("name", ["claude", "codex", "opencode"])
def test_sigterm_in_the_middle_of_a_tool_stops_the_session_and_leaves_no_process(
    name: str, tmp_path: Path
) -> None:
    check_sigterm_leaves_no_process(HARNESS_CLASSES[name](harness_binary(name)), tmp_path)


def check_sigterm_leaves_no_process(harness: RealHarness, tmp_path: Path) -> None:
    pid_file = tmp_path / "project" / "tool.pid"  # inside the workspace Codex lets tools write
    # A duration no other process has: the sleep is found by it (inside Codex's sandbox the
    # tool's own idea of its pid is another namespace's). Longer than the run's hang guard and
    # the wait for it to be gone, so that it cannot end on its own and pass for stopped.
    duration = f"300.{random.randrange(10**6):06d}"
    script = [
        Step.shell(f"echo $$ > {pid_file}; exec sleep {duration}"),
        Step.reply("never reached"),
    ]
    seen: dict[str, list[int]] = {}

    def terminate_during_the_tool(process: subprocess.Popen[str], session: Session) -> None:
        wait_for_pid_file(pid_file)
        # The shell writes the pid file before it execs the sleep: on a busy machine the
        # sleep may not be there yet when the file is.
        deadline = time.monotonic() + 30
        while not (found := _processes_with_argument(duration)) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["tool"] = found
        seen["agent"] = _children(process.pid)
        process.send_signal(signal.SIGTERM)

    try:
        # A generous grace period: TERM reaches every process at once, so it costs nothing
        # when they obey; a short one on a loaded machine ends before the queued
        # phase-change to `stopped` is delivered, and the run rightly drops it.
        result = harness.run(
            tmp_path,
            script,
            extra=RUN_TOOLS[harness.name],
            during=terminate_during_the_tool,
            grace_period="60s",
        )
        fired = set(result.fired_events())
        assert {"pre-stop", "session-end"} <= fired, result.hook_log()[-3000:]
        assert [v["PHASE"] for v in result.fired("phase-change")][-2:] == ["stopping", "stopped"]
        assert seen["agent"], "the supervisor had no child"
        assert seen["tool"], "the tool's sleep was not found"
        for pid in seen["agent"] + seen["tool"]:
            assert wait_until_gone(pid), f"process {pid} outlived run"
    finally:
        for pid in seen.get("agent", []) + seen.get("tool", []):
            kill_if_alive(pid)


def _processes_with_argument(argument: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                words = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argument.encode() in words:
                found.append(int(entry.name))
    return found


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


@pytest.mark.parametrize("name", ["claude", "codex"])
def test_a_permission_prompt_answered_headless_lets_the_tool_run(name: str, tmp_path: Path) -> None:
    """Claude Code asks through PermissionRequest (no --allowedTools); Codex with
    --approve-for-me when the model asks to leave the sandbox. The user's own hook answers
    "allow"; ours only reports. (Gemini CLI cannot ask headless: see docs/harness-setup.md.)"""
    scenario = scenarios.permission(name)
    assert scenario is not None
    harness = HARNESS_CLASSES[name](harness_binary(name))
    result = harness.run(
        tmp_path, scenario.script, extra=scenario.extra, after_install=scenario.after_install
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert scenarios.answered(tmp_path), "the tool did not run after the answer"
    runtime = [e["hook_event_name"] for e in result.runtime_events()]
    # Not ordered against tool-end: once the user's hook has answered, Claude Code may run
    # the tool before our PermissionRequest hook (another process) has delivered its event.
    assert "notification" in runtime, runtime
    assert "waiting_for_input" in result.activities()


def test_claude_code_over_its_turn_limit_fires_limits_exceeded_then_stops(tmp_path: Path) -> None:
    harness = HARNESS_CLASSES["claude"](harness_binary("claude"))
    result = harness.run(
        tmp_path,
        [Step.shell("echo tool-ran"), Step.reply("Done.")],
        extra=RUN_TOOLS["claude"],
        env_extra={"SCION_MAX_TURNS": "1"},
    )
    assert result.returncode == 10  # run's exit code for a limit
    [limit] = result.fired("limits-exceeded")
    assert limit["ACTIVITY"] == "limits_exceeded"
    assert {"pre-stop", "session-end"} <= set(result.fired_events())


def test_claude_code_killed_under_a_tool_fires_error_with_its_exit_code(tmp_path: Path) -> None:
    harness = HARNESS_CLASSES["claude"](harness_binary("claude"))
    # The tool kills its own harness: a crash nobody asked for.
    result = harness.run(
        tmp_path, [Step.shell("kill -KILL $PPID"), Step.reply("never")], extra=RUN_TOOLS["claude"]
    )
    assert result.returncode == 137
    [error] = result.fired("error")
    assert (error["PHASE"], error["EXIT_CODE"]) == ("error", "137")
    assert error["ERROR_MESSAGE"] == "agent terminated by SIGKILL"
    [session_end] = result.fired("session-end")
    assert session_end["EXIT_CODE"] == "137"


def test_harness_doctor_from_inside_the_agents_shell_tool_finds_the_supervisor(
    harness: RealHarness, tmp_path: Path
) -> None:
    report = tmp_path / "project" / "doctor.json"  # in the workspace: Codex's sandbox writes there
    command = (
        f"{PACKAGE_CLI} harness doctor {harness.name} --json > {report}; echo $? >> {report}.rc"
    )
    result = harness.run(
        tmp_path, [Step.shell(command), Step.reply("Checked.")], extra=RUN_TOOLS[harness.name]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert Path(f"{report}.rc").read_text().strip() == "0", report.read_text()
    checks = {c["name"]: c for c in json.loads(report.read_text())["checks"]}
    assert checks["socket"]["ok"] and checks[f"{harness.name} config"]["ok"], checks
    if harness.name == "claude":  # its session has the HTTP route: the ping is counted back
        assert checks["events arrive"]["ok"] and not checks["events arrive"]["optional"]
