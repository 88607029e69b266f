"""Throughput: webhook deliveries per second from one agent to a loopback server, over reused
connections, versus the same with a new connection per request (the server closes each).

Events are recorded as fast as the caller can; the figure is deliveries that reached the
server divided by the time from the first record to the last arrival, every execution also
written to the journal and the hook log as a supervisor does. Target: at least 1,000 per
second with connections reused.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from _common import Figure, StampingServer, bench_arguments, one_hook_session, report

SCRIPT = "bench_throughput.py"
TARGET_PER_SECOND = 1000.0


def deliveries_per_second(count: int, close_connections: bool) -> tuple[float, float]:
    """Deliveries per second, and this process's CPU milliseconds per delivery (the server's
    share included): with the CPU time, a reader can tell a slow path from a starved one."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp,
        StampingServer(close_connections=close_connections) as server,
    ):
        # The queue holds every event: this measures delivery, not the drop policy.
        session = one_hook_session(
            Path(tmp), server.url + "/hook/${TOOL_NAME}", "webhook", queue_limit=count + 1
        )
        session.record("tool-start", {"TOOL_NAME": "warm-up"})
        session.engine.force_flush(10)
        server.expected = count + 1
        started, cpu_started = time.perf_counter(), time.process_time()
        for i in range(count):
            session.record("tool-start", {"TOOL_NAME": str(i)})
        if not server.all_arrived.wait(120):
            raise SystemExit(f"only {server.count - 1} of {count} deliveries arrived")
        elapsed = max(server.arrivals.values()) - started
        cpu_ms = (time.process_time() - cpu_started) * 1000 / count
        session.end()
        session.engine.shutdown(10)
    return count / elapsed, cpu_ms


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    count = 100 if args.quick else 3000
    reused, reused_cpu = deliveries_per_second(count, close_connections=False)
    fresh, fresh_cpu = deliveries_per_second(count, close_connections=True)
    figures = [
        Figure(
            benchmark="throughput",
            name="webhook deliveries per second, connections reused",
            value=reused,
            unit="/s",
            baseline=fresh,
            baseline_name="a new connection per request",
            target=TARGET_PER_SECOND,
            checked="min",
            detail=f"{count} deliveries, each also journaled and logged; CPU per delivery "
            f"{reused_cpu:.2f} ms reused, {fresh_cpu:.2f} ms with new connections",
        )
    ]
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
