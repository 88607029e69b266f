"""Stopping under `run --grace-period 2s`: the grace period is shared by blocking pre-stop
hooks and the agent's shutdown, a stubborn agent is killed, a second signal changes nothing,
SIGHUP reaches the agent, and a stop during pre-start never starts it."""

from __future__ import annotations

import signal
import sys
import time

from otel_lifecycle_hooks.journal import Journal
from tests.supervisor.supervised import (
    Workspace,
    read_lines,
    recorded,
    recorded_events,
    recorder_hook,
    script_hook,
    wait_until,
)
from tests.support.target_server import TargetServer

GRACE = ["--grace-period", "2s"]
# A hang bound, not a timing claim: how long a stop may take beyond the grace period on a busy
# machine (session-end hooks, draining, interpreter start-up).
SLACK = 15.0


def appender_then_sleep(path: str, seconds: float) -> list[str]:
    """argv of a script that appends its event name to `path`, then sleeps."""
    code = (
        "import json, sys, time; e = json.load(sys.stdin); "
        f"open({path!r}, 'a')"
        ".write(json.dumps({'hook_event_name': e['hook_event_name']}) + '\\n'); "
        f"time.sleep({seconds})"
    )
    return [sys.executable, "-c", code]


def test_a_slow_blocking_pre_stop_hook_is_cut_at_the_grace_period_and_the_agent_killed(
    workspace: Workspace, target_server: TargetServer
) -> None:
    ready = workspace.root / "ready"
    template = workspace.template(
        recorder_hook(target_server.url("/events"), ["pre-stop", "session-end"])
        + script_hook(
            "slow-deregister", ["pre-stop"], ["sleep", "5"], blocking="true", timeout="10s"
        )
    )
    command = workspace.agent_command(ready_file=str(ready), on_term="ignore")
    run = workspace.start(template, command, *GRACE)
    wait_until(ready.exists, what="the agent to start")

    stopped_at = time.monotonic()
    run.signal(signal.SIGTERM)
    assert run.wait(timeout=120) == 128 + signal.SIGKILL, run.stderr
    assert time.monotonic() - stopped_at < 2.0 + SLACK  # not the hook's 5s plus the agent's

    assert recorded_events(target_server) == ["pre-stop", "session-end"]
    assert recorded(target_server)[-1]["EXIT_CODE"] == str(128 + signal.SIGKILL)
    slow = Journal(workspace.journal).recent("slow-deregister")
    assert [row.outcome for row in slow] == ["timeout"]


def test_an_agent_that_ignores_sigterm_is_killed_when_the_grace_period_is_spent(
    workspace: Workspace, target_server: TargetServer
) -> None:
    ready = workspace.root / "ready"
    template = workspace.template(
        recorder_hook(target_server.url("/events"), ["session-end", "error"])
    )
    run = workspace.start(
        template, workspace.agent_command(ready_file=str(ready), on_term="ignore"), *GRACE
    )
    wait_until(ready.exists, what="the agent to start")

    stopped_at = time.monotonic()
    run.signal(signal.SIGTERM)
    assert run.wait(timeout=120) == 128 + signal.SIGKILL, run.stderr
    elapsed = time.monotonic() - stopped_at
    assert 1.5 <= elapsed < 2.0 + SLACK, (
        f"stopped after {elapsed:.1f}s"
    )  # its grace period, no more
    # Killed because we asked it to stop: a stop, not a crash.
    assert [(e["EVENT"], e["EXIT_CODE"]) for e in recorded(target_server)] == [
        ("session-end", "137")
    ]


def test_a_second_sigterm_during_pre_stop_ends_the_run_without_firing_pre_stop_again(
    workspace: Workspace, target_server: TargetServer
) -> None:
    ready = workspace.root / "ready"
    pre_stop_log = workspace.root / "pre-stop.jsonl"
    template = workspace.template(
        recorder_hook(target_server.url("/events"), ["phase-change", "pre-stop", "session-end"])
        + script_hook(
            "deregister",
            ["pre-stop"],
            appender_then_sleep(str(pre_stop_log), 1.0),
            blocking="true",
            timeout="10s",
        )
    )
    run = workspace.start(
        template, workspace.agent_command(ready_file=str(ready), on_term=0), *GRACE
    )
    wait_until(ready.exists, what="the agent to start")

    run.signal(signal.SIGTERM)
    wait_until(pre_stop_log.exists, what="the pre-stop hook to start")
    run.signal(signal.SIGTERM)
    run.signal(signal.SIGINT)
    # The operator asked twice: the agent is killed rather than given its grace period.
    assert run.wait(timeout=120) == 128 + signal.SIGKILL, run.stderr

    assert len(read_lines(pre_stop_log)) == 1
    assert recorded_events(target_server).count("pre-stop") <= 1
    # What the second signal cut short was journaled as interrupted, for `replay`.
    assert "interrupted" in run.stderr


def test_sighup_is_forwarded_to_the_agent_and_does_not_stop_it(workspace: Workspace) -> None:
    ready = workspace.root / "ready"
    hups = workspace.root / "hups"
    run = workspace.start(
        None, workspace.agent_command(ready_file=str(ready), hup_file=str(hups)), *GRACE
    )
    wait_until(ready.exists, what="the agent to start")

    run.signal(signal.SIGHUP)
    wait_until(
        lambda: hups.exists() and hups.read_text() == "HUP\n", what="the agent to get SIGHUP"
    )
    assert run.process.poll() is None
    run.signal(signal.SIGTERM)
    assert run.wait(timeout=120) == 128 + signal.SIGTERM, run.stderr


