"""Throughput: webhook deliveries per second from one agent to a loopback server, over reused
connections, versus the same with a new connection per request (the server closes each).

The agent is set up as a supervisor has it: an SDK tracer provider exporting every span to the
local trace file through a batch processor, SDK metrics (read in memory here), the journal
and the hook log as real files. The server is another process (`loopback_server.py`), so
this process pays only for the agent's work. Events are recorded as fast as the caller can;
the figure is deliveries that reached the server divided by the time from the first record to
the last arrival. Each run then checks that every execution has its journal row, its hook-log
line, its hook span and CLIENT span and its count in the metrics, so that a fast figure cannot
come from work left undone. Target: at least 1,000 per second with connections reused.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _common import Figure, LoopbackServerProcess, bench_arguments, one_hook_session, report

SCRIPT = "bench_throughput.py"
TARGET_PER_SECOND = 1000.0
HOOK_SPAN = "agent.lifecycle_hook"
EXECUTIONS_METRIC = "agent.lifecycle_hook.executions"


@dataclass(frozen=True)
class Run:
    per_second: float
    cpu_ms_per_delivery: float  # this process only: the server's CPU is its own


def one_run(count: int, close_connections: bool) -> Run:
    """`count` deliveries through one agent; raises if any execution was not fully recorded."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from otel_lifecycle_hooks.telemetry.setup import configure_telemetry

    with (
        tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp,
        LoopbackServerProcess(close_connections=close_connections) as server,
    ):
        directory = Path(tmp)
        trace_file = directory / "traces.jsonl"
        telemetry = configure_telemetry(environ={"HOME": tmp}, trace_file=trace_file)
        metric_reader = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[metric_reader])
        # The queue holds every event: this measures delivery, not the drop policy.
        session = one_hook_session(
            directory,
            server.url + "/hook/${TOOL_NAME}",
            "webhook",
            queue_limit=count + 1,
            tracer_provider=telemetry.tracer_provider,
            meter_provider=meter_provider,
        )
        server.expect(1)
        session.record("tool-start", {"TOOL_NAME": "warm-up"})
        server.wait_arrivals(30)
        session.engine.force_flush(10)
        server.expect(count)
        started, cpu_started = time.perf_counter(), time.process_time()
        for i in range(count):
            session.record("tool-start", {"TOOL_NAME": str(i)})
        arrivals = server.wait_arrivals(120)
        # CPU until every execution is recorded and every span written: all of it is the agent's.
        session.engine.force_flush(30)
        telemetry.force_flush(30)
        cpu_ms = (time.process_time() - cpu_started) * 1000 / count
        session.end()
        session.engine.shutdown(10)
        telemetry.shutdown()
        if arrivals.distinct_paths != count:
            raise SystemExit(f"{arrivals.distinct_paths} distinct deliveries of {count} arrived")
        check_recorded(directory, trace_file, metric_reader, count + 1)
        return Run(count / (arrivals.last - started), cpu_ms)


def check_recorded(
    directory: Path, trace_file: Path, metric_reader: object, executions: int
) -> None:
    """Every execution (warm-up included) has its journal row, hook-log line, hook span,
    CLIENT span and count in the executions metric."""
    import sqlite3

    with sqlite3.connect(directory / "journal.db") as db:
        rows = db.execute("SELECT COUNT(*) FROM executions WHERE outcome = 'success'").fetchone()[0]
    lines = sum(
        "outcome=success" in line for line in (directory / "agent.log").read_text().splitlines()
    )
    spans = [json.loads(line) for line in trace_file.read_text().splitlines()]
    hook_spans = sum(span.get("name") == HOOK_SPAN for span in spans)
    client_spans = sum(span.get("kind") in ("CLIENT", "SpanKind.CLIENT") for span in spans)
    counted = executions_counted(metric_reader)
    found = {
        "journal rows": rows,
        "hook-log lines": lines,
        "hook spans": hook_spans,
        "CLIENT spans": client_spans,
        "executions metric": counted,
    }
    missing = {name: value for name, value in found.items() if value != executions}
    if missing:
        raise SystemExit(f"of {executions} executions, recorded only: {missing}")


def executions_counted(metric_reader: object) -> int:
    data = metric_reader.get_metrics_data()  # type: ignore[attr-defined]
    total = 0
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == EXECUTIONS_METRIC:
                    total += sum(int(point.value) for point in metric.data.data_points)
    return total


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    count, rounds = (100, 1) if args.quick else (2000, 3)
    reused: list[Run] = []
    fresh: list[Run] = []
    for _ in range(rounds):  # interleaved, so that a burst of noise hits both alike
        reused.append(one_run(count, close_connections=False))
        fresh.append(one_run(count, close_connections=True))

    def median(runs: list[Run], field: str) -> float:
        return statistics.median(getattr(run, field) for run in runs)

    figures = [
        Figure(
            benchmark="throughput",
            name="webhook deliveries per second, connections reused, median",
            value=median(reused, "per_second"),
            unit="/s",
            baseline=median(fresh, "per_second"),
            baseline_name="a new connection per request",
            target=TARGET_PER_SECOND,
            checked="min",
            detail=f"{rounds} runs of {count} deliveries to a server in another process, each "
            "delivery with its hook span, CLIENT span, metrics, journal row and hook-log line; "
            f"agent CPU per delivery {median(reused, 'cpu_ms_per_delivery'):.2f} ms reused, "
            f"{median(fresh, 'cpu_ms_per_delivery'):.2f} ms with new connections; runs "
            + ", ".join(f"{run.per_second:.0f}" for run in reused)
            + " /s reused",
        )
    ]
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
