"""Scale in hooks: a real supervisor (`run`, with the telemetry it really uses: the local
trace file, metrics, the journal and the hook log) with 1,000 hooks on one event, each POSTing
to one of a few loopback origins, against the same supervisor with one hook.

Figures: the supervisor's threads (growth over the one-hook case no more than the worker
pool), its resident memory (under 60 MiB), the TCP connections its hooks open per event (no
more than the distinct origins), and its CPU per delivery (within 1.5x of the one-hook case).
The servers run in their own processes and count every connection they accept; each checks
that every hook's deliveries arrived, all of them and in the order of the events. The journal
must hold a row for every delivery.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

from _common import (
    Figure,
    bench_arguments,
    cpu_ticks,
    report,
    running_supervisor,
    wait_until_idle,
)

SCRIPT = "bench_hook_scale.py"
ORIGINS = 4
TARGET_RSS_MIB = 60.0  # /proc's VmHWM and VmRSS are in KiB: KiB / 1024 is MiB
TARGET_CPU_RATIO = 1.5
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BATCH = 100  # events per socket connection


# -- the loopback origins: `bench_hook_scale.py --serve`, one process each ----------------------


def serve() -> None:
    """Print the port; answer every request 200 at once, keep-alive; on `report` (stdin),
    print `accepted <connections> requests <n> paths <p> in_order <paths whose sequence numbers
    came 0, 1, 2, ... with none missing or repeated> next <the sequence number each such path
    waits for, or -1 when they differ>`."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    listener.setblocking(False)
    print(listener.getsockname()[1], flush=True)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    lock = threading.Lock()
    state = {"accepted": 0, "requests": 0}
    expected: dict[str, int] = {}  # path -> the next sequence number it must get
    broken: set[str] = set()
    buffers: dict[socket.socket, bytes] = {}

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "report":
                with lock:
                    good = [path for path in expected if path not in broken]
                    nexts = {expected[path] for path in good}
                    following = nexts.pop() if len(nexts) == 1 else -1
                    print(
                        f"accepted {state['accepted']} requests {state['requests']} "
                        f"paths {len(expected)} in_order {len(good)} next {following}",
                        flush=True,
                    )
        os._exit(0)  # end of stdin: the benchmark is done with this server

    threading.Thread(target=commands, daemon=True).start()
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                while True:
                    try:
                        connection, _ = listener.accept()
                    except BlockingIOError:
                        break
                    with lock:
                        state["accepted"] += 1
                    buffers[connection] = b""
                    selector.register(connection, selectors.EVENT_READ)
                continue
            connection = key.fileobj  # type: ignore[assignment]
            try:
                chunk = connection.recv(65536)
            except OSError:  # reset by the client: as good as closed
                chunk = b""
            if not chunk:
                selector.unregister(connection)
                del buffers[connection]
                connection.close()
                continue
            buffer = buffers[connection] + chunk
            while b"\r\n\r\n" in buffer:
                head, _, rest = buffer.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(rest) < length:
                    break
                body, buffer = rest[:length], rest[length:]
                path = lines[0].split(b" ")[1].decode()
                seq = int(json.loads(body)["seq"])
                with lock:
                    state["requests"] += 1
                    if seq != expected.get(path, 0):
                        broken.add(path)
                    expected[path] = seq + 1
                try:
                    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                except OSError:  # the client went away; its next recv sees it closed
                    break
            buffers[connection] = buffer


