"""Liveness judged so that no live agent is taken for dead: a PostgreSQL outage longer than
--stale-after, a reconciler whose clock is wrong, and a container restarted in a new pid
namespace (which recovers its killed session at once, and says why when it cannot).

Supervisors and reconcilers each run in a pid namespace of their own (`unshare`), as pods
elsewhere would: nobody can look another's processes up, only the journal's heartbeats."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_lifecycle_hooks.journal.liveness import CLOCK_OFFSET_ENV
from otel_lifecycle_hooks.journal.postgres import PostgresJournal
from otel_lifecycle_hooks.supervisor.recovery import agent_alive
from tests.fleet.fleet import body, deliveries, fleet_template, hook_ids, query, sessions_at
from tests.supervisor.supervised import Run, Workspace, wait_until
from tests.support.postgres import PostgresServer
from tests.support.target_server import TargetServer

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="pid namespaces of their own (unshare --pid) need root"
)

# A new pid namespace with its own /proc; the program is its pid 1, killed with `unshare`.
IN_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
CLI = [sys.executable, "-m", "otel_lifecycle_hooks"]


@pytest.fixture
def heartbeat() -> str:
    """These supervisors beat once a second (the fleet conftest's default is 200 ms)."""
    return "1s"


def start_in_namespace(workspace: Workspace, template: Path, command: list[str], name: str) -> Run:
    """`run --agent-name NAME` as pid 1 of a new pid namespace (a pod's container)."""
    argv = [*IN_NAMESPACE, *CLI, "run", "--agent-name", name, "--template", str(template)]
    stderr_path = workspace.root / f"supervisor-{name}-{len(workspace.runs)}.stderr"
    stderr_file = stderr_path.open("wb")
    process = subprocess.Popen(
        [*argv, "--", *command], env=workspace.env, cwd=workspace.root,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr_file,
        start_new_session=True,
    )  # fmt: skip
    run = Run(process, stderr_path, stderr_file)
    workspace.runs.append(run)
    return run


def reconcile_in_namespace(
    workspace: Workspace, template: Path, *options: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*IN_NAMESPACE, *CLI, "reconcile", "--json", "--template", str(template), *options],
        env={**workspace.env, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip


def namespace_init(pid: int) -> int:
    """The host pid of the program `unshare` (`pid`) started: its namespace's pid 1."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    found = wait_until(lambda: children.read_text().split(), what="the namespace's first process")
    return int(found[0])


def stop_gracefully(run: Run) -> int:
    """SIGTERM to the supervisor itself (`unshare --fork` ignores it); its exit code."""
    os.kill(namespace_init(run.process.pid), signal.SIGTERM)
    return run.wait(timeout=60)


def kill_namespace(run: Run) -> None:
    """The pod is lost: `unshare` SIGKILLed takes its namespace (supervisor and agent) along."""
    init = namespace_init(run.process.pid)
    run.signal(signal.SIGKILL)
    run.wait(timeout=120)
    wait_until(lambda: not agent_alive(init, None), what="the namespace's end")


def session_of(receiver: TargetServer, agent: str) -> str:
    (request,) = [r for r in deliveries(receiver, "/register") if body(r)["agent"] == agent]
    return body(request)["session"]


def reports(output: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def database_age(url: str, session: str) -> float:
    """How old the session's heartbeat is on the database's own clock."""
    (row,) = query(
        url,
        "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8 - heartbeat_at AS age"
        " FROM sessions WHERE session_id = %s",
        session,
    )
    return float(row["age"])


def first_heartbeats_after_return(url: str, sessions: list[str]) -> str:
    """Seconds from the database's start to each session's first heartbeat after it (on the
    database's clock), as they are seen: a measurement, printed, never asserted on."""
    seen: dict[str, float] = {}

    def all_back() -> bool:
        for row in query(
            url,
            "SELECT session_id, heartbeat_at - EXTRACT(EPOCH FROM pg_postmaster_start_time())"
            "::float8 AS after FROM sessions WHERE session_id = ANY(%s)",
            sessions,
        ):
            if row["after"] > 0:
                seen.setdefault(row["session_id"], row["after"])
        return len(seen) == len(sessions)

    wait_until(all_back, timeout=90, what="every live supervisor's heartbeat")
    return " ".join(f"{after:.2f}s" for after in sorted(seen.values()))


def test_an_outage_longer_than_stale_after_deregisters_no_live_agent(
    workspace: Workspace,
    receiver: TargetServer,
    postgres_server: PostgresServer,
    postgres_url: str,
) -> None:
    """4 live agents and one killed; PostgreSQL gone for 20 s (stale-after 5 s) while a
    reconciler watches from its own pid namespace. Once it is back, the killed session is
    recovered (the reconciler acts), and none of the live four is claimed or deregistered."""
    template = fleet_template(workspace, receiver)
    names = [f"live-{n}" for n in range(4)]
    live_runs = [
        start_in_namespace(workspace, template, workspace.agent_command(on_term=0), name)
        for name in names
    ]
    doomed = start_in_namespace(workspace, template, workspace.agent_command(on_term=0), "doomed")
    wait_until(lambda: len(sessions_at(receiver, "/register")) == 5, what="five registrations")
    live = [session_of(receiver, name) for name in names]
    lost = session_of(receiver, "doomed")
    watcher = reconcile_in_namespace(
        workspace, template, "--watch", "--interval", "500ms", "--stale-after", "5s"
    )
    try:
        kill_namespace(doomed)
        postgres_server.stop()
        try:
            time.sleep(20)  # the outage: four times --stale-after
        finally:
            postgres_server.start()
        back = first_heartbeats_after_return(postgres_url, live)
        print(f"\nfirst heartbeat of each live supervisor after the database's start: {back}")
        # The reconciler does act: the killed session is recovered after the outage.
        wait_until(
            lambda: hook_ids(receiver, "/farewell", lost),
            timeout=90,
            what="the killed one's recovery",
        )
        untouched = query(
            postgres_url,
            "SELECT session_id FROM sessions WHERE session_id = ANY(%s)"
            " AND claimed_by IS NULL AND recovered_at IS NULL AND ended_at IS NULL",
            live,
        )
        assert sorted(row["session_id"] for row in untouched) == sorted(live)
        for session in live:
            assert hook_ids(receiver, "/deregister", session) == []
            assert hook_ids(receiver, "/farewell", session) == []
    finally:
        os.kill(namespace_init(watcher.pid), signal.SIGTERM)
        out, err = watcher.communicate(timeout=60)
    recovered = [r["session"] for r in reports(out) if r["action"] == "recovered"]
    assert recovered == [lost], err
    for run in live_runs:
        assert stop_gracefully(run) == 0, run.stderr
    for session in live:  # each live agent deregistered once: by its own supervisor
        assert len(hook_ids(receiver, "/deregister", session)) == 1
    assert len(hook_ids(receiver, "/deregister", lost)) == 1


def test_a_reconciler_whose_clock_is_wrong_judges_on_the_databases(
    workspace: Workspace, receiver: TargetServer, postgres_url: str
) -> None:
    """An hour ahead, a reconciler does not take a live agent for dead; an hour behind, it
    still recovers a killed one: the heartbeat's age is the database's."""
    template = fleet_template(workspace, receiver)
    alive = start_in_namespace(workspace, template, workspace.agent_command(on_term=0), "alive")
    doomed = start_in_namespace(workspace, template, workspace.agent_command(on_term=0), "doomed")
    wait_until(lambda: len(sessions_at(receiver, "/register")) == 2, what="both registrations")
    live, lost = session_of(receiver, "alive"), session_of(receiver, "doomed")
    wait_until(lambda: database_age(postgres_url, live) < 5, what="the live one's heartbeat")

    ahead = reconcile_in_namespace(
        workspace, template, "--stale-after", "30s", env={CLOCK_OFFSET_ENV: "3600"}
    )
    out, err = ahead.communicate(timeout=60)
    assert ahead.returncode == 0, err
    assert reports(out) == []
    assert hook_ids(receiver, "/deregister", live) == []

    kill_namespace(doomed)
    wait_until(lambda: database_age(postgres_url, lost) > 4, what="a stale heartbeat")
    behind = reconcile_in_namespace(
        workspace, template, "--stale-after", "3s", env={CLOCK_OFFSET_ENV: "-3600"}
    )
    out, err = behind.communicate(timeout=60)
    assert behind.returncode == 0, err
    assert [(r["session"], r["action"]) for r in reports(out)] == [(lost, "recovered")]
    assert len(hook_ids(receiver, "/deregister", lost)) == 1
    assert hook_ids(receiver, "/deregister", live) == []
    assert stop_gracefully(alive) == 0, alive.stderr


def test_a_container_restarted_in_a_new_pid_namespace_recovers_its_killed_session_at_once(
    workspace: Workspace, receiver: TargetServer
) -> None:
    """The next run of the same agent cannot look the old one's pids up, and the old
    heartbeat is seconds old: while the old supervisor lives it says why it leaves the
    session for later; once it was killed, the next run proves it gone and recovers it."""
    template = fleet_template(workspace, receiver)
    first = start_in_namespace(workspace, template, workspace.agent_command(on_term=0), "pod")
    wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
    session = session_of(receiver, "pod")

    beside = start_in_namespace(workspace, template, workspace.agent_command(exit=0), "pod")
    assert beside.wait(timeout=60) == 0, beside.stderr
    assert f"session {session} of an earlier run left for later" in beside.stderr
    assert hook_ids(receiver, "/deregister", session) == []

    kill_namespace(first)
    restarted = start_in_namespace(workspace, template, workspace.agent_command(exit=0), "pod")
    assert restarted.wait(timeout=60) == 0, restarted.stderr
    assert f"recovering session {session}" in restarted.stderr
    assert len(hook_ids(receiver, "/deregister", session)) == 1
    assert len(hook_ids(receiver, "/farewell", session)) == 1


def test_heartbeats_are_on_the_databases_clock_and_count_from_its_return(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    journal = PostgresJournal(postgres_url, environ={"HOME": str(tmp_path)})
    try:
        journal.open_session("s1", agent_id="a1", started_at=1.0)  # a clock far behind
        journal.heartbeat("s1")
        assert journal.flush()
        before = journal.liveness_clock()
        assert before is not None
        row = journal.session("s1")
        assert row is not None and row.heartbeat_at is not None
        assert 0 <= before.now - row.heartbeat_at < 60  # the database's moment, not 1.0
        postgres_server.stop()
        try:
            assert journal.liveness_clock() is None  # nothing judged while it is away
        finally:
            postgres_server.start()
        after = wait_until(journal.liveness_clock, what="the database's return")
        # A heartbeat missed meanwhile counts from the return, not from before the outage.
        assert after.alive_since > before.now
        assert after.age(row.heartbeat_at) < after.now - row.heartbeat_at
    finally:
        journal.close()
