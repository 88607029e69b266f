"""Nothing of the agent outlives its supervisor, nor anything of a script its timeout.

A root supervisor runs the agent as `nobody`. The agent starts a background child (in its own
process group) and a daemon that leaves it as a daemon would: a new session, an empty
environment (so without the agent's tag) and a double fork (so its parent is gone before the
supervisor looks). All three ignore SIGTERM. Where the supervisor has a writable cgroup v2
hierarchy, the agent runs in a cgroup of its own, and:

- a supervisor killed outright (SIGKILL) leaves the group behind; the next `run` on this
  machine, or `reconcile`, kills it and removes it;
- the agent cannot move itself out of its group;
- a normal stop (SIGTERM, the agent ignoring it) ends every process of the group at the grace
  deadline;
- a script hook that times out takes its `setsid` grandchild with it.

Each test records its processes as (pid, start time), so that a reused pid is never taken for
one of them, and polls under a generous hang guard.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.actions.script import run_script
from otel_lifecycle_hooks.confinement import CGROUP_ENV, Cgroup, find_hierarchy
from otel_lifecycle_hooks.render import RenderedCommand
from otel_lifecycle_hooks.supervisor.processes import read_stat
from tests.supervisor.supervised import Workspace, recorder_hook, wait_until


def _writable_cgroup2() -> bool:
    """A cgroup v2 hierarchy (as mountinfo shows it) this process may create groups in."""
    hierarchy = find_hierarchy()
    return hierarchy is not None and os.access(hierarchy.mount, os.W_OK)


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
    "daemon = subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
    "start_new_session=True, env={})\n"
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
def cgroup_parent() -> Iterator[str]:
    """A parent cgroup of the test's own (named by the variable), so that no other supervisor
    on the machine sweeps the groups under it: only the runs a test starts do."""
    hierarchy = find_hierarchy()
    assert hierarchy is not None
    path = f"{hierarchy.root.rstrip('/')}/olh-test-{os.getpid()}-{next(_parents)}"
    yield path
    directory = hierarchy.directory(path)
    if directory is not None and directory.exists():
        for group in sorted(directory.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if group.is_dir():
                Cgroup(group).remove()
        directory.rmdir()


_parents = itertools.count()


@pytest.fixture
def space(shared_dir: Path, cgroup_parent: str) -> Iterator[Workspace]:
    workspace = Workspace(shared_dir)
    workspace.env[CGROUP_ENV] = cgroup_parent
    (shared_dir / "agent_program.py").write_text(AGENT)
    yield workspace
    workspace.cleanup()
    _kill_recorded(shared_dir)


def _kill_recorded(directory: Path) -> None:
    """Whatever the agent recorded and is still alive: killed by pid (the test's cleanup)."""
    for name in PROCESS_NAMES:
        for path in directory.rglob(f"{name}.pid"):
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.kill(int(path.read_text()), signal.SIGKILL)


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


def _killed_supervisors_processes(space: Workspace, directory: Path) -> dict[str, tuple[int, int]]:
    """The agent's processes once its supervisor was killed outright (SIGKILL)."""
    run = space.start(None, _agent_command(directory), "--user", UNPRIVILEGED)
    wait_until((directory / "ready").exists, what="the agent to start its child and daemon")
    processes = _recorded_processes(directory)
    run.signal(signal.SIGKILL)
    run.wait(timeout=120)
    # The kernel ends the agent itself (its parent-death signal); its child and daemon, which
    # no one tells, are what is left of the session.
    return processes


def test_a_killed_supervisors_agent_tree_is_ended_by_the_next_run(
    space: Workspace, shared_dir: Path
) -> None:
    processes = _killed_supervisors_processes(space, shared_dir / "first")

    second = shared_dir / "second"
    rerun = space.start(None, _agent_command(second), "--user", UNPRIVILEGED)
    wait_until((second / "ready").exists, what="the next run's agent to start")

    wait_until(
        lambda: not _still_running(processes), timeout=30, what="the killed session's processes"
    )
    assert rerun.process.poll() is None, rerun.stderr  # the next run itself goes on


def test_a_killed_supervisors_agent_tree_is_ended_by_reconcile(
    space: Workspace, shared_dir: Path
) -> None:
    processes = _killed_supervisors_processes(space, shared_dir / "first")
    # No script hook: the sweep is reconcile's own, not a side effect of running a script.
    template = space.template(recorder_hook("http://127.0.0.1:9/events", ["session-end"]))

    reconcile = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "reconcile", "--template", str(template)],
        check=False,
        env=space.env,
        cwd=shared_dir,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert reconcile.returncode == 0, reconcile.stderr
    wait_until(
        lambda: not _still_running(processes), timeout=30, what="the killed session's processes"
    )


