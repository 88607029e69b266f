"""Event -> request: from a harness event sent to a real supervisor's event socket until its
webhook's request reaches a loopback server, at 100 events per second.

The supervisor is a real `otel-lifecycle-hooks run` with the telemetry `run` sets up: spans
to the local trace file, metrics exported over OTLP/HTTP (to a loopback stand-in collector),
the journal and the hook log. Its template has one webhook on tool-start, not debounced, sent
through httpx. Each event goes through the event socket as `hook --dialect` sends it (one
connection, one line); the send is stamped with `time.perf_counter()` just before the connect,
and the server (a raw socket server on its own thread) stamps each request's first bytes with
the same clock. The baseline is a request sent directly with the standard library's
`http.client` on a kept-alive connection, interleaved with the events: the floor of any HTTP
delivery. Afterwards every event must have reached the server, every execution must have its
journal row, hook-log line and hook span, and the stand-in collector must have received
metrics. Targets: p50 under 2 ms, p99 under 10 ms.
"""

from __future__ import annotations

import http.client
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from _common import Figure, StampingServer, bench_arguments, percentile, registry_server, report
from _delivery import (
    HOOK_SPAN,
    load_average,
    send_event,
    trace_files,
    wait_for_journal,
    webhook_supervisor,
)

SCRIPT = "bench_dispatch_latency.py"
RATE = 100.0  # events per second
WARM_UP = 20
TARGET_P50_MS = 2.0
TARGET_P99_MS = 10.0


def wait_arrivals(server: StampingServer, keys: list[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(key in server.arrivals for key in keys):
        if time.monotonic() > deadline:
            missing = [key for key in keys if key not in server.arrivals]
            raise SystemExit(
                f"{len(missing)} of {len(keys)} requests never reached the server "
                f"(first missing: {missing[0]}): events were lost"
            )
        time.sleep(0.01)


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    count = 30 if args.quick else 1000
    with (
        tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp,
        StampingServer() as server,
        registry_server() as collector,
    ):
        home = Path(tmp)
        metrics_url = collector.url + "/v1/metrics"
        with webhook_supervisor(home, server.url, metrics_url=metrics_url) as supervisor:
            address = urlsplit(server.url)
            client = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port)
            try:
                # The first event imports httpx and opens the connection: not measured.
                for i in range(WARM_UP):
                    send_event(supervisor.socket_path, f"warm-{i}")
                    client.request("POST", f"/direct/warm-{i}", body=b'{"tool": "warm"}')
                    client.getresponse().read()
                    time.sleep(1 / RATE)
                wait_arrivals(server, [f"/hook/warm-{i}" for i in range(WARM_UP)])
                sent: list[float] = []
                direct_sent: list[float] = []
                first = time.perf_counter() + 0.05
                for i in range(count):
                    # The event on the tick, the direct request half a tick later.
                    wait = first + i / RATE - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    sent.append(time.perf_counter())
                    send_event(supervisor.socket_path, str(i))
                    wait = first + (i + 0.5) / RATE - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    direct_sent.append(time.perf_counter())
                    client.request("POST", f"/direct/{i}", body=b'{"tool": "%d"}' % i)
                    client.getresponse().read()
            finally:
                client.close()
            wait_arrivals(server, [f"/hook/{i}" for i in range(count)])
            executions = WARM_UP + count
            rows = wait_for_journal(supervisor.journal, executions)
        # The supervisor has stopped: its spans are written and its metrics exported.
        check_recorded(home, supervisor.hook_log, supervisor.trace_dir, rows, executions)
        if not any(path.endswith("/v1/metrics") for _, path, _ in collector.requests):
            raise SystemExit("no metrics reached the stand-in collector")
        hook = [(server.arrivals[f"/hook/{i}"] - sent[i]) * 1000 for i in range(count)]
        direct = [(server.arrivals[f"/direct/{i}"] - direct_sent[i]) * 1000 for i in range(count)]

    base_p50, base_p99 = percentile(direct, 0.5), percentile(direct, 0.99)
    load = load_average()
    figures = [
        Figure(
            benchmark="dispatch latency",
            name="event sent to the socket -> webhook request at the server, p50",
            value=percentile(hook, 0.5),
            unit="ms",
            baseline=base_p50,
            baseline_name="direct http.client request p50",
            target=TARGET_P50_MS,
            checked="value",
            detail=f"{count} events at {RATE:.0f}/s through a real run (trace file, OTLP "
            f"metrics, journal, hook log); load average {load}",
        ),
        Figure(
            benchmark="dispatch latency",
            name="event sent to the socket -> webhook request at the server, p99",
            value=percentile(hook, 0.99),
            unit="ms",
            baseline=base_p99,
            baseline_name="direct http.client request p99",
            target=TARGET_P99_MS,
            checked="value",
            detail=f"max {max(hook):.2f} ms; direct max {max(direct):.2f} ms",
        ),
    ]
    return report(SCRIPT, figures, args)


def check_recorded(home: Path, hook_log: Path, trace_dir: Path, rows: int, executions: int) -> None:
    """Every execution has its journal row, its hook-log line and its hook span."""
    from otel_lifecycle_hooks.telemetry.tracefile import spans_in_file

    lines = sum(
        "outcome=success" in line and "deliver-tool-start" in line
        for line in hook_log.read_text().splitlines()
    )
    spans = sum(
        span["name"] == HOOK_SPAN for path in trace_files(trace_dir) for span in spans_in_file(path)
    )
    found = {"journal rows": rows, "hook-log lines": lines, "hook spans": spans}
    missing = {name: value for name, value in found.items() if value != executions}
    if missing:
        raise SystemExit(f"of {executions} executions, recorded only: {missing}")


if __name__ == "__main__":
    sys.exit(main())
