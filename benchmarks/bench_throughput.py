"""Throughput at the default queue: the highest rate of harness events a real supervisor takes
through its event socket with no event dropped, and what it delivers when offered more.

The supervisor is a real `otel-lifecycle-hooks run` with the telemetry `run` sets up (spans
to the local trace file, the journal, the hook log), the default queue (1,024 events waiting
per hook: past it the oldest is dropped and logged), and one webhook on tool-start, not
debounced, to a loopback server in another process. Events are sent as `hook --dialect` sends
them, one connection each, at a rising rate: 4 s at each step, 1.5 times the step before,
from 100/s, until a step loses events (the server received fewer than were sent). Each step
waits for its deliveries to finish before the next begins. The figures: the highest step
with no drop, and the deliveries per second during the first step that dropped. The baseline
is the bare HTTP client's own ceiling: an instrumented `httpx.Client` on an SDK tracer
provider writing a trace file (`bare_httpx_client.py`), sending back to back to the same
server. No target: an agent sends a few events per tool call; this says how far that is from
the point where events are lost.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import BENCH_DIR, Figure, LoopbackServerProcess, bench_arguments, report
from _delivery import (
    CountingServer,
    load_average,
    send_event,
    supervisor_errors,
    wait_for_journal,
    webhook_supervisor,
)

SCRIPT = "bench_throughput.py"
FIRST_RATE = 100.0
STEP = 1.5
# The supervisor's last line counts what it dropped: "... 2019 ok, 981 dropped".
DROPPED_COUNT = re.compile(r"otel-lifecycle-hooks: \d+ deliveries: .*?(\d+) dropped")


def offer(server: CountingServer, socket_path: str, first: int, rate: float, seconds: float) -> int:
    """Events `first`, `first + 1`, ... at `rate` per second for `seconds`; how many."""
    count = int(rate * seconds)
    server.expect(count)
    started = time.perf_counter()
    for i in range(count):
        wait = started + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        send_event(socket_path, str(first + i))
    return count


def settle(
    server: CountingServer, offered: int, quiet: float = 3.0, timeout: float = 60.0
) -> tuple[int, float]:
    """Arrivals, and the last one's time, once all `offered` came or none came for `quiet`
    seconds (a loaded machine can stall a delivery for a second: a shorter wait would count
    it as dropped)."""
    deadline = time.monotonic() + timeout
    (last, at), last_change = server.count_and_last(), time.monotonic()
    while last < offered and time.monotonic() < deadline:
        time.sleep(0.05)
        now, at = server.count_and_last()
        if now != last:
            last, last_change = now, time.monotonic()
        elif time.monotonic() - last_change >= quiet:
            break
    return last, at


def bare_ceiling(count: int, trace_file: Path) -> float:
    """Requests per second of bare instrumented httpx, back to back, to its own server."""
    with LoopbackServerProcess() as server:
        process = subprocess.Popen(
            [sys.executable, str(BENCH_DIR / "bare_httpx_client.py"), server.url, str(trace_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("run 0 100 1000000\n")  # warm-up
        process.stdin.flush()
        process.stdout.readline()
        server.expect(count)
        started = time.perf_counter()
        process.stdin.write(f"run 100 {count} 1000000\n")
        process.stdin.flush()
        arrivals = server.wait_arrivals(60)
        process.stdout.readline()
        process.stdin.close()
        process.wait(30)
        if arrivals.distinct_paths != count:
            raise SystemExit(f"the bare client delivered {arrivals.distinct_paths} of {count}")
        return count / (arrivals.last - started)


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    seconds, most_steps = (0.5, 2) if args.quick else (4.0, 12)
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp, CountingServer() as server:
        home = Path(tmp)
        baseline = bare_ceiling(200 if args.quick else 2000, home / "bare.jsonl")
        steps: list[tuple[float, int, int, float]] = []  # rate, offered, arrived, per second
        with webhook_supervisor(home, server.url) as supervisor:
            server.expect(20)
            for i in range(20):  # imports httpx, opens the connection
                send_event(supervisor.socket_path, f"warm-{i}")
            server.wait_arrivals(30)
            rate, sent = FIRST_RATE, 0
            for _ in range(most_steps):
                started = time.perf_counter()
                offered = offer(server, supervisor.socket_path, sent, rate, seconds)
                arrived, last_arrival = settle(server, offered)
                steps.append((rate, offered, arrived, arrived / (last_arrival - started)))
                sent += offered
                if arrived < offered:
                    break
                rate *= STEP
            delivered = 20 + sum(step[2] for step in steps)
            rows = wait_for_journal(supervisor.journal, delivered)
        errors = supervisor_errors(home)
        if rows != delivered:
            raise SystemExit(f"{rows} journal rows for {delivered} deliveries")
        lost = sum(offered - arrived for _, offered, arrived, _ in steps)
        counted = DROPPED_COUNT.findall(errors)
        dropped_by_queue = int(counted[-1]) if counted else 0
        if lost != dropped_by_queue:
            raise SystemExit(
                f"{lost} events did not arrive, and the supervisor says it dropped "
                f"{dropped_by_queue}: events were lost elsewhere"
            )

    clean = [step for step in steps if step[2] == step[1]]
    dropped = [step for step in steps if step[2] < step[1]]
    if not clean:
        raise SystemExit(f"even {FIRST_RATE:.0f} events/s lost events: {steps}")
    best = clean[-1]
    ladder = "; ".join(f"{rate:.0f}/s: {arrived}/{offered}" for rate, offered, arrived, _ in steps)
    load = load_average()
    figures = [
        Figure(
            benchmark="throughput",
            name="highest event rate through the socket with no event dropped (default queue)",
            value=best[0],
            unit="/s",
            baseline=baseline,
            baseline_name="bare instrumented httpx, back to back",
            detail=f"{seconds:g} s at each rate, one connection per event; delivered of "
            f"offered: {ladder}; load average {load}",
        )
    ]
    if dropped:
        rate, offered, arrived, per_second = dropped[0]
        figures.append(
            Figure(
                benchmark="throughput",
                name="deliveries per second when offered more than that",
                value=per_second,
                unit="/s",
                baseline=baseline,
                baseline_name="bare instrumented httpx, back to back",
                detail=f"offered {rate:.0f}/s for {seconds:g} s: {offered - arrived} of "
                f"{offered} dropped ({(offered - arrived) / offered:.0%}), each drop logged",
            )
        )
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
