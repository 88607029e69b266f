"""What the delivery benchmarks share: a real `otel-lifecycle-hooks run` whose template has one
non-debounced webhook, events sent to it through its event socket exactly as `hook` and
`status` send them, and the checks that every event became a delivery with its journal row.

The supervisor's telemetry is what `run` sets up from its environment: spans to the local
trace file under `$HOME/.local/state/otel-lifecycle-hooks/traces` (rotated at its size bound),
the journal, the hook log (`$HOME/agent.log`) and, when `metrics_url` is given, metrics
exported over OTLP/HTTP to that loopback URL (run's metrics are the API's no-op ones unless a
metrics exporter is configured).
"""

from __future__ import annotations

import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from _common import ArrivalReport, LoopbackServerProcess, clean_env, cpu_ticks

HOOK_NAME = "deliver-tool-start"
HOOK_SPAN = "agent.lifecycle_hook " + HOOK_NAME  # hook spans are named after their hook
SPANS_PER_DELIVERY = 2  # the hook span and its CLIENT span
TRACE_SUBDIR = Path(".local") / "state" / "otel-lifecycle-hooks" / "traces"
# What the webhook sends: the same bytes go out from the bare-httpx baseline.
WEBHOOK_BODY = '{"tool": "${TOOL_NAME}", "session": "${SESSION_ID}"}'


def webhook_template(directory: Path, base_url: str) -> Path:
    """A template with one webhook on tool-start, no debounce, no rate limit: every event is
    one POST to `<base_url>/hook/<TOOL_NAME>`, so arrivals can be matched to events."""
    path = directory / "webhook-agent.yaml"
    path.write_text(
        "lifecycle_hooks:\n"
        f"  - name: {HOOK_NAME}\n"
        "    on: [tool-start]\n"
        "    action:\n"
        "      type: webhook\n"
        f'      url: "{base_url}/hook/${{TOOL_NAME}}"\n'
        "      headers:\n"
        "        Content-Type: application/json\n"
        f"      body: '{WEBHOOK_BODY}'\n"
        "    timeout: 5s\n"
    )
    return path


def wire_event(tool_name: str) -> dict[str, object]:
    """The line `hook --dialect claude` sends for a PreToolUse payload."""
    return {
        "v": 1,
        "kind": "event",
        "event": "tool-start",
        "dialect": "claude",
        "raw_event": "PreToolUse",
        "session_id": "bench-session",
        "fields": {"TOOL_NAME": tool_name},
    }


def send_event(socket_path: str, tool_name: str) -> None:
    """One connection, one line, closed: what `hook` does once per harness event."""
    from otel_lifecycle_hooks.harness.socket_client import send_lines

    send_lines(socket_path, [wire_event(tool_name)])


@dataclass
class RunningSupervisor:
    process: subprocess.Popen[bytes]
    socket_path: str
    home: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def journal(self) -> Path:
        return self.home / "journal.db"

    @property
    def hook_log(self) -> Path:
        return self.home / "agent.log"

    @property
    def trace_dir(self) -> Path:
        return self.home / TRACE_SUBDIR

    def cpu_ticks(self) -> int:
        return cpu_ticks(self.pid)


@contextmanager
def webhook_supervisor(
    home: Path, base_url: str, metrics_url: str | None = None, **extra_env: str
) -> Iterator[RunningSupervisor]:
    """`python -m otel_lifecycle_hooks run --template <webhook template> -- sh -c '...'` in
    `home`, whose child writes the event socket's path and sleeps; SIGTERM at the end (the
    supervisor drains its hooks and closes its telemetry)."""
    template = webhook_template(home, base_url)
    socket_file = home / "socket-path"
    child = f'printf %s "$LIFECYCLE_HOOKS_SOCKET" > {shlex.quote(str(socket_file))}; exec sleep 600'
    env = clean_env(home, **extra_env)
    if metrics_url:
        env.update(
            OTEL_METRICS_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=metrics_url,
        )
    argv = [sys.executable, "-m", "otel_lifecycle_hooks", "run", "--template", str(template)]
    errors = open(home / "supervisor.err", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [*argv, "--", "sh", "-c", child],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=errors,
        cwd=home,
    )
    try:
        deadline = time.monotonic() + 30
        while not (socket_file.exists() and socket_file.read_text()):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the supervisor did not start: {supervisor_errors(home)}")
            time.sleep(0.02)
        yield RunningSupervisor(process, socket_file.read_text(), home)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        errors.close()


def supervisor_errors(home: Path) -> str:
    path = home / "supervisor.err"
    return path.read_text(errors="replace")[-2000:] if path.exists() else ""


