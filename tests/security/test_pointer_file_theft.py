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
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervisor.supervised import Workspace, wait_until

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
        results = json.loads(wait_until(lambda: report.exists() and report.read_text(),
                                        timeout=120, what="the agent's calls"))
    finally:
        space.cleanup()
    assert thief.lines == []
    assert len(results) == CALLS + 1
    for stderr in results:
        assert f"served by pid {os.getpid()}" in stderr, stderr
        assert f"not by supervisor pid {stolen['pid']}" in stderr, stderr
    assert all("not delivered" in stderr for stderr in results[:CALLS])
