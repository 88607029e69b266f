"""A harness that exits without waiting for its last hook (opencode ends its run at idle while
the `hook` for agent-end may still be starting, on a busy machine): the supervisor waits for
the event of a `hook` the agent left running, within the grace period, instead of ending the
session and stopping it."""

from __future__ import annotations

import json
import shlex
import sys

from tests.supervisor.supervised import Workspace, recorded, recorder_hook
from tests.support.target_server import TargetServer


def test_the_event_of_a_hook_still_starting_when_the_agent_exits_is_not_lost(
    workspace: Workspace, target_server: TargetServer
) -> None:
    payload = workspace.root / "prompt.json"
    payload.write_text(
        json.dumps(
            {
                "hook_event_name": "UserPromptSubmit",
                "prompt": "the last words",
                "session_id": "claude-session-1",
                "transcript_path": "",
                "cwd": str(workspace.root),
            }
        )
    )
    # The `hook` process starts at once and reads its payload two seconds after the agent
    # has exited: its event is still on its way when the supervisor sees the exit.
    sender = shlex.join(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "claude"]
    )
    agent = ["sh", "-c", f"(sleep 2; cat {shlex.quote(str(payload))}) | {sender} & exit 0"]
    template = workspace.template(recorder_hook(target_server.url("/events"), ["prompt-submit"]))
    run = workspace.start(template, agent)

    assert run.wait(timeout=120) == 0, run.stderr
    assert {r["EVENT"] for r in recorded(target_server)} == {"prompt-submit"}, run.stderr
