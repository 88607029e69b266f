"""Dispatch latency: from `AgentSession.record` to a non-blocking HTTP hook's request reaching
a loopback server, at 100 events per second.

The server (a raw socket server on its own thread, in this process) stamps each request's
first bytes with `time.perf_counter()`. The baseline is the same request sent directly with the
standard library's `http.client` on a kept-alive connection, from the recording thread: the
floor of any HTTP delivery. Targets: p50 under 1 ms, p99 under 5 ms.
"""

from __future__ import annotations

import http.client
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from _common import Figure, StampingServer, bench_arguments, one_hook_session, percentile, report

SCRIPT = "bench_dispatch_latency.py"
RATE = 100.0  # events per second
TARGET_P50_MS = 1.0
TARGET_P99_MS = 5.0


def paced(count: int, send: Callable[[int], float]) -> list[float]:
    """Call send(i) at RATE per second; each returns its start stamp."""
    starts = []
    first = time.perf_counter()
    for i in range(count):
        wait = first + i / RATE - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        starts.append(send(i))
    return starts


def latencies(server: StampingServer, prefix: str, starts: list[float]) -> list[float]:
    deadline = time.monotonic() + 10
    keys = [f"{prefix}{i}" for i in range(len(starts))]
    while not all(key in server.arrivals for key in keys):
        if time.monotonic() > deadline:
            missing = sum(key not in server.arrivals for key in keys)
            raise SystemExit(f"{missing} of {len(starts)} requests never arrived")
        time.sleep(0.01)
    return [(server.arrivals[f"{prefix}{i}"] - start) * 1000 for i, start in enumerate(starts)]


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    count = 20 if args.quick else 1000
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp, StampingServer() as server:
        session = one_hook_session(Path(tmp), server.url + "/hook/${TOOL_NAME}")

        def record(i: int) -> float:
            started = time.perf_counter()
            session.record("tool-start", {"TOOL_NAME": str(i)})
            return started

        address = urlsplit(server.url)
        client = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port)
        try:

            def direct(i: int) -> float:
                started = time.perf_counter()
                client.request("POST", f"/direct/{i}", body=b'{"tool": "%d"}' % i)
                client.getresponse().read()
                return started

            paced(20, lambda i: direct(i + 10**6))  # warm up the connection
            paced(20, lambda i: record(i + 10**6))  # and the hook's lazy HTTP client
            session.engine.force_flush(5)
            hook = latencies(server, "/hook/", paced(count, record))
            baseline = latencies(server, "/direct/", paced(count, direct))
        finally:
            client.close()
        session.end()
        session.engine.shutdown(5)

    base_p50, base_p99 = percentile(baseline, 0.5), percentile(baseline, 0.99)
    figures = [
        Figure(
            benchmark="dispatch latency",
            name="record -> request at the server, p50",
            value=percentile(hook, 0.5),
            unit="ms",
            baseline=base_p50,
            baseline_name="direct http.client request p50",
            target=TARGET_P50_MS,
            checked="value",
            detail=f"{count} events at {RATE:.0f}/s",
        ),
        Figure(
            benchmark="dispatch latency",
            name="record -> request at the server, p99",
            value=percentile(hook, 0.99),
            unit="ms",
            baseline=base_p99,
            baseline_name="direct http.client request p99",
            target=TARGET_P99_MS,
            checked="value",
            detail=f"max {max(hook):.2f} ms",
        ),
    ]
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