def test_sigterm_during_a_slow_blocking_pre_start_never_starts_the_agent(
    workspace: Workspace, target_server: TargetServer
) -> None:
    started = workspace.root / "agent-started"
    pre_start_log = workspace.root / "pre-start.jsonl"
    template = workspace.template(
        script_hook(
            "provision",
            ["pre-start"],
            appender_then_sleep(str(pre_start_log), 1.5),
            blocking="true",
            timeout="10s",
        )
        + recorder_hook(target_server.url("/events"))
    )
    run = workspace.start(template, workspace.agent_command(touch=str(started)), *GRACE)
    wait_until(pre_start_log.exists, what="the pre-start hook to start")

    run.signal(signal.SIGTERM)
    assert run.wait(timeout=120) == 128 + signal.SIGTERM, run.stderr

    assert not started.exists()
    events = recorded(target_server)
    assert [(e["EVENT"], e["PHASE"]) for e in events] == [
        ("phase-change", "provisioning"),
        ("pre-start", "provisioning"),
        ("phase-change", "stopping"),
        ("pre-stop", "stopping"),
        ("phase-change", "stopped"),
        ("session-end", "stopped"),
    ]
    assert events[-1]["EXIT_CODE"] == str(128 + signal.SIGTERM)


def test_an_agent_that_exits_while_pre_stop_runs_ends_the_session_without_waiting(
    workspace: Workspace, target_server: TargetServer
) -> None:
    ready = workspace.root / "ready"
    pid_file = workspace.root / "agent-under-test.pid"
    kill_agent = [
        sys.executable,
        "-c",
        "import os, signal, time; "
        f"os.kill(int(open({str(pid_file)!r}).read()), signal.SIGKILL); time.sleep(0.5)",
    ]
    template = workspace.template(
        recorder_hook(target_server.url("/events"), ["pre-stop", "error", "session-end"])
        + script_hook("teardown", ["pre-stop"], kill_agent, blocking="true", timeout="5s")
    )
    command = workspace.agent_command(
        ready_file=str(ready), pid_file=str(pid_file), on_term="ignore"
    )
    run = workspace.start(template, command, "--grace-period", "60s")
    wait_until(ready.exists, what="the agent to start")

    stopped_at = time.monotonic()
    run.signal(signal.SIGTERM)
    assert run.wait(timeout=120) == 128 + signal.SIGKILL, run.stderr
    elapsed = time.monotonic() - stopped_at
    assert elapsed < 60.0, f"stopped after {elapsed:.1f}s"  # no waiting out the grace period
    assert [(e["EVENT"], e["EXIT_CODE"]) for e in recorded(target_server)] == [
        ("pre-stop", ""),
        ("session-end", "137"),
    ]


def test_a_second_signal_during_a_blocking_post_start_hook_ends_the_run(
    workspace: Workspace,
) -> None:
    # The hook would hold run for 60 s; the operator's second signal must not wait for it.
    # (SIGINT then SIGTERM: two of the same signal sent at once may reach run as one.)
    started = workspace.root / "post-start.jsonl"
    template = workspace.template(
        script_hook(
            "register",
            ["post-start"],
            appender_then_sleep(str(started), 60.0),
            blocking="true",
            timeout="90s",
        )
    )
    run = workspace.start(template, workspace.agent_command(), *GRACE)
    wait_until(started.exists, what="the post-start hook to start")

    run.signal(signal.SIGINT)
    run.signal(signal.SIGTERM)
    code = run.wait(timeout=SLACK)  # a hang bound: the hook alone would take 60 s

    assert code != 0, run.stderr
    assert "ignored: already stopping" not in run.stderr
    rows = [row for row in Journal(workspace.journal).executions() if row.hook == "register"]
    assert [(row.outcome, row.error_type, row.message) for row in rows] == [
        ("interrupted", "interrupted", "run interrupted during attempt 1")
    ]


def test_a_second_signal_during_a_blocking_hooks_retry_wait_journals_its_attempts_as_interrupted(
    workspace: Workspace, target_server: TargetServer
) -> None:
    # A blocking session-end hook against a receiver that answers 503 waits 1 s, 2 s, 4 s
    # between attempts; the second signal, raised out of that wait, must leave the attempt it
    # made journaled, as interrupted (replayable), not as the hook's own unexpected failure.
    from tests.support.target_server import Reply

    target_server.always("/end", Reply.json(503, '{"error": "unavailable"}'))
    ready = workspace.root / "ready"
    template = workspace.template(
        "  - name: end-retry\n"
        "    on: [session-end]\n"
        "    blocking: true\n"
        "    on_error: retry\n"
        "    timeout: 5s\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{target_server.url("/end")}"\n'
        "      body: '{}'\n"
    )
    run = workspace.start(
        template, workspace.agent_command(ready_file=str(ready), on_term=0), *GRACE
    )
    wait_until(ready.exists, what="the agent to start")

    run.signal(signal.SIGINT)
    # run says so as the wait between the first two attempts starts
    wait_until(lambda: "retrying in" in run.stderr, what="the first retry wait")
    run.signal(signal.SIGTERM)
    run.wait(timeout=SLACK)  # a hang bound: the retries alone would take 7 s and more

    assert "failed unexpectedly" not in run.stderr
    [row] = [row for row in Journal(workspace.journal).executions() if row.hook == "end-retry"]
    # Its own end records it, or on a busy machine the engine's final drain gives up on it
    # first: one row either way, in the one form an interrupted delivery has.
    assert (row.outcome, row.error_type) == ("interrupted", "interrupted"), row
    assert row.attempts == len(target_server.wait_for(1)) >= 1
