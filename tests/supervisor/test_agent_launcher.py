"""The launcher the agent is started through: util-linux's `setpriv --pdeathsig KILL` and
`/bin/sh` where that setpriv is there, a second interpreter otherwise. Either way the agent
gets SIGKILL as its parent-death signal, keeps its own argv, never runs once its supervisor
is gone, and dies with a supervisor killed outright. Real processes throughout."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from otel_lifecycle_hooks.supervisor.processes import (
    die_with_parent,
    read_stat,
    setpriv_launcher,
)
from tests.supervisor.supervised import wait_until

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"
)

HAS_SETPRIV = setpriv_launcher() is not None
LAUNCHERS = [
    pytest.param(True, id="setpriv", marks=pytest.mark.skipif(
        not HAS_SETPRIV, reason="no setpriv with --pdeathsig here")),
    pytest.param(False, id="python"),
]  # fmt: skip

# What the agent reports of itself: its parent-death signal, argv and parent.
REPORTER = r"""
import ctypes, json, os, sys
signal = ctypes.c_int(0)
ctypes.CDLL(None, use_errno=True).prctl(2, ctypes.byref(signal), 0, 0, 0)  # PR_GET_PDEATHSIG
with open(sys.argv[1], "w") as out:
    with open("/proc/self/cmdline", "rb") as cmdline:
        argv = cmdline.read().decode().split("\0")[:-1]
    json.dump({"pdeathsig": signal.value, "argv": argv, "ppid": os.getppid()}, out)
"""


@pytest.mark.parametrize("setpriv", LAUNCHERS)
def test_the_agent_runs_with_sigkill_as_its_parent_death_signal_and_its_own_argv(
    tmp_path: Path, setpriv: bool
) -> None:
    report = tmp_path / "report.json"
    # A program found on PATH, named as the agent's command names it.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "olh-agent").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    command = ["olh-agent", "-c", REPORTER, str(report), "an argument"]
    argv, identity = die_with_parent(command, env, setpriv=setpriv)
    assert argv != command and identity == {}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(report.read_text())
    assert seen["pdeathsig"] == signal.SIGKILL
    assert seen["argv"] == command
    assert seen["ppid"] == os.getpid()  # the launcher exec'd the agent: no process between


@pytest.mark.parametrize("setpriv", LAUNCHERS)
def test_the_agent_is_not_started_once_its_supervisor_is_gone(
    tmp_path: Path, setpriv: bool
) -> None:
    """The launcher checks its parent after setting the signal: a supervisor that died before
    (the launcher is now someone else's child) would never send it."""
    started = tmp_path / "started"
    argv, _ = die_with_parent(["touch", str(started)], os.environ, setpriv=setpriv)
    supervisor = str(os.getpid())
    assert argv.count(supervisor) == 1
    # As if started by a supervisor that has since died: its pid is not the parent's.
    argv[argv.index(supervisor)] = str(os.getpid() + 1_000_000)
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    assert done.returncode == 1
    assert not started.exists()


# A supervisor in miniature: starts the agent through the launcher, says its pid, waits.
SUPERVISOR = r"""
import os, subprocess, sys, time
from otel_lifecycle_hooks.supervisor.processes import die_with_parent
argv, _ = die_with_parent(
    [sys.executable, "-c", "import time; time.sleep(60)"], os.environ,
    setpriv=sys.argv[1] == "setpriv",
)
agent = subprocess.Popen(argv, start_new_session=True)
print(agent.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("setpriv", LAUNCHERS)
def test_the_agent_dies_with_a_supervisor_killed_outright(setpriv: bool) -> None:
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, "setpriv" if setpriv else "python"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    agent_pid = 0
    try:
        assert supervisor.stdout is not None
        agent_pid = int(supervisor.stdout.readline())
        wait_until(
            lambda: "sleep" in Path(f"/proc/{agent_pid}/cmdline").read_text(errors="replace"),
            what="the agent to be exec'd",
        )
        supervisor.kill()
        supervisor.wait(timeout=120)

        def gone() -> bool:
            info = read_stat(agent_pid)
            return info is None or info.state == "Z"

        wait_until(gone, timeout=60, what="the agent to die with its supervisor")
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(timeout=120)
        if agent_pid and read_stat(agent_pid) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent_pid, signal.SIGKILL)


def test_a_setpriv_without_the_option_or_absent_is_not_used(tmp_path: Path) -> None:
    older = tmp_path / "setpriv"
    older.write_text("#!/bin/sh\necho 'setpriv from util-linux 2.31: --nnp --reuid' >&2\n")
    older.chmod(0o755)
    assert setpriv_launcher([str(tmp_path / "absent"), str(older)]) is None
    newer = tmp_path / "setpriv-with-it"
    newer.write_bytes(b"\x7fELF ... --pdeathsig <keep|clear|<signal>> ...")
    newer.chmod(0o755)
    assert setpriv_launcher([str(older), str(newer)]) == str(newer)
    newer.chmod(0o644)  # not executable
    assert setpriv_launcher([str(newer)]) is None


def test_a_missing_program_fails_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        die_with_parent(["olh-no-such-program"], {"PATH": str(tmp_path)})
