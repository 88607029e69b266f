"""The lock file a supervisor holds while its session lives (the proof, for the next run in
another pid namespace, that it is gone) is out of its agent's reach.

The supervisor runs as root with `--user nobody`; its home is on a path the agent can
traverse. The agent, told where its session's lock file is, tries what would let it forge the
proof (take or replace the file, plant one beside it, move the folder) or hold it to keep a
dead session from recovery: every attempt is refused, and the supervisor still holds it."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.supervisor.recovery import session_lock_dir, session_lock_path
from tests.fleet.fleet import body, deliveries
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.target_server import TargetServer

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: the supervisor runs as root, the agent as nobody"
)

SYSTEM_PYTHON = "/usr/bin/python3"  # the agent's own interpreter: nobody cannot reach the venv

# Waits for the lock file's path, tries each attack, writes what happened, exits 0.
AGENT = r"""
import fcntl, json, os, sys, time
go, out = sys.argv[1], sys.argv[2]
while not os.path.exists(go):
    time.sleep(0.05)
path = open(go).read()
folder = os.path.dirname(path)
tried = {}
def attempt(name, action):
    try:
        action()
        tried[name] = "done"
    except OSError as exc:
        tried[name] = type(exc).__name__
def take():
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
attempt("list", lambda: os.listdir(folder))
attempt("take", take)
attempt("unlink", lambda: os.unlink(path))
attempt("plant", lambda: os.close(os.open(path + ".new", os.O_CREAT | os.O_WRONLY, 0o600)))
attempt("replace", lambda: os.rename(path + ".new", path))
attempt("move", lambda: os.rename(folder, folder + ".old"))
attempt("move_parent", lambda: os.rename(os.path.dirname(folder), os.path.dirname(folder) + "x"))
open(out + ".tmp", "w").write(json.dumps(tried))
os.rename(out + ".tmp", out)
"""


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A folder on a path the agent (nobody) can traverse, owned by root."""
    path = Path(tempfile.mkdtemp(prefix="olh-lock-"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_agent_can_neither_forge_nor_hold_its_supervisors_session_lock(
    tmp_path: Path, reachable: Path
) -> None:
    workspace = Workspace(tmp_path)
    home = reachable / "home"
    home.mkdir(mode=0o755)
    workspace.env["HOME"] = str(home)  # the supervisor's: its lock folder is under it
    agent_dir = reachable / "agent"
    agent_dir.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(agent_dir, nobody.pw_uid, nobody.pw_gid)
    program = agent_dir / "agent.py"
    program.write_text(AGENT)
    program.chmod(0o644)
    go, out = agent_dir / "go", agent_dir / "tried.json"
    try:
        with TargetServer() as receiver:
            template = workspace.template(
                "  - name: register\n"
                "    on: [post-start]\n"
                "    blocking: true\n"
                f'    action: {{type: http, url: "{receiver.url("/register")}",'
                ' body: \'{"session": "${SESSION_ID}"}\'}\n'
            )
            run = workspace.start(
                template, [SYSTEM_PYTHON, str(program), str(go), str(out)], "--user", "nobody"
            )
            wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
            session = body(deliveries(receiver, "/register")[0])["session"]
            lock = session_lock_path(session_lock_dir(workspace.env), session)
            wait_until(lock.exists, what="the supervisor's lock file")
            go.write_text(str(lock))
            wait_until(out.exists, what="the agent's attempts")
            tried = json.loads(out.read_text())
            assert run.wait(timeout=60) == 0, run.stderr
    finally:
        workspace.cleanup()
    refused = dict.fromkeys(
        ("list", "take", "unlink", "plant", "replace", "move", "move_parent"), "PermissionError"
    )
    assert tried == refused
    folder = lock.parent
    assert (folder.stat().st_uid, folder.stat().st_mode & 0o777) == (0, 0o700)
