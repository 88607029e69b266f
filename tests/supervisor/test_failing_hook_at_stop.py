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


def test_the_hooks_a_failed_pre_start_hook_kept_from_running_are_journaled_as_skipped(
    workspace: Workspace,
) -> None:
    # pre-start can be aborted: the agent is not started and the hooks after the failed one do
    # not run; each is journaled as skipped, saying why, instead of leaving no trace.
    marks = workspace.root / "marks"
    hooks = script_hook(
        "preflight", ["pre-start"], ["sh", "-c", "exit 3"], blocking="true", on_error="fail"
    )
    hooks += script_hook(
        "register", ["pre-start"], ["sh", "-c", f"echo ran >> {marks}"], blocking="true"
    )
    started = workspace.root / "agent-started"
    run = workspace.start(workspace.template(hooks), ["touch", str(started)])
    assert run.wait() != 0
    assert not started.exists() and not marks.exists()
    rows = {row.hook: row for row in Journal(workspace.journal).executions()}
    assert rows["preflight"].outcome == "failed"
    assert rows["register"].outcome == "skipped"
    assert "preflight" in rows["register"].message and "pre-start" in rows["register"].message
