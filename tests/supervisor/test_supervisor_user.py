"""`run --user NAME` (or the template's `user:`) as root: the agent, its script hooks and the
legacy hook scripts run as that user with its HOME, and the agent can still reach the event
socket."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervisor.supervised import (
    Workspace,
    recorded_events,
    recorder_hook,
    script_hook,
    wait_until,
)
from tests.support.target_server import TargetServer

pytestmark = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="running as another user needs root"
)

# The agent, for an interpreter outside any private directory: it records who it runs as, then
# speaks the socket protocol itself to report a finished task, and waits to be stopped.
AGENT = r"""
import json, os, socket, sys, time
with open(sys.argv[1], "w") as handle:
    json.dump({"uid": os.getuid(), "HOME": os.environ.get("HOME")}, handle)
line = {"v": 1, "kind": "status", "status": "task_completed", "message": "done as a user"}
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
    connection.connect(os.environ["OTEL_LIFECYCLE_HOOKS_SOCKET"])
    connection.sendall(json.dumps(line).encode() + b"\n")
time.sleep(60)
"""


@pytest.fixture
def unprivileged_user() -> Iterator[pwd.struct_passwd]:
    name = f"olh-test-{os.getpid()}"
    created = subprocess.run(
        ["useradd", "--create-home", "--shell", "/bin/sh", name],
        check=False,
        capture_output=True,
        text=True,
    )
    if created.returncode != 0:
        pytest.skip(f"useradd failed: {created.stderr.strip()}")
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", "-r", name], check=False, capture_output=True)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    # tmp_path sits below a root-only directory; the user needs a place of its own to write.
    directory = Path(tempfile.mkdtemp(prefix="olh-user-"))
    directory.chmod(0o777)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("how", ["flag", "template"])
def test_the_agent_and_its_hooks_run_as_the_named_user(
    unprivileged_user: pwd.struct_passwd,
    shared_dir: Path,
    target_server: TargetServer,
    how: str,
    tmp_path: Path,
) -> None:
    template_dir = tmp_path
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 for the unprivileged agent")
    space = Workspace(shared_dir)
    try:
        user = unprivileged_user.pw_name
        agent = shared_dir / "user_agent.py"
        agent.write_text(AGENT)
        agent_seen = shared_dir / "agent.json"
        hook_seen = shared_dir / "hook.txt"
        legacy = shared_dir / "legacy-hooks" / "pre-start"
        legacy.parent.mkdir()
        legacy.write_text(f'#!/bin/sh\necho "legacy $(id -u) $HOME" >> "{hook_seen}"\n')
        legacy.chmod(0o755)
        record_identity = ["sh", "-c", f'echo "$0 $(id -u) $HOME" >> "{hook_seen}"', "script"]
        template = space.template(
            recorder_hook(target_server.url("/events"), ["task-completed"])
            + script_hook("whoami", ["post-start"], record_identity, blocking="true"),
            extra=f"user: {user}\n" if how == "template" else "",
        )
        # The template stays root's alone: in the shared 0777 folder any user could replace
        # it, and a root run for another user's agent refuses such a template.
        template = Path(shutil.move(template, template_dir / template.name))
        options = ["--user", user] if how == "flag" else []
        run = space.start(
            template,
            [python, str(agent), str(agent_seen)],
            *options,
            env={"SCION_HOOKS_DIR": str(legacy.parent)},
        )
        wait_until(
            lambda: "task-completed" in recorded_events(target_server), what="the agent's status"
        )
        run.signal(signal.SIGTERM)
        assert run.wait(timeout=120) == 128 + signal.SIGTERM, run.stderr

        home, uid = unprivileged_user.pw_dir, unprivileged_user.pw_uid
        assert agent_seen.read_text() == f'{{"uid": {uid}, "HOME": "{home}"}}'
        assert hook_seen.read_text().splitlines() == [
            f"legacy {uid} {home}",
            f"script {uid} {home}",
        ]
    finally:
        space.cleanup()


def test_an_unknown_user_fails_the_run_before_the_agent_starts(
    workspace: Workspace, target_server: TargetServer
) -> None:
    started = workspace.root / "agent-started"
    template = workspace.template(
        recorder_hook(target_server.url("/events"), ["error", "session-end"])
    )
    run = workspace.start(
        template, workspace.agent_command(touch=str(started)), "--user", "olh-no-such-user"
    )

    assert run.wait(timeout=120) == 1, run.stderr
    assert "olh-no-such-user" in run.stderr
    assert not started.exists()
    assert recorded_events(target_server) == ["error", "session-end"]
