"""Crash recovery is exactly-once, attacked with SIGKILL at each moment that used to break it.

Real `otel-lifecycle-hooks run` supervisors are SIGKILLed while a blocking hook's request is at
a real loopback receiver; the next `run` of the same agent recovers the session. The receiver
counts deliveries per session and X-Scion-Hook-ID: every owed hook arrives at most once more,
with the id the killed session used, and nothing that was not owed arrives at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from otel_lifecycle_hooks.supervisor.recovery import agent_alive, process_start_time
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.target_server import RecordedRequest, Reply, TargetServer

HOOKS = (("register", "post-start"), ("deregister", "pre-stop"), ("farewell", "session-end"))


@pytest.fixture
def receiver() -> Iterator[TargetServer]:
    with TargetServer() as server:
        yield server


def http_hook(name: str, event: str, url: str) -> str:
    return (
        f"  - name: {name}\n"
        f"    on: [{event}]\n"
        "    blocking: true\n"
        "    timeout: 60s\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{url}"\n'
        '      body: \'{"session": "${SESSION_ID}", "recovered": "${RECOVERED}"}\'\n'
    )


def registry_template(workspace: Workspace, receiver: TargetServer, extra_hooks: str = "") -> Path:
    hooks = "".join(http_hook(name, event, receiver.url(f"/{name}")) for name, event in HOOKS)
    return workspace.template(hooks + extra_hooks)


def deliveries(receiver: TargetServer, path: str) -> list[RecordedRequest]:
    return [request for request in list(receiver.requests) if request.path == path]


def session_of(request: RecordedRequest) -> str:
    return str(json.loads(request.body)["session"])


def by_session(receiver: TargetServer, path: str, session: str) -> list[str]:
    """The X-Scion-Hook-IDs `path` received for `session`, in order."""
    return [
        request.headers["x-scion-hook-id"]
        for request in deliveries(receiver, path)
        if session_of(request) == session
    ]


def killed_session(receiver: TargetServer) -> str:
    (first,) = deliveries(receiver, "/register")
    return session_of(first)


def next_run_recovers(workspace: Workspace, template: Path) -> None:
    """A later `run` of the same agent that exits by itself."""
    later = workspace.start(template, workspace.agent_command(exit=0))
    assert later.wait(timeout=60) == 0, later.stderr


def agent(workspace: Workspace, name: str, **plan: object) -> tuple[list[str], Path]:
    """The stand-in agent's command, and the file where it writes its pid once started."""
    pid_file = workspace.root / f"agent-{name}.pid"
    return workspace.agent_command(pid_file=str(pid_file), **plan), pid_file


def sigkill(workspace: Workspace, run: object, pid_file: Path | None = None) -> None:
    """SIGKILL the supervisor once its agent has started (`pid_file`), then the agent if it
    outlived it (it should not: it dies with its supervisor), as its container's end would;
    returns once both are gone."""
    if pid_file is not None:
        wait_until(pid_file.exists, what="the agent to have started")
    run.signal(signal.SIGKILL)  # type: ignore[attr-defined]
    run.wait(timeout=120)  # type: ignore[attr-defined]
    if pid_file is not None:
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        wait_until(lambda: not agent_alive(pid, None), what="the agent's end")
    workspace.cleanup()


def test_killed_during_pre_stop_the_deregistration_is_sent_once_more_with_the_same_id(
    workspace: Workspace, receiver: TargetServer
) -> None:
    template = registry_template(workspace, receiver)
    receiver.on("/deregister", Reply.hang())
    command, pid_file = agent(workspace, "first", on_term=0)
    first = workspace.start(template, command)
    wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
    first.signal(signal.SIGTERM)
    wait_until(lambda: deliveries(receiver, "/deregister"), what="the deregistration to arrive")
    sigkill(workspace, first, pid_file)  # while the receiver holds the deregistration
    lost = killed_session(receiver)
    (sent_before,) = by_session(receiver, "/deregister", lost)

    next_run_recovers(workspace, template)
    next_run_recovers(workspace, template)  # and a third run finds nothing left to do

    assert by_session(receiver, "/deregister", lost) == [sent_before, sent_before]
    assert len(by_session(receiver, "/farewell", lost)) == 1  # owed, never sent before
    assert len(by_session(receiver, "/register", lost)) == 1
    recovered = [r for r in deliveries(receiver, "/deregister") if session_of(r) == lost][1]
    assert json.loads(recovered.body)["recovered"] == "true"


def test_killed_during_session_end_only_session_end_is_sent_again(
    workspace: Workspace, receiver: TargetServer
) -> None:
    template = registry_template(workspace, receiver)
    receiver.on("/farewell", Reply.hang())
    # The agent exits by itself: the session is never stopped, so pre-stop is never owed.
    command, pid_file = agent(workspace, "first", exit=0)
    first = workspace.start(template, command)
    wait_until(lambda: deliveries(receiver, "/farewell"), what="session-end to arrive")
    sigkill(workspace, first, pid_file)
    lost = killed_session(receiver)
    (sent_before,) = by_session(receiver, "/farewell", lost)

    next_run_recovers(workspace, template)
    next_run_recovers(workspace, template)

    assert by_session(receiver, "/farewell", lost) == [sent_before, sent_before]
    assert by_session(receiver, "/deregister", lost) == []  # never owed: never sent


