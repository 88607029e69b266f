"""The sweep of a dead supervisor's cgroups kills only what it should.

`sweep_orphaned_groups` (run by every new supervisor and by `reconcile`) takes nothing from a
journal row or from any file the agent can write: it looks under its own parent, for names of
the form it creates, and kills a group only when the group's lock is free and the process its
name records no longer runs. Here real processes sit in real groups under a parent of the
test's own (the variable that names it), and the sweep must end exactly the dead owner's.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.confinement import (
    CGROUP_ENV,
    Cgroup,
    CgroupHome,
    _kill_each,
    find_hierarchy,
    sweep_orphaned_groups,
)
from otel_lifecycle_hooks.supervisor.processes import read_stat
from tests.supervisor.supervised import wait_until

HIERARCHY = find_hierarchy()

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root"),
    pytest.mark.skipif(
        HIERARCHY is None or not os.access(HIERARCHY.mount, os.W_OK),
        reason="needs a writable cgroup v2 hierarchy",
    ),
]


@pytest.fixture
def parent() -> Iterator[tuple[str, Path]]:
    """A parent of the test's own at the hierarchy's root: (its cgroup path, its directory)."""
    assert HIERARCHY is not None
    name = f"olh-sweep-test-{os.getpid()}"
    directory = HIERARCHY.directory(f"{HIERARCHY.root.rstrip('/')}/{name}")
    assert directory is not None
    directory.mkdir()
    yield f"/{name}", directory
    for group in sorted(directory.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if group.is_dir():
            Cgroup(group).kill()
    for group in sorted(directory.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if group.is_dir():
            wait_until(lambda g=group: _rmdir(g), timeout=60, what=f"{group} to empty")
    directory.rmdir()


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except OSError:
        return False
    return True


def _sleeper_in(group: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A sleeping process in `group` (joined before it runs), and its start time."""
    group.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(Cgroup(group).join_argv(["/bin/sleep", "600"]))
    wait_until(lambda: process.pid in Cgroup(group).pids(), what="the sleeper to join")
    info = read_stat(process.pid)
    assert info is not None
    return process, info.start


def _dead_owner() -> tuple[int, int]:
    """The pid and start time of a process that has exited."""
    process = subprocess.Popen(["/bin/sleep", "0"])
    info = read_stat(process.pid)
    process.wait()
    return process.pid, info.start if info is not None else 1


def _running(process: subprocess.Popen[bytes], start: int) -> bool:
    info = read_stat(process.pid)
    return info is not None and info.start == start and info.state != "Z"


def test_only_a_dead_owners_group_is_killed_and_removed(parent: tuple[str, Path]) -> None:
    path, directory = parent
    dead_pid, dead_start = _dead_owner()
    own = read_stat(os.getpid())
    assert own is not None
    dead = directory / f"run-{dead_pid}-{dead_start}-0"
    live = directory / f"run-{os.getpid()}-{own.start}-7"
    locked = directory / f"run-{dead_pid}-{dead_start}-1"
    # Names the module never makes: a forged row or a stray group may name them.
    foreign = [
        directory / "victim",
        directory / f"run-{dead_pid}-{dead_start}",
        directory / "run-x-1-0",
    ]
    sleepers = {group: _sleeper_in(group / "agent") for group in [dead, live, locked, *foreign]}
    # Another pid namespace's live supervisor: its pid means nothing here, its lock does.
    lock_fd = os.open(locked, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        removed = sweep_orphaned_groups({CGROUP_ENV: path})
    finally:
        os.close(lock_fd)

    assert removed == [dead.name]
    orphan, orphan_start = sleepers.pop(dead)
    wait_until(lambda: not _running(orphan, orphan_start), timeout=60, what="the orphan to end")
    assert not dead.exists()
    for group, (process, start) in sleepers.items():
        assert _running(process, start), f"{group.name} was killed"
        assert group.exists()
    for process, _ in sleepers.values():
        process.kill()
        process.wait(timeout=120)
    orphan.wait(timeout=120)  # its zombie (this test is its parent)


def test_a_supervisors_group_is_its_own_while_it_lives(parent: tuple[str, Path]) -> None:
    path, directory = parent
    home = CgroupHome.create({CGROUP_ENV: path})
    assert home is not None
    try:
        assert home.path.parent == directory
        assert home.path.stat().st_mode & 0o777 == 0o700  # the agent cannot open it to lock it
        agent = home.leaf("agent")
        assert agent is not None
        process, start = _sleeper_in(agent.path)

        assert sweep_orphaned_groups({CGROUP_ENV: path}) == []
        assert _running(process, start)
    finally:
        home.close()
    wait_until(lambda: not _running(process, start), timeout=60, what="close to kill the agent")
    process.wait(timeout=120)
    assert not home.path.exists()


def test_without_cgroup_kill_a_forking_group_is_still_ended(parent: tuple[str, Path]) -> None:
    # Kernels before 5.14 have no cgroup.kill: the group is frozen and killed process by
    # process. A shell that keeps forking must not outrun it.
    _, directory = parent
    group = directory / "forking"
    group.mkdir()
    forker = subprocess.Popen(
        Cgroup(group).join_argv(["/bin/sh", "-c", "while :; do sleep 600 & done"])
    )
    try:
        wait_until(lambda: len(Cgroup(group).pids()) > 20, what="the group to fill")

        _kill_each(group)

        wait_until(lambda: not Cgroup(group).pids(), timeout=60, what="the group to empty")
        assert forker.wait(timeout=120) == -9
    finally:
        Cgroup(group).kill()
        forker.wait(timeout=120)
