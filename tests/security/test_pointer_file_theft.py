"""Another process of the agent's user rewrites a session's pointer file to name a socket of
its own: the session's `hook` and `status` calls, which find their supervisor through that
file (their harness passes on no variable of ours), must not deliver a single event to it.

A real `otel-lifecycle-hooks run`; its agent waits until the thief has rewritten the pointer
file, then runs `hook --dialect claude` and `status` with the socket variables removed. Each
call is refused and says so ("not delivered", and why); the thief's socket gets no line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harnesses.session import REPO_ROOT
from tests.supervisor.supervised import Workspace, recorded, recorder_hook, wait_until
from tests.support.target_server import TargetServer

CALLS = 12

# The agent: waits for the go file, then runs CALLS hook calls (and one status) without our
# socket variables, as a harness that strips them would; writes each call's stderr, as JSON
# lines, to the report file, then waits to be stopped.
AGENT = r"""
import json, os, subprocess, sys, time
go, report, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = {k: v for k, v in os.environ.items() if not k.endswith("LIFECYCLE_HOOKS_SOCKET")}
while not os.path.exists(go):
    time.sleep(0.02)
cli = [sys.executable, "-m", "otel_lifecycle_hooks"]
results = []
for number in range(calls):
    payload = {"session_id": "s-1", "transcript_path": "", "cwd": "/",
               "hook_event_name": "PreToolUse", "tool_name": f"Bash-{number}", "tool_input": {}}
    done = subprocess.run(cli + ["hook", "--dialect", "claude"], input=json.dumps(payload),
                          env=env, capture_output=True, text=True, timeout=60)
    results.append(done.stderr)
done = subprocess.run(cli + ["status", "blocked", "stolen?"], env=env, capture_output=True,
                      text=True, timeout=60)
results.append(done.stderr)
with open(report + ".tmp", "w") as handle:
    handle.write(json.dumps(results))
os.replace(report + ".tmp", report)
time.sleep(60)
"""


class Thief:
    """A Unix socket of another process of the same user, counting the lines it receives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[bytes] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(64)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            with connection:
                data = b""
                while chunk := connection.recv(65536):
                    data += chunk
                self.lines += [line for line in data.splitlines() if line.strip()]

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def thief(tmp_path: Path) -> Iterator[Thief]:
    server = Thief(tmp_path / "thief.sock")
    yield server
    server.close()


def test_a_rewritten_pointer_file_sends_no_event_to_another_socket(
    tmp_path: Path, thief: Thief
) -> None:
    space = Workspace(tmp_path)
    agent = tmp_path / "agent_waiting.py"
    agent.write_text(AGENT)
    go, report = tmp_path / "go", tmp_path / "report.json"
    command = [sys.executable, str(agent), str(go), str(report), str(CALLS)]
    try:
        space.start(None, command)
        pointer = wait_until(
            lambda: next(
                (space.home / ".local/state/otel-lifecycle-hooks/run").glob("supervisor-*.json"),
                None,
            ),
            what="the session's pointer file",
        )
        # The thief keeps everything but the socket, as a rewrite that wants to go unnoticed.
        stolen = json.loads(pointer.read_text()) | {"socket": str(thief.path)}
        rewritten = pointer.with_name(".rewrite")
        rewritten.write_text(json.dumps(stolen))
        rewritten.chmod(0o600)
        os.replace(rewritten, pointer)
        go.write_text("go")
        results = json.loads(
            wait_until(
                lambda: report.exists() and report.read_text(),
                timeout=120,
                what="the agent's calls",
            )
        )
    finally:
        space.cleanup()
    assert thief.lines == []
    assert len(results) == CALLS + 1
    for stderr in results:
        assert f"served by pid {os.getpid()}" in stderr, stderr
        assert f"not by supervisor pid {stolen['pid']}" in stderr, stderr
    assert all("not delivered" in stderr for stderr in results[:CALLS])


# As `nobody`, with an interpreter outside root's directories and this checkout on its path:
# `status` with our socket variables removed, so that only the pointer file can lead to the
# supervisor; its stderr goes to the file named first.
USER_AGENT = r"""
import os, subprocess, sys, time
env = {k: v for k, v in os.environ.items() if not k.endswith("LIFECYCLE_HOOKS_SOCKET")}
done = subprocess.run([sys.executable, "-m", "otel_lifecycle_hooks", "status",
                       "task_completed", "through the pointer"], env=env,
                      capture_output=True, text=True, timeout=60)
with open(sys.argv[1], "w") as handle:
    handle.write(done.stderr)
time.sleep(60)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the agent as nobody")
def test_an_agent_of_another_user_reaches_its_root_supervisor_through_the_pointer_file(
    target: TargetServer,
) -> None:
    """The pointer written by root for `nobody` (the folder made by nobody, the file handed
    over through its descriptor) is found, and the peer check passes across users: the
    supervisor's pid is what the kernel reports for its socket."""
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 for the agent running as nobody")
    shared = Path(tempfile.mkdtemp(prefix="olh-pointer-"))
    space = Workspace(shared)
    try:
        shared.chmod(0o755)
        runtime = shared / "run-user"
        runtime.mkdir(mode=0o700)
        os.chown(runtime, 65534, 65534)
        stderr_file = shared / "status.stderr"
        stderr_file.touch()
        os.chown(stderr_file, 65534, 65534)
        template = space.template(recorder_hook(target.url("/events"), ["task-completed"]))
        run = space.start(
            template,
            [python, "-c", USER_AGENT, str(stderr_file)],
            "--user",
            "nobody",
            env={"XDG_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(REPO_ROOT)},
        )
        [event] = wait_until(lambda: recorded(target), what="the status through the pointer")
        assert (event["EVENT"], event["TASK_SUMMARY"]) == ("task-completed", "through the pointer")
        assert stderr_file.read_text() == ""
        [pointer] = (runtime / "otel-lifecycle-hooks").glob("supervisor-*.json")
        assert (pointer.stat().st_uid, (runtime / "otel-lifecycle-hooks").stat().st_uid) == (
            65534,
            65534,
        )
        run.signal(signal.SIGTERM)
        run.wait(timeout=120)
        assert not pointer.exists()
    finally:
        space.cleanup()
        shutil.rmtree(shared, ignore_errors=True)
