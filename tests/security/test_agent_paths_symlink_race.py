"""The symlink race on what a root supervisor makes for its agent: the event socket and its
directory, the Claude Code settings file and the pointer file.

A process of the agent's user (`nobody`) loops, swapping a symbolic link to a root-only
canary file in over every entry it can rename in every directory where the supervisor
creates something for the agent, while the supervisor, as root with the agent's owner, opens
session after session. Each time the canary must keep its owner, mode and text: a single
change is a win (with `/etc/shadow` as the target, that is root).

The 200 starts go through the code `run` opens a session's routes with (`EventServer` and
`SessionChannel.open`, one in eight with the HTTP route so that the settings file is
written too); a few
full `otel-lifecycle-hooks run --user nobody` starts run beside the same attacker.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from otel_lifecycle_hooks.supervisor.channel import SessionChannel
from otel_lifecycle_hooks.supervisor.server import EventServer
from tests.supervisor.supervised import Workspace

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act for another user")

NOBODY = (65534, 65534)
SESSION_STARTS = 200
HTTP_EVERY = 8
FULL_RUNS = 4
CANARY_TEXT = "root's secret\n"

# The attacker, as `nobody`: argv is the canary, then directories to watch; a directory named
# with a trailing "/*" is watched through every `olh-*` directory below it (socket dirs). It
# prints "swapped" after its first swap; on SIGTERM, how many links it swapped in.
ATTACKER = r"""
import os, signal, sys
canary, *watched = sys.argv[1:]
swaps = 0
def done(*_):
    print(swaps, flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, done)
print("ready", flush=True)
lure_name = f".lure-{os.getpid()}"
while True:
    folders = []
    for entry in watched:
        if entry.endswith("/*"):
            base = entry[:-2]
            try:
                folders += [os.path.join(base, n) for n in os.listdir(base) if n.startswith("olh-")]
            except OSError:
                pass
        else:
            folders.append(entry)
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if name.startswith(".lure-"):
                continue
            lure = os.path.join(folder, lure_name)
            try:
                os.symlink(canary, lure)
                os.rename(lure, os.path.join(folder, name))
                swaps += 1
                if swaps == 1:
                    print("swapped", flush=True)
            except OSError:
                try:
                    os.unlink(lure)
                except OSError:
                    pass
"""


@dataclass
class Canary:
    """A root-only file (0600, in a 0700 directory of root's) the attacker aims its links at."""

    path: Path

    def changed(self) -> bool:
        """Whether anything of the file changed; puts it back as it was, to count the next."""
        info = os.stat(self.path)
        text = self.path.read_text()
        won = (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode), text) != (
            0,
            0,
            0o600,
            CANARY_TEXT,
        )
        if won:
            os.chown(self.path, 0, 0)
            os.chmod(self.path, 0o600)
            self.path.write_text(CANARY_TEXT)
        return won


@dataclass
class Stage:
    """Where the sessions make their files: a sticky world-writable socket base (as /tmp is)
    and the agent's runtime directory, which the agent owns."""

    socket_base: Path
    runtime: Path
    canary: Canary


@pytest.fixture
def stage() -> Iterator[Stage]:
    # pytest's tmp_path is root-only; the agent must reach these.
    top = Path(tempfile.mkdtemp(prefix="olh-race-"))
    secret_dir = Path(tempfile.mkdtemp(prefix="olh-race-secret-"))
    try:
        top.chmod(0o755)
        socket_base = top / "tmp"
        socket_base.mkdir()
        socket_base.chmod(0o1777)
        runtime = top / "run-user"
        runtime.mkdir(mode=0o700)
        os.chown(runtime, *NOBODY)
        canary = secret_dir / "canary"
        canary.write_text(CANARY_TEXT)
        canary.chmod(0o600)
        yield Stage(socket_base, runtime, Canary(canary))
    finally:
        shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(secret_dir, ignore_errors=True)


