"""Nothing of the agent outlives its supervisor, nor anything of a script its timeout.

A root supervisor runs the agent as `nobody`. The agent starts a background child (in its own
process group) and a daemon that leaves it as a daemon would: a new session, an empty
environment (so without the agent's tag) and a double fork (so its parent is gone before the
supervisor looks). All three ignore SIGTERM. Where the supervisor has a writable cgroup v2
hierarchy, the agent runs in a cgroup of its own, and:

- a supervisor killed outright (SIGKILL) leaves the group behind; the next `run` on this
  machine kills it and removes it;
- a normal stop (SIGTERM, the agent ignoring it) ends every process of the group at the grace
  deadline;
- a script hook that times out takes its `setsid` grandchild with it.

Each test records its processes as (pid, start time), so that a reused pid is never taken for
one of them, and polls under a generous hang guard.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.actions.script import run_script
from otel_lifecycle_hooks.render import RenderedCommand
from otel_lifecycle_hooks.supervisor.processes import read_stat
from tests.supervisor.supervised import Workspace, wait_until


def _writable_cgroup2() -> bool:
    """A cgroup v2 hierarchy this process may create groups in (read from mountinfo)."""
    try:
        with open("/proc/self/mountinfo") as mountinfo:
            mounts = [line.split(" - ")[0].split()[4] for line in mountinfo if " - cgroup2 " in line]
    except OSError:
        return False
    return any(os.access(mount, os.W_OK) for mount in mounts)


SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root"),
    pytest.mark.skipif(not _writable_cgroup2(), reason="needs a writable cgroup v2 hierarchy"),
    pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no system python3 for the agent"),
]

UNPRIVILEGED = "nobody"

# The hostile agent (argv[1]: a directory it may write). It writes agent.pid, child.pid and
# daemon.pid, then ready, and waits, ignoring SIGTERM.
AGENT = r"""
import os, signal, subprocess, sys, time

directory = sys.argv[1]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sleeper = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


def write(name, text):
    with open(os.path.join(directory, name + ".tmp"), "w") as handle:
        handle.write(text)
    os.replace(os.path.join(directory, name + ".tmp"), os.path.join(directory, name))


write("agent.pid", str(os.getpid()))
child = subprocess.Popen([sys.executable, "-c", sleeper])
write("child.pid", str(child.pid))
daemonize = (
    "import subprocess, sys\n"
    "daemon = subprocess.Popen([sys.executable, '-c', sys.argv[1]], start_new_session=True, env={})\n"
    "open(sys.argv[2], 'w').write(str(daemon.pid))\n"
)
subprocess.run(
    [sys.executable, "-c", daemonize, sleeper, os.path.join(directory, "daemon.pid.tmp")],
    env={}, check=True,
)
os.replace(os.path.join(directory, "daemon.pid.tmp"), os.path.join(directory, "daemon.pid"))
write("ready", "ready")
while True:
    time.sleep(1)
"""

PROCESS_NAMES = ("agent", "child", "daemon")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the agent's user can write (pytest's tmp_path is below a root-only one)."""
    directory = Path(tempfile.mkdtemp(prefix="olh-outlive-"))
    directory.chmod(0o777)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def space(shared_dir: Path) -> Iterator[Workspace]:
    workspace = Workspace(shared_dir)
    (shared_dir / "agent_program.py").write_text(AGENT)
    yield workspace
    workspace.cleanup()
    _kill_recorded(shared_dir)


def _kill_recorded(directory: Path) -> None:
    """Whatever the agent recorded and is still alive: killed by pid (the test's cleanup)."""
    for name in PROCESS_NAMES:
        for path in directory.rglob(f"{name}.pid"):
            try:
                os.kill(int(path.read_text()), signal.SIGKILL)
            except (ValueError, ProcessLookupError, PermissionError):
                pass


def _agent_command(directory: Path) -> list[str]:
    assert SYSTEM_PYTHON is not None
    directory.mkdir(mode=0o777, exist_ok=True)
    directory.chmod(0o777)
    return [SYSTEM_PYTHON, str(directory.parent / "agent_program.py"), str(directory)]


def _recorded_processes(directory: Path) -> dict[str, tuple[int, int]]:
    """The agent's processes as (pid, start time), each seen alive once."""
    found = {}
    for name in PROCESS_NAMES:
        pid = int((directory / f"{name}.pid").read_text())
        info = read_stat(pid)
        assert info is not None and info.state != "Z", f"the agent's {name} is not running"
        found[name] = (pid, info.start)
    return found


def _still_running(processes: dict[str, tuple[int, int]]) -> list[str]:
    """The names of those of `processes` that still run (zombies have ended)."""
    running = []
    for name, (pid, start) in processes.items():
        info = read_stat(pid)
        if info is not None and info.start == start and info.state != "Z":
            running.append(name)
    return running


def test_a_killed_supervisors_agent_tree_is_ended_by_the_next_run(
    space: Workspace, shared_dir: Path
) -> None:
    first = shared_dir / "first"
    run = space.start(None, _agent_command(first), "--user", UNPRIVILEGED)
    wait_until((first / "ready").exists, what="the agent to start its child and daemon")
    processes = _recorded_processes(first)
    assert processes["daemon"][0] != processes["agent"][0]

    run.signal(signal.SIGKILL)
    run.wait(timeout=30)
    # The kernel ends the agent itself (its parent-death signal); its child and daemon, which
    # no one tells, are what is left of the session.
    second = shared_dir / "second"
    rerun = space.start(None, _agent_command(second), "--user", UNPRIVILEGED)
    wait_until((second / "ready").exists, what="the next run's agent to start")

    wait_until(
        lambda: not _still_running(processes), timeout=30, what="the killed session's processes"
    )
    assert rerun.process.poll() is None, rerun.stderr  # the next run itself goes on


def test_a_stop_ends_every_process_of_the_agents_group(space: Workspace, shared_dir: Path) -> None:
    directory = shared_dir / "agent"
    run = space.start(
        None, _agent_command(directory), "--user", UNPRIVILEGED, "--grace-period", "2s"
    )
    wait_until((directory / "ready").exists, what="the agent to start its child and daemon")
    processes = _recorded_processes(directory)

    run.signal(signal.SIGTERM)
    run.wait(timeout=60)

    wait_until(lambda: not _still_running(processes), timeout=30, what="the agent's processes")


def test_a_timed_out_scripts_setsid_grandchild_is_ended(shared_dir: Path) -> None:
    pid_file = shared_dir / "grandchild.pid"
    # The grandchild leaves the script's session at once; the script then outlives its timeout.
    script = 'setsid sleep 600 & echo "$!" > "$1"; sleep 600'
    command = RenderedCommand(("/bin/sh", "-c", script, "script", str(pid_file)))
    try:
        outcome = run_script(command, 1.0, user=UNPRIVILEGED, kill_grace=0.5)

        assert outcome.result.kind == "timeout", outcome.result
        pid = int(wait_until(pid_file.read_text, what="the grandchild's pid"))
        wait_until(
            lambda: getattr(read_stat(pid), "state", "Z") == "Z"
            or read_stat(pid) is None,
            timeout=30,
            what="the timed-out script's setsid grandchild to end",
        )
    finally:
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ValueError, ProcessLookupError):
                pass