def test_killed_in_a_blocking_post_start_after_the_registration_answered_is_recovered(
    workspace: Workspace, receiver: TargetServer
) -> None:
    # The registration answers at once; a second blocking post-start hook holds the
    # supervisor before it can mark post-start done.
    holder = http_hook("warm-up", "post-start", receiver.url("/warm-up"))
    template = registry_template(workspace, receiver, extra_hooks=holder)
    receiver.on("/warm-up", Reply.hang())
    command, pid_file = agent(workspace, "first", on_term=0)
    first = workspace.start(template, command)
    wait_until(lambda: deliveries(receiver, "/warm-up"), what="the second post-start hook")
    assert deliveries(receiver, "/register")  # answered 200 before the kill
    sigkill(workspace, first, pid_file)
    lost = killed_session(receiver)

    next_run_recovers(workspace, template)
    next_run_recovers(workspace, template)

    deregistrations = by_session(receiver, "/deregister", lost)
    assert len(deregistrations) == 1  # the registration does not leak
    agent_id = deregistrations[0].split(":", 1)[0]
    assert deregistrations[0].startswith(f"{agent_id}:deregister:pre-stop:")
    assert len(by_session(receiver, "/farewell", lost)) == 1
    assert len(by_session(receiver, "/warm-up", lost)) == 1  # post-start is never re-sent


def test_a_session_whose_agent_still_runs_is_not_recovered_until_the_agent_is_gone(
    workspace: Workspace, receiver: TargetServer
) -> None:
    template = registry_template(workspace, receiver)
    first = workspace.start(template, workspace.agent_command(on_term=0))
    wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
    first.signal(signal.SIGKILL)
    first.wait(timeout=120)
    lost = killed_session(receiver)
    # An agent that outlived its supervisor (a process the session recorded as its agent,
    # whatever else ends the real one): its pid and start time as /proc gives them.
    survivor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        started = process_start_time(survivor.pid)
        assert started is not None
        with closing(sqlite3.connect(workspace.journal)) as db, db:
            db.execute(
                "UPDATE sessions SET agent_pid = ?, agent_started_at = ? WHERE session_id = ?",
                (survivor.pid, started, lost),
            )

        next_run_recovers(workspace, template)
        assert by_session(receiver, "/deregister", lost) == []  # alive: left alone

        survivor.kill()
        survivor.wait(timeout=120)
        next_run_recovers(workspace, template)
        next_run_recovers(workspace, template)
        assert len(by_session(receiver, "/deregister", lost)) == 1
        assert len(by_session(receiver, "/farewell", lost)) == 1
    finally:
        if survivor.poll() is None:
            survivor.kill()
            survivor.wait(timeout=120)


def test_every_hook_id_reaches_the_receiver_at_most_twice_across_kills_at_each_moment(
    workspace: Workspace, receiver: TargetServer
) -> None:
    """The three kills in one journal: no id is ever seen more than twice, no session's
    deregistration more than one id."""
    template = registry_template(workspace, receiver)
    receiver.on("/deregister", Reply.hang())
    receiver.on("/farewell", Reply.hang())
    command, pid_file = agent(workspace, "first", on_term=0)
    run = workspace.start(template, command)
    wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
    run.signal(signal.SIGTERM)
    wait_until(lambda: deliveries(receiver, "/deregister"), what="pre-stop")
    sigkill(workspace, run, pid_file)
    # The next run recovers that session: its pre-stop now answers, its session-end hangs
    # (the queued hang), and it is killed again in the middle of the recovery.
    second = workspace.start(template, workspace.agent_command(on_term=0))
    wait_until(lambda: deliveries(receiver, "/farewell"), what="the recovered session-end")
    sigkill(workspace, second)  # in its recovery: its own agent never started
    for _ in range(3):
        next_run_recovers(workspace, template)

    counts = Counter(
        request.headers["x-scion-hook-id"]
        for request in list(receiver.requests)
        if request.path in ("/deregister", "/farewell")
    )
    assert counts and max(counts.values()) <= 2, counts
    for session in {session_of(r) for r in deliveries(receiver, "/register")}:
        assert len(set(by_session(receiver, "/deregister", session))) <= 1
        assert len(set(by_session(receiver, "/farewell", session))) == 1


def test_two_reconcilers_at_once_on_the_sqlite_journal_deregister_once(
    workspace: Workspace, receiver: TargetServer
) -> None:
    """The embedded journal, no database server: `reconcile` claims with BEGIN IMMEDIATE."""
    template = registry_template(workspace, receiver)
    agent_command, pid_file = agent(workspace, "first", on_term=0)
    first = workspace.start(template, agent_command)
    wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
    sigkill(workspace, first, pid_file)
    lost = killed_session(receiver)
    command = [sys.executable, "-m", "otel_lifecycle_hooks", "reconcile", "--stale-after", "0s"]
    command += ["--journal", f"sqlite://{workspace.journal}", "--template", str(template)]
    reconcilers = [
        subprocess.Popen(command, env=workspace.env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=60)[0] for process in reconcilers]
    assert [process.returncode for process in reconcilers] == [0, 0]
    assert sum(f"recovered: session {lost}" in out for out in outputs) == 1
    assert len(by_session(receiver, "/deregister", lost)) == 1
    assert len(by_session(receiver, "/farewell", lost)) == 1
    next_run_recovers(workspace, template)  # nothing is left for the next run either
    assert len(by_session(receiver, "/deregister", lost)) == 1
