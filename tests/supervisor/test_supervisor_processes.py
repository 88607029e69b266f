"""Nothing the agent started outlives `run`: tools that left its session are found and ended,
and the agent itself dies with a killed supervisor. Real processes throughout."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from otel_lifecycle_hooks.supervisor.processes import (
    ProcessInfo,
    agent_tree,
    orphaned_zombies,
    read_stat,
)
from tests.supervisor.supervised import Workspace, wait_until

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

SUPERVISOR, AGENT = 100, 200


def proc(pid: int, ppid: int, *, sid: int | None = None, start: int = 1) -> ProcessInfo:
    return ProcessInfo(pid, "S", ppid, sid or pid, sid or pid, start)


def tree_pids(processes: list[ProcessInfo], known: set[tuple[int, int]] | None = None) -> set[int]:
    return {p.pid for p in agent_tree(AGENT, SUPERVISOR, known or set(), processes)}


def test_the_agent_tree_follows_children_that_left_the_agents_session() -> None:
    processes = [
        proc(SUPERVISOR, 1),
        proc(AGENT, SUPERVISOR),
        proc(201, AGENT, sid=AGENT),
        proc(300, 201),  # setsid: a session of its own, still under the agent
        proc(301, 300),
    ]
    assert tree_pids(processes) == {AGENT, 201, 300, 301}


def test_an_orphan_re_parented_to_the_supervisor_stays_the_agents_once_seen() -> None:
    before = [proc(SUPERVISOR, 1), proc(AGENT, SUPERVISOR), proc(400, AGENT), proc(401, 400)]
    known = {p.key for p in agent_tree(AGENT, SUPERVISOR, set(), before)}
    after = [proc(SUPERVISOR, 1), proc(AGENT, SUPERVISOR), proc(401, SUPERVISOR)]
    assert tree_pids(after, known) == {AGENT, 401}


def test_the_supervisors_own_children_and_reused_pids_are_not_the_agents() -> None:
    known = {(401, 1)}
    processes = [
        proc(SUPERVISOR, 1),
        proc(AGENT, SUPERVISOR),
        proc(500, SUPERVISOR),  # a script hook, in a session of its own
        proc(401, SUPERVISOR, start=99),  # a pid the agent's orphan had, now someone else's
    ]
    assert tree_pids(processes, known) == {AGENT}


def test_only_zombies_the_supervisor_cannot_have_started_are_orphans_to_reap() -> None:
    def zombie(pid: int, sid: int) -> ProcessInfo:
        return ProcessInfo(pid, "Z", SUPERVISOR, sid, sid, 1)

    own_session = SUPERVISOR + 1  # the supervisor's session (it leads none itself here)
    processes = [
        zombie(600, own_session),  # a child it started in its own session: its Popen's
        zombie(601, 601),  # a child it started leading a session (a script hook): its Popen's
        zombie(602, 601),  # that script's background child, re-parented: an orphan
        ProcessInfo(603, "S", SUPERVISOR, 601, 601, 1),  # still running
        ProcessInfo(604, "Z", 700, 601, 601, 1),  # someone else's zombie
    ]
    assert [p.pid for p in orphaned_zombies(SUPERVISOR, own_session, processes)] == [602]


def test_a_stat_line_with_a_strange_command_name_is_read() -> None:
    info = read_stat(os.getpid())
    assert info is not None
    assert (info.pid, info.ppid, info.sid) == (os.getpid(), os.getppid(), os.getsid(0))


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    info = read_stat(pid)
    return info is not None and info.state != "Z"


def test_a_detached_tool_of_an_agent_that_exited_is_ended_by_run(workspace: Workspace) -> None:
    sleeper = workspace.root / "sleeper.pid"
    run = workspace.start(
        None, workspace.agent_command(detach=[str(sleeper), False], exit=0), "--grace-period", "5s"
    )
    assert run.wait(timeout=120) == 0, run.stderr
    pid = int(sleeper.read_text())
    assert read_stat(pid) is None, f"pid {pid} outlived run: {read_stat(pid)}"


def test_sigterm_ends_a_detached_tool_that_ignores_it_at_the_grace_deadline(
    workspace: Workspace,
) -> None:
    sleeper = workspace.root / "sleeper.pid"
    ready = workspace.root / "ready"
    run = workspace.start(
        None,
        workspace.agent_command(detach=[str(sleeper), True], ready_file=str(ready)),
        "--grace-period",
        "1s",
    )
    wait_until(ready.exists, what="the agent to detach its tool")
    pid = int(sleeper.read_text())
    assert running(pid)
    run.signal(signal.SIGTERM)
    assert run.wait(timeout=120) == 128 + signal.SIGTERM, run.stderr
    assert read_stat(pid) is None, f"pid {pid} outlived run: {read_stat(pid)}"


def test_an_orphan_that_exits_while_the_agent_runs_is_reaped(workspace: Workspace) -> None:
    sleeper = workspace.root / "sleeper.pid"
    ready = workspace.root / "ready"
    run = workspace.start(
        None, workspace.agent_command(detach=[str(sleeper), False, 3], ready_file=str(ready))
    )
    wait_until(ready.exists, what="the agent to detach its tool")
    pid = int(sleeper.read_text())
    # Re-parented to run (the subreaper), it would stay a zombie there if run never reaped it.
    # run looks for the agent's orphans every second: it sees this one alive before it exits.
    wait_until(
        lambda: getattr(read_stat(pid), "ppid", None) == run.process.pid,
        what="the orphan to be re-parented to run",
    )
    wait_until(lambda: read_stat(pid) is None, timeout=60, what="the exited orphan to be reaped")
    assert run.process.poll() is None


def test_the_agent_dies_with_a_killed_supervisor(workspace: Workspace) -> None:
    ready = workspace.root / "ready"
    command = workspace.agent_command(ready_file=str(ready))
    run = workspace.start(None, command)
    wait_until(ready.exists, what="the agent to start")
    agent_pid = int((workspace.root / "agent-1.pid").read_text())
    assert running(agent_pid)
    run.signal(signal.SIGKILL)
    run.wait(timeout=120)
    wait_until(lambda: not running(agent_pid), timeout=60, what="the agent to die with run")
