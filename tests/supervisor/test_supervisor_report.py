"""`run` tells the operator what its hooks did: a line per failure, retry or refusal, with the
history id, and a summary at the end; held back while an interactive agent owns the terminal."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from otel_lifecycle_hooks.journal import Journal
from tests.supervisor.supervised import Workspace, script_hook, wait_until
from tests.support.target_server import Reply, TargetServer
from tests.support.terminal import run_on_a_terminal


def _http_hook(name: str, event: str, url: str, **options: str) -> str:
    lines = [
        f"  - name: {name}",
        f"    on: [{event}]",
        "    action:",
        "      type: http",
        f'      url: "{url}"',
    ]
    lines += [f"    {key}: {value}" for key, value in options.items()]
    return "\n".join(lines) + "\n"


def _failing_template(workspace: Workspace, server: TargetServer) -> Path:
    # Retry-After: 0 makes the four attempts follow each other at once.
    server.always("/slack", Reply(503, headers={"Retry-After": "0"}))
    return workspace.template(
        _http_hook("notify-slack", "session-end", server.url("/slack"), on_error="retry")
        + _http_hook("register", "post-start", server.url("/ok"))
        + script_hook("audit", ["pre-start"], ["true"], blocking="true")
    )


def _journal_id_of(workspace: Workspace, hook: str) -> int:
    journal = Journal(workspace.journal)
    try:
        rows = [row for row in journal.recent(limit=50) if row.hook == hook]
    finally:
        journal.close()
    assert rows, f"no journal row for {hook}"
    return rows[0].id


def test_a_failing_hook_gets_a_line_per_retry_a_final_line_and_the_summary(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = _failing_template(workspace, target_server)
    run = workspace.start(template, workspace.agent_command(exit=0))
    assert run.wait() == 0
    stderr = run.stderr
    history_id = _journal_id_of(workspace, "notify-slack")
    for attempt in (1, 2, 3):
        assert (
            f"hook notify-slack (session-end) attempt {attempt} of 4 failed: HTTP 503" in stderr
        ), stderr
    assert re.search(
        r"hook notify-slack \(session-end\) failed after 4 attempts in \S+ "
        rf"\(history {history_id}\): .*503",
        stderr,
    ), stderr
    summary = stderr.strip().splitlines()[-1]
    assert summary == (
        "otel-lifecycle-hooks: 3 deliveries: 2 ok, 1 failed: "
        f"notify-slack 503 after 4 attempts, history {history_id}"
    )
    # Successful executions are not announced without -v.
    assert "hook register" not in stderr and "hook audit" not in stderr


def test_verbose_shows_every_execution_and_quiet_shows_nothing(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = _failing_template(workspace, target_server)
    verbose = workspace.start(template, workspace.agent_command(exit=0), "-v")
    assert verbose.wait() == 0, verbose.stderr
    loud = verbose.stderr
    assert re.search(
        r"hook register \(post-start\) success in \S+(?: \(history \d+\))?: 200", loud
    ), loud
    assert "hook audit (pre-start) success in" in loud, loud
    quiet = workspace.start(template, workspace.agent_command(exit=0), "--quiet")
    assert quiet.wait() == 0, quiet.stderr
    assert "otel-lifecycle-hooks:" not in quiet.stderr, quiet.stderr
    # Both runs still delivered everything: register once, notify-slack four times, each.
    paths = sorted(request.path for request in target_server.requests)
    assert paths == ["/ok"] * 2 + ["/slack"] * 8, paths


def test_a_refused_hook_and_a_missing_script_are_reported_on_the_terminal(
    workspace: Workspace, target_server: TargetServer
) -> None:
    needs_token = _http_hook("needs-token", "post-start", target_server.url("/x")).replace(
        "      type: http\n",
        "      type: http\n"
        "      auth:\n        type: bearer-token\n        token_env: NO_SUCH_TOKEN\n",
    )
    template = workspace.template(
        needs_token
        + script_hook("missing-script", ["pre-start"], [str(workspace.root / "nope.sh")])
    )
    run = workspace.start(template, workspace.agent_command(exit=0))
    assert run.wait() == 0
    stderr = run.stderr
    assert re.search(r"hook needs-token \(post-start\) refused in .*NO_SUCH_TOKEN", stderr), stderr
    assert re.search(r"hook missing-script \(pre-start\) failed in .*: .*nope\.sh", stderr), stderr
    assert "2 failed" in stderr.strip().splitlines()[-1]
    assert target_server.requests == []  # refused: nothing was sent


def test_lines_wait_until_an_interactive_agent_has_left_the_terminal(
    workspace: Workspace,
) -> None:
    # A blocking pre-start hook fails before the agent starts: written at once it would come
    # before the agent's first output; held, it comes after the agent's last.
    template = workspace.template(
        script_hook("fails-early", ["pre-start"], ["sh", "-c", "exit 4"], blocking="true")
    )
    agent = "print('AGENT FIRST'); print('AGENT LAST')"
    code, screen = run_on_a_terminal(
        [
            sys.executable,
            "-m",
            "otel_lifecycle_hooks",
            "run",
            "--template",
            str(template),
            "--",
            sys.executable,
            "-c",
            agent,
        ],
        {**workspace.env, "NO_COLOR": "1"},
        cwd=workspace.root,
        stdin=True,
        new_session=True,
    )
    assert code == 0
    failure = screen.index("hook fails-early (pre-start) failed in ")
    assert screen.index("AGENT LAST") < failure, screen
    assert screen.index("1 delivery: 0 ok, 1 failed: fails-early exit 4") > failure


def test_lines_go_to_stderr_at_once_when_the_agent_is_not_interactive(
    workspace: Workspace,
) -> None:
    template = workspace.template(
        script_hook("fails-early", ["pre-start"], ["sh", "-c", "exit 4"], blocking="true")
    )
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_lifecycle_hooks",
            "run",
            "--template",
            str(template),
            "--",
            sys.executable,
            "-c",
            "import sys; print('AGENT SPEAKS', file=sys.stderr)",
        ],
        env=workspace.env,
        cwd=workspace.root,
        stdin=subprocess.DEVNULL,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process.stderr.index("hook fails-early") < process.stderr.index("AGENT SPEAKS")


def test_a_second_sigterm_while_session_end_hangs_ends_run_and_journals_the_hook_as_replayable(
    workspace: Workspace, target_server: TargetServer
) -> None:
    target_server.always("/hangs", Reply.hang())
    template = workspace.template(
        _http_hook(
            "notify-end",
            "session-end",
            target_server.url("/hangs"),
            on_error="retry",
            timeout="120s",
            blocking="true",
        )
    )
    ready = workspace.root / "ready"
    run = workspace.start(template, workspace.agent_command(ready_file=str(ready)))
    wait_until(ready.exists, what="the agent to start")
    run.signal(signal.SIGTERM)
    wait_until(lambda: target_server.requests, what="the session-end delivery to start")
    run.signal(signal.SIGTERM)
    # The hook would hang for 120 s (times four attempts): run ends long before.
    run.wait(timeout=120)
    journal = Journal(workspace.journal)
    try:
        rows = [row for row in journal.failed() if row.hook == "notify-end"]
    finally:
        journal.close()
    assert len(rows) == 1, rows
    assert rows[0].request is not None and rows[0].request["url"] == target_server.url("/hangs")
    assert (rows[0].outcome, rows[0].error_type) == ("interrupted", "interrupted")
    assert rows[0].message == "run interrupted during attempt 1"
    assert "hook notify-end (session-end) interrupted" in run.stderr


def test_a_second_sigterm_while_a_hook_waits_to_retry_journals_it_as_interrupted(
    workspace: Workspace, target_server: TargetServer
) -> None:
    """The retries it did not make are the operator's doing, not the endpoint's: the journal
    row and the line say so, and the row stays replayable."""
    target_server.always("/busy", Reply(503, headers={"Retry-After": "6"}))
    template = workspace.template(
        _http_hook("notify-end", "session-end", target_server.url("/busy"), on_error="retry")
    )
    ready = workspace.root / "ready"
    run = workspace.start(template, workspace.agent_command(ready_file=str(ready)))
    wait_until(ready.exists, what="the agent to start")
    run.signal(signal.SIGTERM)
    wait_until(lambda: target_server.requests, what="the first session-end attempt")
    # Its answer read (the request's arrival is not enough on a busy machine): now it waits.
    wait_until(lambda: "retrying in" in run.stderr, what="the first retry wait")
    run.signal(signal.SIGTERM)
    run.wait(timeout=120)  # the hook would have waited 6 s before its second attempt
    journal = Journal(workspace.journal)
    try:
        rows = [row for row in journal.failed() if row.hook == "notify-end"]
    finally:
        journal.close()
    assert len(rows) == 1, rows
    assert (rows[0].outcome, rows[0].error_type) == ("interrupted", "interrupted")
    assert rows[0].message.startswith("run interrupted before attempt 2 of 4: HTTP 503"), rows
    assert "(history " in run.stderr and "run interrupted before attempt 2 of 4" in run.stderr