def journal_successes(journal: Path) -> int:
    """Executions of the webhook the journal holds as succeeded."""
    with sqlite3.connect(f"file:{journal}?mode=ro", uri=True) as db:
        row = db.execute(
            "SELECT COUNT(*) FROM executions WHERE hook = ? AND outcome = 'success'",
            (HOOK_NAME,),
        ).fetchone()
    return int(row[0])


def wait_for_journal(journal: Path, expected: int, timeout: float = 30.0) -> int:
    """Wait until the journal holds `expected` successes (its rows are committed in batches
    of at most 100 ms); returns what it holds at the end."""
    deadline = time.monotonic() + timeout
    found = journal_successes(journal)
    while found < expected and time.monotonic() < deadline:
        time.sleep(0.05)
        found = journal_successes(journal)
    return found


def trace_files(trace_dir: Path) -> list[Path]:
    """The trace file and its rotated files."""
    if not trace_dir.is_dir():
        return []
    return sorted(p for p in trace_dir.iterdir() if ".jsonl" in p.name and p.is_file())


def trace_lines(trace_dir: Path) -> int:
    """Spans written so far, in every trace file (rotated ones too): a line is a batch of
    spans (OTLP JSON), each with one `"kind":` key (a string holding it is escaped), counted
    without parsing 80 MiB of JSON every 0.1 s."""
    total = 0
    for path in trace_files(trace_dir):
        with path.open("rb") as handle:
            data = handle.read()
        total += data.count(b'"kind":')
    return total


def wait_for_trace_lines(trace_dir: Path, expected: int, timeout: float = 15.0) -> int:
    """Wait until the trace files hold `expected` spans (the batch processor writes what is
    left of a batch after its 5 s schedule delay); returns what they hold at the end."""
    deadline = time.monotonic() + timeout
    found = trace_lines(trace_dir)
    while found < expected and time.monotonic() < deadline:
        time.sleep(0.1)
        found = trace_lines(trace_dir)
    return found


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


class CountingServer(LoopbackServerProcess):
    """`loopback_server.py` whose progress can be asked (`count`), so that a sender can keep
    the events in flight under the hook's queue limit: a sender that outran the supervisor
    would measure the drop policy, not the delivery.

    The server prints `arrived ...` on its own when the expected count is reached, so that
    line may come before or after the answer to a command: commands here read lines until
    their answer (blocking: the server answers each command at once), keeping an `arrived`
    line for `wait_arrivals` and dropping one that an `expect` made stale."""

    def __init__(self) -> None:
        super().__init__()
        self._arrived_line: str | None = None
        self._expected = 0

    def _command(self, command: str, answer: str) -> list[str]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(command + "\n")
        stdin.flush()
        while True:
            line = stdout.readline()
            if not line:
                raise RuntimeError(f"the loopback server exited ({self._process.poll()})")
            if line.startswith("arrived "):
                self._arrived_line = line
                continue
            words = line.split()
            if words[:1] != [answer]:
                raise RuntimeError(f"unexpected line from the loopback server: {words}")
            return words

    def expect(self, count: int) -> None:
        self._command(f"expect {count}", "expecting")
        self._arrived_line = None  # of the earlier expectation
        self._expected = count

    def count(self) -> int:
        return int(self._command("count", "count")[1])

    def count_and_last(self) -> tuple[int, float]:
        """Requests since `expect`, and when the last of them arrived (`perf_counter`)."""
        words = self._command("count", "count")
        return int(words[1]), float(words[2])

    def wait_arrivals(self, timeout: float) -> ArrivalReport:
        """Asks `count` until the expected requests arrived; the server printed its `arrived`
        line under the same lock as it counted, so before the answer that shows them all."""
        deadline = time.monotonic() + timeout
        while self._arrived_line is None:
            if self.count() >= self._expected:
                continue  # the `arrived` line came before that answer: it is kept now
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {self._expected} requests within {timeout:.0f}s")
            time.sleep(0.01)
        words, self._arrived_line = self._arrived_line.split(), None
        return ArrivalReport(int(words[1]), int(words[2]), float(words[3]), float(words[4]))


def send_flow_controlled(
    server: CountingServer,
    socket_path: str,
    first: int,
    count: int,
    *,
    in_flight: int = 256,
    lines_per_connection: int = 1,
) -> None:
    """Send events `first`..`first+count-1` (TOOL_NAME is the number) through the socket as
    fast as the supervisor delivers them, never more than `in_flight` ahead of the server's
    arrivals (the server must have been told to `expect` them)."""
    from otel_lifecycle_hooks.harness.socket_client import send_lines

    sent = 0
    arrived = 0
    while sent < count:
        while sent - arrived >= in_flight:
            time.sleep(0.002)
            arrived = server.count()
        batch = min(lines_per_connection, count - sent, in_flight - (sent - arrived))
        send_lines(socket_path, [wire_event(str(first + sent + i)) for i in range(batch)])
        sent += batch
