"""Every event a sender could not deliver is counted by the supervisor.

A real root supervisor runs its agent as `nobody`; a blocking hook holds delivery, so the
supervisor's inbox fills, its socket thread stops accepting and the listen backlog fills.
Real `hook` processes (as `nobody`, the agent's user) then find the supervisor busy and give
up after their 200 ms budget. Each one records what it could not deliver beside the socket
(harness/socket_client.py `record_undelivered`), and the supervisor counts it: events offered
equal events delivered plus the supervisor's `undelivered` count, exactly. Counts are judged,
never speed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import otel_lifecycle_hooks
from otel_lifecycle_hooks.harness import socket_client
from otel_lifecycle_hooks.supervisor import server as server_module
from otel_lifecycle_hooks.supervisor.admission import REFUSED_METRIC, IngressCounts
from otel_lifecycle_hooks.supervisor.server import EventServer
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.target_server import Reply, TargetServer

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs the agent as nobody: needs root")

NOBODY = 65534
HOOK_CALLS = 24  # real `hook` processes, in two waves
FILLER_LINES = 1200  # more than the supervisor's pending-message bound (1,024)
MAX_BACKLOG_CONNECTIONS = 5000  # hang guard for filling the listen backlog
# `nobody` cannot run an interpreter that lives under root's home: the system's, with this
# checkout on its path (the `hook` command needs nothing outside the standard library).
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
PACKAGE_ROOT = str(Path(otel_lifecycle_hooks.__file__).resolve().parent.parent)


def wire(tool: str) -> bytes:
    message = {"v": 1, "kind": "event", "event": "tool-start", "fields": {"TOOL_NAME": tool}}
    return json.dumps(message).encode() + b"\n"


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A directory `nobody` can reach (pytest's tmp_path is mode 0700)."""
    root = Path(tempfile.mkdtemp(prefix="olh-losses-"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def hook_call(tool: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    payload = {"hook_event_name": "PreToolUse", "tool_name": tool, "session_id": "s1"}
    process = subprocess.Popen(
        [str(SYSTEM_PYTHON), "-m", "otel_lifecycle_hooks", "hook", "--dialect", "claude"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        cwd="/",
    )
    assert process.stdin is not None
    process.stdin.write(json.dumps(payload).encode())
    process.stdin.close()
    return process


def test_a_full_backlog_loses_only_what_the_supervisor_counts(shared_root: Path) -> None:
    if SYSTEM_PYTHON is None:
        pytest.skip("no system python3 for the unprivileged agent and its hook calls")
    space = Workspace(shared_root)
    shared = shared_root / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # the agent (nobody) writes its notes here
    env_file = shared / "agent-env.json"
    release = threading.Event()
    offered: list[str] = []
    held: list[socket.socket] = []
    try:
        with TargetServer() as target:
            # The first event's hook holds the supervisor's main thread until released.
            target.on("/tool", Reply(204, released_by=release))
            # No body: a body written after the headers waits out a delayed ACK, each request.
            target.always("/tool", Reply(204))
            template = space.template(
                "  - name: tally\n"
                "    on: [tool-start]\n"
                "    blocking: true\n"
                "    timeout: 120s\n"
                "    action:\n"
                "      type: http\n"
                "      method: POST\n"
                f'      url: "{target.url("/tool")}"\n'
                '      body: \'{"tool": "${TOOL_NAME}"}\'\n'
            )
            agent = space.agent_command(env_file=str(env_file), pid_file=str(shared / "agent.pid"))
            run = space.start(template, [str(SYSTEM_PYTHON), *agent[1:]], "--user", "nobody")
            wait_until(env_file.exists, what="the agent to start")
            agent_env = json.loads(env_file.read_text())
            assert agent_env["uid"] == NOBODY
            path = agent_env["SOCKET"]
            # Made by the supervisor for the agent's user: senders need not create it.
            counter = Path(path).with_name(socket_client.UNDELIVERED_FILE).lstat()
            assert (counter.st_uid, counter.st_size) == (NOBODY, 0)

            # Fill: one connection with more lines than the supervisor will queue.
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as filler:
                filler.connect(path)
                tools = ["hold"] + [f"fill-{n}" for n in range(FILLER_LINES)]
                filler.sendall(b"".join(wire(tool) for tool in tools))
                filler.shutdown(socket.SHUT_WR)
                offered += tools
                wait_until(lambda: len(target.requests) >= 1, what="the holding request")
                # Then the listen backlog: connect until the kernel says it is full.
                for n in range(MAX_BACKLOG_CONNECTIONS):
                    waiting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    waiting.setblocking(False)
                    try:
                        waiting.connect(path)
                    except BlockingIOError:
                        waiting.close()
                        break
                    held.append(waiting)
                    waiting.sendall(wire(f"queued-{n}"))
                    waiting.shutdown(socket.SHUT_WR)
                    offered.append(f"queued-{n}")
                else:
                    pytest.fail("the supervisor's listen backlog never filled")

                hook_env = {
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "HOME": "/nonexistent",
                    "PYTHONPATH": PACKAGE_ROOT,
                    "LIFECYCLE_HOOKS_SOCKET": path,
                    "LIFECYCLE_HOOKS_LOG": str(shared / "hook-calls.log"),
                }
                # First wave: the supervisor is held, every call finds the backlog full.
                first = [f"hook-{n}" for n in range(HOOK_CALLS // 2)]
                for process in [hook_call(tool, hook_env) for tool in first]:
                    process.wait(timeout=60)
                offered += first
                # Second wave while the held backlog drains: some get in, some may not.
                release.set()
                second = [f"hook-{n}" for n in range(HOOK_CALLS // 2, HOOK_CALLS)]
                for process in [hook_call(tool, hook_env) for tool in second]:
                    process.wait(timeout=60)
                offered += second

            calls_log = shared / "hook-calls.log"
            told = len(calls_log.read_text().splitlines()) if calls_log.exists() else 0

            def delivered() -> set[str]:
                return {json.loads(r.body)["tool"] for r in list(target.requests)}

            # Hang guard only: wait for what the senders did not report lost.
            wait_until(
                lambda: len(delivered()) >= len(offered) - told,
                timeout=120,
                what="the held events to be delivered",
            )
            run.signal(signal.SIGTERM)
            run.wait(timeout=60)  # the agent may have ended by now: any exit will do
            arrived = delivered()
    finally:
        for waiting in held:
            waiting.close()
        space.cleanup()

    found = re.search(r"agent input: .*undelivered (\d+)", run.stderr)
    assert found is not None, run.stderr
    lost = int(found.group(1))
    assert arrived <= set(offered)
    assert lost >= HOOK_CALLS // 2  # the first wave found the supervisor held, every call
    assert len(arrived) + lost == len(offered)
    assert lost == told  # each loss also has its line in the senders' hook log


def test_a_sender_that_cannot_connect_records_its_lines_beside_the_socket(
    tmp_path: Path,
) -> None:
    """Nothing accepts: the sender gives up, and its lines are counted in the file."""
    path = str(tmp_path / "busy.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    queued: list[socket.socket] = []
    try:
        while True:  # fill the backlog
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)
            try:
                client.connect(path)
            except BlockingIOError:
                client.close()
                break
            queued.append(client)
        lines = [{"v": 1, "kind": "status", "status": "blocked", "message": str(n)} for n in (1, 2)]
        with pytest.raises(socket_client.SupervisorUnavailable):
            socket_client.send_lines(path, lines)
        with pytest.raises(socket_client.SupervisorUnavailable):
            socket_client.send_lines(path, lines[:1])
    finally:
        for client in queued:
            client.close()
        listener.close()
    assert (tmp_path / socket_client.UNDELIVERED_FILE).stat().st_size == 3


def test_a_planted_link_is_never_followed_by_the_sender(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("kept")
    (tmp_path / socket_client.UNDELIVERED_FILE).symlink_to(victim)
    assert not socket_client.record_undelivered(str(tmp_path / "gone.sock"), 5)
    assert victim.read_text() == "kept"


def test_the_agent_can_only_inflate_its_own_count() -> None:
    """A count that went down (the file truncated by the agent) takes nothing back, and later
    growth is counted from there; the supervisor's own refusals are untouched. The refusal
    metric counts the losses under their own reason."""
    reader = InMemoryMetricReader()
    counts = IngressCounts(MeterProvider(metric_readers=[reader]))
    counts.refuse("not_json")
    counts.sender_losses(5)
    counts.sender_losses(0)  # truncated
    counts.sender_losses(2)
    counts.sender_losses(2)
    assert counts.snapshot() == {"not_json": 1, "undelivered": 7}
    assert counts.summary() == "refused 1 (not_json: 1), undelivered 7"
    data = reader.get_metrics_data()
    assert data is not None
    by_reason = {
        point.attributes["reason"]: point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == REFUSED_METRIC
        for point in metric.data.data_points
    }
    assert by_reason == {"not_json": 1, "undelivered": 7}


def test_messages_that_arrive_while_the_session_stops_are_counted(tmp_path: Path) -> None:
    """A stop is under way (its pre-stop hook held): what the agent sends now is read but
    never acted on; each message is counted as `session_stopping`, not lost unseen."""
    space = Workspace(tmp_path)
    env_file = tmp_path / "agent-env.json"
    release = threading.Event()
    try:
        with TargetServer() as target:
            target.on("/pre-stop", Reply(204, released_by=release))
            template = space.template(
                "  - name: hold-stop\n"
                "    on: [pre-stop]\n"
                "    blocking: true\n"
                "    timeout: 60s\n"
                "    action:\n"
                "      type: http\n"
                f'      url: "{target.url("/pre-stop")}"\n'
            )
            run = space.start(template, space.agent_command(env_file=str(env_file)))
            wait_until(env_file.exists, what="the agent to start")
            path = json.loads(env_file.read_text())["SOCKET"]
            run.signal(signal.SIGTERM)
            wait_until(lambda: len(target.requests) >= 1, what="the pre-stop hook")
            socket_client.send_lines(path, [tool_line(f"late-{n}") for n in range(50)])
            release.set()
            run.wait(timeout=60)
    finally:
        release.set()
        space.cleanup()
    assert re.search(r"agent input: refused 50 \(session_stopping: 50\)", run.stderr), run.stderr


def tool_line(tool: str) -> dict[str, object]:
    return {"v": 1, "kind": "event", "event": "tool-start", "fields": {"TOOL_NAME": tool}}


def test_lines_left_in_the_backlog_when_the_server_closes_are_counted(tmp_path: Path) -> None:
    """The server at its bound of open connections (idle clients hold them all): three more
    senders wait in the listen backlog, their lines written. Closing the server counts each
    of those lines as `session_stopping` rather than dropping them unseen."""
    counts = IngressCounts()
    server = EventServer(lambda message: None, str(tmp_path), refuse=counts.refuse).start()
    idle: list[socket.socket] = []
    waiting: list[socket.socket] = []
    try:
        for _ in range(server_module.MAX_CONNECTIONS):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(server.path)
            idle.append(client)
        for n in range(3):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(server.path)  # into the backlog: the server is at its bound
            client.sendall(b"".join(wire(f"w{n}-{m}") for m in range(2)))
            client.shutdown(socket.SHUT_WR)
            waiting.append(client)
    finally:
        server.close()
        for client in idle + waiting:
            client.close()
    assert counts.snapshot().get(server_module.STOPPING) == 6
