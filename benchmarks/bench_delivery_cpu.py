"""Delivery CPU: what the package adds per delivery over the HTTP client it uses. The CPU a
real supervisor spends per webhook delivery, against a bare instrumented httpx request to the
same loopback server.

The subject is a real `otel-lifecycle-hooks run` with one non-debounced webhook on tool-start
(sent through httpx), and the telemetry `run` sets up: spans to the local trace file, the
journal, the hook log and metrics exported over OTLP/HTTP to a loopback stand-in collector.
Events reach it through its event socket as `hook --dialect` sends them, one connection each.
A second supervisor with `run`'s defaults (no metrics exporter: the API's no-op meters) is
shown beside it. The baseline (`bare_httpx_client.py`, its own process) is an `httpx.Client`
instrumented with opentelemetry-instrumentation-httpx on an SDK tracer provider that writes
its spans through a batch processor to a trace file, as `run` does: one CLIENT span per
request, nothing else. Both send the same body at the same rate to one server in another
process, interleaved rounds; a process's CPU is read from /proc (utime + stime, all threads)
before a round and once every request of it arrived, every journal row is committed and every
span is written. Target: the supervisor's CPU per delivery at most 2x the baseline's.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from _common import (
    BENCH_DIR,
    Figure,
    LoopbackServerProcess,
    Samples,
    bench_arguments,
    cpu_ticks,
    interleave,
    paired_ratio,
    registry_server,
    report,
)
from _delivery import (
    SPANS_PER_DELIVERY,
    RunningSupervisor,
    load_average,
    send_event,
    supervisor_errors,
    trace_lines,
    wait_for_journal,
    wait_for_trace_lines,
    webhook_supervisor,
)

SCRIPT = "bench_delivery_cpu.py"
TARGET_RATIO = 2.0
RATE = 256.0  # deliveries per second, within what one hook sustains on a loaded machine
# Multiples of 256: every batch processor's batch (512 spans, two per delivery) is full at
# the end of a round, so no round waits for the processor's 5 s schedule delay.
WARM_UP = 256
TICK_MS = 1000.0 / 100  # /proc reports CPU in clock ticks (USER_HZ, 100 on Linux)


class SupervisorSide:
    """A running supervisor and the deliveries it has made so far."""

    def __init__(self, supervisor: RunningSupervisor, server: LoopbackServerProcess) -> None:
        self.supervisor = supervisor
        self.server = server
        self.delivered = 0

    def deliver(self, count: int) -> None:
        """`count` events through the socket at RATE; returns once all their work is done."""
        first = self.delivered
        self.server.expect(count)
        started = time.perf_counter()
        for i in range(count):
            wait = started + i / RATE - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            send_event(self.supervisor.socket_path, str(first + i))
        arrivals = self.server.wait_arrivals(60)
        if arrivals.distinct_paths != count:
            raise SystemExit(f"{arrivals.distinct_paths} distinct deliveries of {count} arrived")
        self.delivered += count
        rows = wait_for_journal(self.supervisor.journal, self.delivered)
        if rows != self.delivered:
            raise SystemExit(f"{rows} journal rows for {self.delivered} deliveries")
        spans = SPANS_PER_DELIVERY * self.delivered
        written = wait_for_trace_lines(self.supervisor.trace_dir, spans)
        if written != spans:
            raise SystemExit(f"{written} spans in the trace file for {spans} expected")

    def measured(self, count: int) -> Callable[[], float]:
        def run() -> float:
            before = self.supervisor.cpu_ticks()
            self.deliver(count)
            return (self.supervisor.cpu_ticks() - before) * TICK_MS / count

        return run


class BareSide:
    """`bare_httpx_client.py` in its own process."""

    def __init__(self, server: LoopbackServerProcess, trace_file: Path) -> None:
        self.server = server
        self.sent = 0
        self.process = subprocess.Popen(
            [sys.executable, str(BENCH_DIR / "bare_httpx_client.py"), server.url, str(trace_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(30)

    def deliver(self, count: int) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.server.expect(count)
        self.process.stdin.write(f"run {self.sent} {count} {RATE}\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().split()
        arrivals = self.server.wait_arrivals(60)
        self.sent += count
        if answer[:1] != ["done"] or arrivals.distinct_paths != count:
            raise SystemExit(f"the bare client's round failed: {answer}, {arrivals}")
        if int(answer[1]) != self.sent:
            raise SystemExit(f"the bare client wrote {answer[1]} spans for {self.sent} requests")

    def measured(self, count: int) -> Callable[[], float]:
        def run() -> float:
            before = cpu_ticks(self.process.pid)
            self.deliver(count)
            return (cpu_ticks(self.process.pid) - before) * TICK_MS / count

        return run


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    count, rounds = (256, 1) if args.quick else (1024, 3)
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-cpu-")))
        collector = stack.enter_context(registry_server())
        sides: dict[str, SupervisorSide | BareSide] = {}
        for name, metrics_url in (
            ("run", collector.url + "/v1/metrics"),
            ("run, no metrics exporter", None),
        ):
            home = tmp / name.replace(" ", "-").replace(",", "")
            home.mkdir()
            server = stack.enter_context(LoopbackServerProcess())
            supervisor = stack.enter_context(webhook_supervisor(home, server.url, metrics_url))
            sides[name] = SupervisorSide(supervisor, server)
        bare_server = stack.enter_context(LoopbackServerProcess())
        bare = BareSide(bare_server, tmp / "bare-traces.jsonl")
        stack.callback(bare.close)
        sides["bare"] = bare
        try:
            for side in sides.values():
                side.deliver(WARM_UP)  # imports, connections, first journal rows
            samples = interleave(rounds, {n: s.measured(count) for n, s in sides.items()})
        except SystemExit:
            for side in sides.values():
                if isinstance(side, SupervisorSide):
                    print(supervisor_errors(side.supervisor.home), file=sys.stderr)
            raise
        for side in sides.values():
            if isinstance(side, SupervisorSide) and trace_lines(side.supervisor.trace_dir) == 0:
                raise SystemExit("a supervisor wrote no trace file")
    if not any(path.endswith("/v1/metrics") for _, path, _ in collector.requests):
        raise SystemExit("no metrics reached the stand-in collector")

    load = load_average()
    base: Samples = samples["bare"]
    figures = []
    for name, target in (("run", TARGET_RATIO), ("run, no metrics exporter", None)):
        subject = samples[name]
        figures.append(
            Figure(
                benchmark="delivery cpu",
                name=f"supervisor CPU per webhook delivery ({name}), median",
                value=subject.median * 1000,
                unit="us",
                baseline=base.median * 1000,
                baseline_name="bare instrumented httpx request, trace file, median",
                target=target,
                paired_ratio=paired_ratio(subject, base),
                detail=f"{rounds} interleaved rounds of {count} deliveries at {RATE:.0f}/s; "
                f"rounds {', '.join(f'{v * 1000:.0f}' for v in subject.values)} us, bare "
                f"{', '.join(f'{v * 1000:.0f}' for v in base.values)} us; "
                f"ratio of the medians {subject.median / base.median:.2f}x; "
                f"load average {load}",
            )
        )
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
