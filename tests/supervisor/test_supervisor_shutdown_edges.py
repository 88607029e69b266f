"""What a stop owes at its edges, seen through a real `otel-lifecycle-hooks run`: a pending
debounce window is delivered when stopping begins (not after a stubborn agent's grace period),
every zombie re-parented to the supervisor is reaped, and a program the harness left running
(Codex's `notify`) is given the grace period rather than ended at once."""

from __future__ import annotations

import os
import signal

from tests.supervisor.supervised import Workspace, recorded, script_hook, wait_until
from tests.support.target_server import TargetServer

# Hang bounds, not timing claims.
HANG = 60.0


def debounced_hook(name: str, event: str, url: str) -> str:
    """YAML for an http hook on `event` whose debounce window outlasts any test run."""
    body = '{"EVENT": "${EVENT}", "PHASE": "${PHASE}", "ACTIVITY": "${ACTIVITY}"}'
    return (
        f"  - name: {name}\n"
        f"    on: [{event}]\n"
        "    debounce: 10m\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{url}"\n'
        f"      body: '{body}'\n"
        "    timeout: 5s\n"
    )


def test_pending_debounce_windows_are_delivered_when_a_stubborn_agents_stop_begins(
    workspace: Workspace, target_server: TargetServer
) -> None:
    ready = workspace.root / "ready"
    template = workspace.template(
        debounced_hook("phase", "phase-change", target_server.url("/phase"))
        + debounced_hook("activity", "activity-change", target_server.url("/activity"))
    )
    prompt = {"hook_event_name": "UserPromptSubmit", "prompt": "next"}
    command = workspace.agent_command(ready_file=str(ready), on_term="ignore", claude=[prompt])
    run = workspace.start(template, command, "--grace-period", "10s")
    wait_until(ready.exists, timeout=HANG, what="the agent to start")

    run.signal(signal.SIGTERM)
    assert run.wait(timeout=HANG) == 128 + signal.SIGKILL, run.stderr
    by_path = {request.path: request for request in list(target_server.requests)}
    assert "/phase" in by_path and "/activity" in by_path, (recorded(target_server), run.stderr)
    # The phase window's latest event when the stop began: the stop itself.
    phase = [item for item in recorded(target_server) if item["EVENT"] == "phase-change"]
    assert phase[0]["PHASE"] == "stopping"
    activity = [item for item in recorded(target_server) if item["EVENT"] == "activity-change"]
    assert activity[0]["ACTIVITY"] == "thinking"


def zombie_children(pid: int) -> list[int]:
    """The exited children of `pid` that nobody has reaped yet, read from /proc."""
    zombies = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                line = stat.read().decode("ascii", "replace")
        except OSError:
            continue
        state, ppid = line[line.rfind(")") + 2 :].split()[:2]
        if state == "Z" and int(ppid) == pid:
            zombies.append(int(name))
    return zombies


def test_background_children_of_script_hooks_are_reaped_while_the_agent_runs(
    workspace: Workspace,
) -> None:
    ready = workspace.root / "ready"
    events = 10
    # Each run leaves a child in the background and exits at once: the child is orphaned to
    # the supervisor (a child subreaper) and ends (or is ended with the script's session).
    leave_child = ["sh", "-c", "(sleep 0.2) &"]
    template = workspace.template(script_hook("leaves-a-child", ["tool-start"], leave_child))
    tool = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    command = workspace.agent_command(ready_file=str(ready), claude=[tool] * events)
    run = workspace.start(template, command)
    wait_until(ready.exists, timeout=HANG, what="the agent to start")

    def all_hooks_ran() -> bool:
        log = workspace.hook_log.read_text() if workspace.hook_log.exists() else ""
        return log.count("hook=leaves-a-child") == events

    wait_until(all_hooks_ran, timeout=HANG, what="the hooks to run")
    wait_until(
        lambda: not zombie_children(run.process.pid),
        timeout=30.0,
        what="the supervisor to reap its zombies",
    )
    assert run.process.poll() is None, run.stderr  # reaped while the agent still runs
    run.signal(signal.SIGTERM)
    assert run.wait(timeout=HANG) == 128 + signal.SIGTERM, run.stderr


def test_a_program_the_harness_started_may_finish_after_the_agent_exits(
    workspace: Workspace,
) -> None:
    pid_file, done = workspace.root / "notify.pid", workspace.root / "notify-done"
    # Codex runs the user's notify program at a turn's end and may exit before it is done.
    command = workspace.agent_command(notify=[str(pid_file), str(done), 1], exit=0)
    run = workspace.start(None, command, "--grace-period", f"{HANG:.0f}s")
    assert run.wait(timeout=HANG + 30) == 0, run.stderr
    assert done.exists(), run.stderr  # not ended when the agent exited
    pid = int(pid_file.read_text())
    assert not os.path.exists(f"/proc/{pid}"), "it outlived run"


def test_a_program_the_harness_started_is_still_killed_at_the_grace_deadline(
    workspace: Workspace,
) -> None:
    pid_file, done = workspace.root / "notify.pid", workspace.root / "notify-done"
    command = workspace.agent_command(notify=[str(pid_file), str(done), 600], exit=0)
    run = workspace.start(None, command, "--grace-period", "2s")
    assert run.wait(timeout=HANG) == 0, run.stderr
    pid = int(pid_file.read_text())
    assert not os.path.exists(f"/proc/{pid}"), "it outlived run"
    assert not done.exists()