def test_a_stop_ends_every_process_of_the_agents_group(space: Workspace, shared_dir: Path) -> None:
    directory = shared_dir / "agent"
    run = space.start(
        None, _agent_command(directory), "--user", UNPRIVILEGED, "--grace-period", "2s"
    )
    wait_until((directory / "ready").exists, what="the agent to start its child and daemon")
    processes = _recorded_processes(directory)

    run.signal(signal.SIGTERM)
    run.wait(timeout=60)

    wait_until(lambda: not _still_running(processes), timeout=60, what="the agent's processes")


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
            lambda: getattr(read_stat(pid), "state", "Z") == "Z" or read_stat(pid) is None,
            timeout=30,
            what="the timed-out script's setsid grandchild to end",
        )
    finally:
        if pid_file.exists():
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


# An agent that tries to leave its cgroup for the hierarchy's root and for its own group's
# parent, and records what it was told; then its daemon (same plan as AGENT) is started.
ESCAPING_AGENT = r"""
import json, os, sys, time

directory = sys.argv[1]
mount = own = None
with open("/proc/self/mountinfo") as mountinfo:
    for line in mountinfo:
        if " - cgroup2 " in line:
            mount = line.split(" - ")[0].split()[4]
with open("/proc/self/cgroup") as cgroup:
    own = next(line[3:].strip() for line in cgroup if line.startswith("0::"))
tried = {}
for target in (mount, mount + os.path.dirname(own), mount + os.path.dirname(os.path.dirname(own))):
    try:
        with open(os.path.join(target, "cgroup.procs"), "w") as procs:
            procs.write("0")
        tried[target] = "moved"
    except OSError as exc:
        tried[target] = exc.strerror
with open(os.path.join(directory, "tried.json"), "w") as handle:
    json.dump(tried, handle)
with open(os.path.join(directory, "agent.pid"), "w") as handle:
    handle.write(str(os.getpid()))
while True:
    time.sleep(1)
"""


def _pid_in(path: Path) -> int | None:
    """The pid a file holds, once it is written whole."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _cgroup_of(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup") as cgroup:
        return next(line[3:].strip() for line in cgroup if line.startswith("0::"))


def test_the_agent_cannot_move_itself_out_of_its_cgroup(
    space: Workspace, shared_dir: Path, cgroup_parent: str
) -> None:
    assert SYSTEM_PYTHON is not None
    program = shared_dir / "escaping_agent.py"
    program.write_text(ESCAPING_AGENT)
    directory = shared_dir / "escape"
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    run = space.start(None, [SYSTEM_PYTHON, str(program), str(directory)], "--user", UNPRIVILEGED)
    tried_file = directory / "tried.json"
    agent_pid = wait_until(
        lambda: _pid_in(directory / "agent.pid"), what="the agent to try to escape"
    )

    tried = json.loads(tried_file.read_text())
    assert tried and "moved" not in tried.values(), tried
    group = _cgroup_of(agent_pid)
    assert group.endswith("/agent"), group
    assert group.startswith(f"{cgroup_parent}/run-{run.process.pid}-"), group

    run.signal(signal.SIGTERM)
    run.wait(timeout=60)
    wait_until(lambda: read_stat(agent_pid) is None, timeout=60, what="the agent to end")


def test_confinement_turned_off_leaves_the_agent_in_the_supervisors_cgroup(
    space: Workspace, shared_dir: Path
) -> None:
    directory = shared_dir / "unconfined"
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    agent = ["/bin/sh", "-c", 'echo "$$" > "$1/agent.pid"; exec sleep 600', "agent", str(directory)]
    run = space.start(None, agent, "--user", UNPRIVILEGED, env={CGROUP_ENV: "off"})
    agent_pid = wait_until(lambda: _pid_in(directory / "agent.pid"), what="the agent to start")

    assert _cgroup_of(agent_pid) == _cgroup_of(run.process.pid)

    run.signal(signal.SIGTERM)
    run.wait(timeout=60)
