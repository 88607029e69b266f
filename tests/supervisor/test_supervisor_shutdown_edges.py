"""What a stop owes at its edges, seen through a real `otel-lifecycle-hooks run`: a pending
debounce window is delivered when stopping begins (not after a stubborn agent's grace period),
every zombie re-parented to the supervisor is reaped, and a program the harness left running
(Codex's `notify`) is given the grace period rather than ended at once."""

from __future__ import annotations

import signal

from tests.supervisor.supervised import Workspace, recorded, wait_until
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
    run = workspace.start(template, command, "--grace-period", "3s")
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
