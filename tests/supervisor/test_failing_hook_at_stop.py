"""A blocking `on_error: fail` hook that fails at an event whose transition cannot be aborted
(pre-stop, session-end: the agent stops all the same) does not silently skip the hooks after
it: a failed credential revoke must not prevent the deregistration that follows."""

from __future__ import annotations

import signal

from otel_lifecycle_hooks.journal import Journal
from tests.supervisor.supervised import Workspace, script_hook, wait_until


def test_a_failed_fail_hook_at_pre_stop_and_session_end_lets_the_later_hooks_run(
    workspace: Workspace,
) -> None:
    marks = workspace.root / "marks"
    hooks = ""
    for event in ("pre-stop", "session-end"):
        hooks += script_hook(
            f"revoke-{event}", [event], ["sh", "-c", "exit 3"], blocking="true", on_error="fail"
        )
        hooks += script_hook(
            f"deregister-{event}", [event], ["sh", "-c", f"echo {event} >> {marks}"],
            blocking="true",
        )  # fmt: skip
    ready = workspace.root / "ready"
    run = workspace.start(
        workspace.template(hooks), workspace.agent_command(ready_file=str(ready), on_term=0)
    )
    wait_until(ready.exists, what="the agent to start")
    run.signal(signal.SIGTERM)
    run.wait()
    assert marks.read_text().split() == ["pre-stop", "session-end"], run.stderr
    rows = {row.hook: row.outcome for row in Journal(workspace.journal).executions()}
    assert rows["revoke-pre-stop"] == "failed" and rows["deregister-pre-stop"] == "success"
    assert rows["deregister-session-end"] == "success"