class Origin:
    """One `--serve` process: a loopback origin that counts connections and checks order."""

    def __init__(self) -> None:
        import subprocess

        self._process = subprocess.Popen(
            [sys.executable, __file__, "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        self.url = f"http://127.0.0.1:{int(self._process.stdout.readline())}"

    def report(self) -> dict[str, int]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write("report\n")
        self._process.stdin.flush()
        words = self._process.stdout.readline().split()
        if not words:
            raise RuntimeError(f"a loopback origin exited ({self._process.poll()})")
        return {words[i]: int(words[i + 1]) for i in range(0, len(words), 2)}

    def close(self) -> None:
        assert self._process.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it already exited
            self._process.stdin.close()
        try:
            self._process.wait(10)
        except Exception:  # noqa: BLE001 - a server that does not end is killed
            self._process.kill()
            self._process.wait()


# -- the supervisor -----------------------------------------------------------------------------


def template(directory: Path, origins: list[Origin], hooks: int) -> Path:
    """`hooks` non-blocking POSTs on tool-start, spread over the origins, each to its own path
    with the event's sequence number (sent as TOOL_NAME) in the body."""
    lines = ["lifecycle_hooks:"]
    for index in range(hooks):
        url = f"{origins[index % len(origins)].url}/h{index}"
        lines += [
            f"  - name: h{index}",
            "    on: [tool-start]",
            "    action:",
            "      type: http",
            "      method: POST",
            f'      url: "{url}"',
            '      body: \'{"seq": "${TOOL_NAME}"}\'',
            "    timeout: 10s",
        ]
    path = directory / f"hooks-{hooks}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def wire_event(seq: int) -> bytes:
    message = {
        "v": 1,
        "kind": "event",
        "event": "tool-start",
        "dialect": "claude",
        "raw_event": "PreToolUse",
        "session_id": "bench-session",
        "fields": {"TOOL_NAME": str(seq)},
    }
    return json.dumps(message).encode() + b"\n"


def send(socket_path: str, first: int, count: int) -> None:
    for start in range(first, first + count, BATCH):
        lines = b"".join(wire_event(i) for i in range(start, min(start + BATCH, first + count)))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(socket_path)
            connection.sendall(lines)


def status_field(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {name} for pid {pid}")


class PeakThreads:
    """Samples a process's thread count every 5 ms while running; keeps the highest."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, status_field(self.pid, "Threads"))
            self._stop.wait(0.005)


def wait_requests(origins: list[Origin], total: int, timeout: float) -> list[dict[str, int]]:
    deadline = time.monotonic() + timeout
    while True:
        reports = [origin.report() for origin in origins]
        if sum(r["requests"] for r in reports) >= total or time.monotonic() > deadline:
            return reports
        time.sleep(0.05)


class Run:
    """What one supervisor did over its measured events."""

    def __init__(self, hooks: int, events: int) -> None:
        self.hooks = hooks
        self.events = events
        self.cpu_ms = 0.0
        self.new_connections = 0
        self.peak_threads = 0
        self.rss_kib = 0
        self.peak_rss_kib = 0
        self.problems: list[str] = []

    @property
    def deliveries(self) -> int:
        return self.hooks * self.events

    @property
    def cpu_per_delivery(self) -> float:
        return self.cpu_ms / self.deliveries


def measure(home: Path, hooks: int, events: int, origins_count: int) -> Run:
    """One warm-up event, then `events` more, each to all `hooks`; counted from the servers,
    the supervisor's /proc entries and, after it stopped, its journal."""
    run = Run(hooks, events)
    origins = [Origin() for _ in range(origins_count)]
    try:
        path = template(home, origins, hooks)
        with running_supervisor(path, home, timeout=120.0) as supervisor:
            pid = supervisor.process.pid
            send(supervisor.socket_path, 0, 1)
            warm = wait_requests(origins, hooks, timeout=120.0)
            wait_until_idle(pid)
            accepted_before = sum(r["accepted"] for r in warm)
            ticks_before = cpu_ticks(pid)
            with PeakThreads(pid) as threads:
                send(supervisor.socket_path, 1, events)
                reports = wait_requests(origins, hooks * (events + 1), timeout=300.0)
                wait_until_idle(pid)
            run.cpu_ms = (cpu_ticks(pid) - ticks_before) * 1000.0 / CLOCK_TICKS
            run.peak_threads = threads.peak
            run.rss_kib = status_field(pid, "VmRSS")
            run.peak_rss_kib = status_field(pid, "VmHWM")
        run.new_connections = sum(r["accepted"] for r in reports) - accepted_before
        requests = sum(r["requests"] for r in reports)
        paths = sum(r["paths"] for r in reports)
        in_order = sum(r["in_order"] for r in reports)
        if requests != hooks * (events + 1):
            run.problems.append(f"{requests} of {hooks * (events + 1)} requests arrived")
        if paths != hooks or in_order != hooks or any(r["next"] != events + 1 for r in reports):
            run.problems.append(
                f"{in_order} of {hooks} hooks got every event once and in order "
                f"({paths} hooks heard from)"
            )
        with sqlite3.connect(home / "journal.db") as journal:
            (rows,) = journal.execute(
                "SELECT count(*) FROM executions WHERE outcome = 'success'"
            ).fetchone()
        if rows != hooks * (events + 1):
            run.problems.append(f"{rows} of {hooks * (events + 1)} deliveries journaled")
    finally:
        for origin in origins:
            origin.close()
    return run


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    from otel_lifecycle_hooks.engine.workers import workers_from

    pool = workers_from(os.environ)  # the supervisors inherit this environment

    hooks, events, single_events = (50, 3, 50) if args.quick else (1000, 20, 1000)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        many_home, one_home = Path(tmp) / "many", Path(tmp) / "one"
        many_home.mkdir()
        one_home.mkdir()
        one = measure(one_home, 1, single_events, 1)
        many = measure(many_home, hooks, events, ORIGINS)
    for problem in one.problems + many.problems:
        print(f"{SCRIPT}: work was lost: {problem}", file=sys.stderr)
    if one.problems or many.problems:
        return 2

    load = os.getloadavg()
    machine = f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    figures = [
        Figure(
            benchmark="hook scale",
            name=f"supervisor threads, {hooks:,} hooks on one event",
            value=many.peak_threads,
            unit="threads",
            baseline=one.peak_threads,
            baseline_name="one hook",
            target=float(pool),
            checked="growth",
            detail=f"peak while delivering; worker pool {pool}",
        ),
        Figure(
            benchmark="hook scale",
            name=f"supervisor RSS, {hooks:,} hooks",
            value=many.peak_rss_kib / 1024,
            unit="MiB",
            baseline=one.peak_rss_kib / 1024,
            baseline_name="one hook",
            target=TARGET_RSS_MIB,
            checked="value",
            detail=f"peak (VmHWM); {many.rss_kib / 1024:.1f} MiB after the events",
        ),
        Figure(
            benchmark="hook scale",
            name=f"new TCP connections per event, {hooks:,} hooks on {ORIGINS} origins",
            value=many.new_connections / many.events,
            unit="connections",
            baseline=float(ORIGINS),
            baseline_name="distinct origins",
            target=float(ORIGINS),
            checked="value",
            detail=f"{many.new_connections} over {many.events} events after one warm-up",
        ),
        Figure(
            benchmark="hook scale",
            name=f"supervisor CPU per delivery, {hooks:,} hooks",
            value=many.cpu_per_delivery,
            unit="ms",
            baseline=one.cpu_per_delivery,
            baseline_name=f"one hook, {one.events:,} events",
            target=TARGET_CPU_RATIO,
            detail=f"{many.deliveries:,} deliveries, every hook's in order; {machine}",
        ),
    ]
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve()
    sys.exit(main())
