"""Fixtures for the attack tests: a real supervisor (`run` as a subprocess), a hostile agent
that writes whatever bytes it is told to the event socket, the template's real target on
127.0.0.1 and an attacker's server on 127.0.0.2."""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.supervisor.supervised import Workspace
from tests.support.target_server import TargetServer

# A hostile agent. Its plan (a JSON file, first argument), in order:
#   sends       base64 payloads; each is written to the event socket on a connection of its own
#   hook        [dialect, stdin text] pairs fed through `otel-lifecycle-hooks hook --dialect`
#   ready_file  created once the steps above are done
# then it waits to be stopped, and exits 0 on SIGTERM.
HOSTILE_AGENT = r"""
import base64, json, os, signal, socket, subprocess, sys, time

signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
with open(sys.argv[1]) as plan_file:
    plan = json.load(plan_file)
path = os.environ["OTEL_LIFECYCLE_HOOKS_SOCKET"]
for payload in plan.get("sends", []):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(path)
        connection.sendall(base64.b64decode(payload))
        connection.shutdown(socket.SHUT_WR)
for dialect, stdin in plan.get("hook", []):
    subprocess.run([sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", dialect],
                   input=stdin.encode("utf-8", "surrogatepass"), check=False, timeout=120)
if plan.get("ready_file"):
    with open(plan["ready_file"], "w") as handle:
        handle.write("ready")
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.05)
"""


def wire_line(obj: Any) -> bytes:
    """One socket line, as a hostile client may write it (lone surrogates kept as escapes)."""
    return json.dumps(obj).encode() + b"\n"


def tool_start_flood(count: int) -> bytes:
    """`count` tool-start lines, each naming its own tool (t0, t1, ...)."""
    return b"".join(
        wire_line(
            {"v": 1, "kind": "event", "event": "tool-start", "fields": {"TOOL_NAME": f"t{n}"}}
        )
        for n in range(count)
    )


class HostileWorkspace(Workspace):
    """A supervisor workspace whose agent writes what the test tells it to."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.hostile = root / "hostile_agent.py"
        self.hostile.write_text(HOSTILE_AGENT)
        self._plans = 0

    def hostile_command(
        self,
        sends: Sequence[bytes] = (),
        hook: Sequence[tuple[str, str]] = (),
        ready_file: Path | None = None,
    ) -> list[str]:
        plan = {
            "sends": [base64.b64encode(payload).decode() for payload in sends],
            "hook": [list(pair) for pair in hook],
            "ready_file": str(ready_file) if ready_file else "",
        }
        self._plans += 1
        plan_path = self.root / f"hostile-plan-{self._plans}.json"
        plan_path.write_text(json.dumps(plan))
        return [sys.executable, str(self.hostile), str(plan_path)]


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[HostileWorkspace]:
    space = HostileWorkspace(tmp_path)
    yield space
    space.cleanup()


@pytest.fixture
def agent_dir() -> Iterator[Path]:
    """A directory the agent (nobody) owns, on a path it can reach (pytest's own temporary
    directories are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="olh-agent-"))
    nobody = pwd.getpwnam("nobody")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def markers() -> Iterator[Path]:
    """Where an attack's code leaves its marker if it ran, whoever it ran as (sticky, 1777)."""
    path = Path(tempfile.mkdtemp(prefix="olh-markers-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def target() -> Iterator[TargetServer]:
    """The template's own endpoint."""
    with TargetServer() as server:
        yield server


@pytest.fixture
def attacker() -> Iterator[TargetServer]:
    """Where a hostile agent would like the hooks to go: another loopback address."""
    with TargetServer(host="127.0.0.2") as server:
        yield server
