"""Drive a real `otel-lifecycle-hooks run` supervisor with activity changes through its event
socket, for the load test and `benchmarks/load_activity.py`.

The agent is a stand-in that writes the socket path and waits. Senders alternate tool-start
and tool-end (each one a real activity change once the ActivityTracker derives it), numbered
in TOOL_NAME, from several connections at once, at an offered rate; the supervisor reads the
socket one connection at a time and pushes back when it falls behind, so the achieved rate is
measured, not assumed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

AGENT = (
    "import os, time; open({pid!r}, 'w').write(str(os.getpid())); "
    "open({path!r}, 'w').write(os.environ['OTEL_LIFECYCLE_HOOKS_SOCKET']); time.sleep(600)"
)
BATCH = 500  # lines per connection


def template_yaml(url: str, debounce: str = "100ms") -> str:
    """One debounced and one plain http hook on activity-change; the plain one also hears the
    lifecycle events that must never be dropped."""
    return (
        "lifecycle_hooks:\n"
        "  - name: debounced\n"
        "    on: [activity-change]\n"
        f"    debounce: {debounce}\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{url}/debounced"\n'
        '      body: \'{"activity": "${ACTIVITY}", "tool": "${TOOL_NAME}"}\'\n'
        "  - name: every-change\n"
        "    on: [activity-change, pre-stop, session-end]\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{url}/every"\n'
        '      body: \'{"event": "${EVENT}", "activity": "${ACTIVITY}"}\'\n'
    )


def wire_line(sequence: int) -> bytes:
    event = "tool-start" if sequence % 2 == 0 else "tool-end"
    message = {
        "v": 1,
        "kind": "event",
        "event": event,
        "dialect": "claude",
        "fields": {"TOOL_NAME": f"t{sequence}"},
    }
    return json.dumps(message).encode() + b"\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class LoadedSupervisor:
    """A running supervisor under load; always `stop()` it."""

    workdir: Path
    target_url: str
    environ: Mapping[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    socket_path: str = ""
    metrics_port: int = 0
    sent: int = 0

    def start(self, timeout: float = 120.0) -> None:
        template = self.workdir / "scion-agent.yaml"
        template.write_text(template_yaml(self.target_url))
        path_file = self.workdir / "socket-path"
        self.metrics_port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))}
        env.update(
            HOME=str(self.workdir),
            OTEL_LIFECYCLE_HOOKS_JOURNAL=str(self.workdir / "journal.sqlite3"),
            OTEL_LIFECYCLE_HOOKS_LOG=str(self.workdir / "agent.log"),
            OTEL_LIFECYCLE_HOOKS_TRACE_DIR=str(self.workdir / "traces"),
            SCION_HOOKS_DIR=str(self.workdir / "no-legacy-hooks"),
            OTEL_METRICS_EXPORTER="prometheus",
            OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
            OTEL_EXPORTER_PROMETHEUS_PORT=str(self.metrics_port),
        )
        env.update(self.environ)
        self.agent_pid_file = self.workdir / "agent-pid"
        agent = [
            sys.executable,
            "-c",
            AGENT.format(path=str(path_file), pid=str(self.agent_pid_file)),
        ]
        self.stderr_path = self.workdir / "supervisor.stderr"
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "otel_lifecycle_hooks", "run", "--template", str(template),
                 "--", *agent],
                env=env, cwd=self.workdir, stdout=subprocess.DEVNULL, stderr=stderr,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not (path_file.exists() and path_file.read_text()):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(f"the supervisor did not start the agent: {self.stderr}")
            time.sleep(0.02)
        self.socket_path = path_file.read_text()

    def rss_kib(self) -> int:
        """The supervisor's resident memory (VmRSS), KiB."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def offer(self, rate: float, seconds: float, connections: int = 4) -> float:
        """Send activity changes at `rate` per second for `seconds`, from `connections`
        senders in parallel; returns the rate achieved (lines handed to the socket)."""
        lock = threading.Lock()
        started = time.monotonic()
        per_sender = rate / connections

        def sender() -> None:
            mine = 0
            while time.monotonic() - started < seconds:
                with lock:
                    first = self.sent
                    self.sent += BATCH
                payload = b"".join(wire_line(first + i) for i in range(BATCH))
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                    conn.connect(self.socket_path)
                    conn.sendall(payload)
                mine += BATCH
                pause = started + mine / per_sender - time.monotonic()
                if pause > 0:
                    time.sleep(pause)

        threads = [threading.Thread(target=sender) for _ in range(connections)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.sent_since(started)

    def sent_since(self, started: float) -> float:
        return self.sent / max(time.monotonic() - started, 1e-9)

    def send_last(self, tool: str) -> None:
        """One final tool-start, whose activity change the debounced hook must deliver."""
        line = {
            "v": 1,
            "kind": "event",
            "event": "tool-start",
            "dialect": "claude",
            "fields": {"TOOL_NAME": tool},
        }
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.socket_path)
            conn.sendall(json.dumps(line).encode() + b"\n")

    def dropped(self, hook: str) -> float:
        """agent.lifecycle_hook.dropped for `hook` (reason queue_full), read from /metrics."""
        text = (
            urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5)
            .read()
            .decode()
        )
        total = 0.0
        for line in text.splitlines():
            if (
                line.startswith("agent_lifecycle_hook_dropped_total{")
                and f'agent_lifecycle_hook_name="{hook}"' in line
                and 'drop_reason="queue_full"' in line
            ):
                total += float(line.rsplit(" ", 1)[1])
        return total

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, wait; then SIGKILL whatever is left of the supervisor and the agent."""
        if self.process is None or self.process.returncode is not None:
            return None if self.process is None else self.process.returncode
        try:
            self.process.send_signal(signal.SIGTERM)
            return self.process.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            return None
        finally:
            pids = [self.process.pid]
            if self.agent_pid_file.exists():
                pids.append(int(self.agent_pid_file.read_text()))
            for pid in pids:  # each leads its own process group
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            self.process.wait()