def start_attacker(stage: Stage) -> subprocess.Popen[str]:
    # An interpreter `nobody` can run: this one may sit below a directory only root enters.
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 for the attacker running as nobody")
    watched = [f"{stage.socket_base}/*", str(stage.runtime / "otel-lifecycle-hooks")]
    attacker = subprocess.Popen(
        [python, "-c", ATTACKER, str(stage.canary.path), *watched],
        user=NOBODY[0],
        group=NOBODY[1],
        extra_groups=[],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    # The sessions start only once it is at work: on a busy machine its interpreter may take
    # longer to start than every session start together.
    assert attacker.stdout is not None
    assert attacker.stdout.readline() == "ready\n", "the attacker did not start"
    return attacker


def has_swapped(attacker: subprocess.Popen[str]) -> bool:
    """Whether the attacker has said it swapped a link in (without waiting for it)."""
    assert attacker.stdout is not None
    ready, _, _ = select.select([attacker.stdout], [], [], 0)
    return bool(ready) and attacker.stdout.readline() == "swapped\n"


def stop_attacker(attacker: subprocess.Popen[str]) -> int:
    """Stops the attacker; how many links it swapped in."""
    attacker.send_signal(signal.SIGTERM)
    out, _ = attacker.communicate(timeout=120)
    return int(out.split()[-1] if out.split() else 0)


def test_no_session_start_hands_a_root_file_to_the_agent_through_a_planted_link(
    stage: Stage,
) -> None:
    agent_env = {"HOME": "/nonexistent", "XDG_RUNTIME_DIR": str(stage.runtime)}
    attacker = start_attacker(stage)
    wins = 0
    starts = 0
    swapped = False
    # At least SESSION_STARTS starts, and on until the attacker has swapped a link in (on a
    # busy machine it may get no time during the first ones); a hang guard bounds the rest.
    deadline = time.monotonic() + 300
    try:
        while starts < SESSION_STARTS or not swapped:
            assert time.monotonic() < deadline, "the attacker never swapped a link in"
            start = starts
            starts += 1
            # Closing the HTTP route takes a server's poll interval: one start in
            # HTTP_EVERY opens it, and so writes the Claude Code settings file too.
            http = start % HTTP_EVERY == 0
            server = EventServer(lambda _: None, directory=str(stage.socket_base), owner=NOBODY)
            channel = SessionChannel(lambda _: None, owner=NOBODY, http=http)
            try:
                variables = channel.open(server.path, agent_env)
            finally:
                channel.close()
                server.close()
            wins += stage.canary.changed()
            assert ("LIFECYCLE_HOOKS_CLAUDE_SETTINGS" in variables) == http
            swapped = swapped or has_swapped(attacker)
    finally:
        swaps = stop_attacker(attacker)
    # The attacker was at work (the pointer files are in its own directory).
    assert swaps > 0
    assert wins == 0, f"{wins} of {starts} session starts handed the canary over"


def test_full_runs_as_root_for_nobody_hand_no_root_file_over(stage: Stage, tmp_path: Path) -> None:
    space = Workspace(tmp_path)
    env = {
        "TMPDIR": str(stage.socket_base),
        "XDG_RUNTIME_DIR": str(stage.runtime),
        "LIFECYCLE_HOOKS_HTTP": "1",
    }
    # The agent lives until the attacker has swapped a link in over its session's pointer
    # file: every run is raced, not only those the attacker happened to catch.
    pointers = stage.runtime / "otel-lifecycle-hooks"
    wait_for_a_swap = (
        'until find "$1" -maxdepth 1 -type l -name "supervisor-*" | grep -q .; do sleep 0.01; done'
    )
    agent = ["/bin/sh", "-c", wait_for_a_swap, "agent", str(pointers)]
    attacker = start_attacker(stage)
    wins = 0
    try:
        for _ in range(FULL_RUNS):
            # A link the attacker left from the run before must not stand for this run's.
            for stale in pointers.glob("supervisor-*") if pointers.exists() else ():
                stale.unlink(missing_ok=True)
            run = space.start(None, agent, "--user", "nobody", env=env)
            assert run.wait(timeout=60) == 0, run.stderr
            wins += stage.canary.changed()
    finally:
        swaps = stop_attacker(attacker)
        space.cleanup()
    assert swaps > 0
    assert wins == 0, f"{wins} of {FULL_RUNS} runs handed the canary over"


def test_the_agent_can_use_the_socket_but_change_nothing_beside_it(stage: Stage) -> None:
    """The layout that leaves the race nothing to swap: the directory is root's (0711), the
    socket the agent's (0600), the settings file root's and only readable (0644)."""
    server = EventServer(lambda _: None, directory=str(stage.socket_base), owner=NOBODY)
    channel = SessionChannel(lambda _: None, owner=NOBODY, http=True)
    try:
        variables = channel.open(server.path, {"HOME": "/nonexistent"})
        socket_dir = Path(server.path).parent
        settings = Path(variables["LIFECYCLE_HOOKS_CLAUDE_SETTINGS"])
        owner_and_mode = {
            path: (os.lstat(path).st_uid, stat.S_IMODE(os.lstat(path).st_mode))
            for path in (socket_dir, Path(server.path), settings)
        }
        assert owner_and_mode == {
            socket_dir: (0, 0o711),
            Path(server.path): (NOBODY[0], 0o600),
            settings: (0, 0o644),
        }
        assert settings.parent == socket_dir
    finally:
        channel.close()
        server.close()
    assert not socket_dir.exists()
