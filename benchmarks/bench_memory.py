"""Memory and disk: a real supervisor's resident memory after 100,000 events, each delivered by
a webhook that is not debounced, against what it was after the first 1,024; the local trace
files it leaves on disk against their size bound; the journal's growth per delivery.

The supervisor is a real `otel-lifecycle-hooks run` with the telemetry `run` sets up (spans
to the local trace file, rotated at its size bound; the journal; the hook log; metrics over
OTLP/HTTP to a loopback stand-in collector), one webhook on tool-start to a loopback server
in another process. Events go through the event socket as `hook --dialect` writes them (ten
lines per connection here, to keep the run short), never more than 256 ahead of the server's
arrivals, so that none is dropped by the hook's queue. While they run, the trace files'
sizes are read every 0.2 s. Afterwards every event must have reached the server, every
execution must have its journal row, and the trace files must have been rotated and never
have taken more than the bound: the current file at most its limit
(`LIFECYCLE_HOOKS_TRACE_FILE_MAX_BYTES`, default 20 MiB), with at most
`LIFECYCLE_HOOKS_TRACE_FILE_KEEP` (default 3) rotated files of at most as much. Target: RSS
growth within 10 MiB. The journal's bytes per delivery are stated (no target): the journal
keeps every row until its retention setting removes them.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

from _common import Figure, bench_arguments, registry_server, report, rss_kib, wait_until_idle
from _delivery import (
    SPANS_PER_DELIVERY,
    CountingServer,
    RunningSupervisor,
    load_average,
    send_flow_controlled,
    trace_files,
    trace_lines,
    wait_for_journal,
    wait_for_trace_lines,
    webhook_supervisor,
)

SCRIPT = "bench_memory.py"
TARGET_GROWTH_MIB = 10.0
DEFAULT_MAX_BYTES = 20 * 1024 * 1024  # telemetry/tracefile.py's defaults, as users get them
DEFAULT_KEEP = 3
QUICK_MAX_BYTES = 256 * 1024  # --quick: small enough that a few hundred events rotate
MIB = 1024 * 1024


class TraceDiskWatch:
    """Reads the trace files' sizes every 0.2 s on a thread: the largest total and the
    largest single file seen, and how many distinct rotated files were seen."""

    def __init__(self, trace_dir: Path) -> None:
        self.trace_dir = trace_dir
        self.largest_total = 0
        self.largest_file = 0
        self.most_files = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.read()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            self.read()

    def read(self) -> None:
        sizes = []
        for path in trace_files(self.trace_dir):
            try:
                sizes.append(path.stat().st_size)
            except FileNotFoundError:  # rotated away between the listing and the stat
                continue
        if sizes:
            self.largest_total = max(self.largest_total, sum(sizes))
            self.largest_file = max(self.largest_file, max(sizes))
            self.most_files = max(self.most_files, len(sizes))


def journal_bytes(supervisor: RunningSupervisor) -> int:
    """The journal's file with its write-ahead log."""
    total = 0
    for suffix in ("", "-wal"):
        path = supervisor.journal.with_name(supervisor.journal.name + suffix)
        if path.exists():
            total += path.stat().st_size
    return total


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    warm, total = (256, 1_024) if args.quick else (1_024, 100_000)
    max_bytes = QUICK_MAX_BYTES if args.quick else DEFAULT_MAX_BYTES
    bound = max_bytes * (DEFAULT_KEEP + 1)
    extra = {"LIFECYCLE_HOOKS_TRACE_FILE_MAX_BYTES": str(max_bytes)} if args.quick else {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp,
        CountingServer() as server,
        registry_server() as collector,
    ):
        home = Path(tmp)
        metrics_url = collector.url + "/v1/metrics"
        with webhook_supervisor(home, server.url, metrics_url, **extra) as supervisor:
            pid = supervisor.pid
            wait_until_idle(pid)
            journal_at_start = journal_bytes(supervisor)
            server.expect(warm)
            send_flow_controlled(server, supervisor.socket_path, 0, warm)
            server.wait_arrivals(60)
            check_journal(supervisor, warm)
            spans_warm = wait_for_trace_lines(supervisor.trace_dir, SPANS_PER_DELIVERY * warm)
            trace_per_delivery = sum(p.stat().st_size for p in trace_files(supervisor.trace_dir))
            trace_per_delivery /= warm
            if not args.quick and spans_warm != SPANS_PER_DELIVERY * warm:
                raise SystemExit(f"{spans_warm} spans written for {warm} deliveries")
            wait_until_idle(pid)
            rss_warm = rss_kib(pid)
            log_warm = supervisor.hook_log.stat().st_size
            started = time.perf_counter()
            with TraceDiskWatch(supervisor.trace_dir) as disk:
                server.expect(total - warm)
                send_flow_controlled(
                    server, supervisor.socket_path, warm, total - warm, lines_per_connection=10
                )
                arrivals = server.wait_arrivals(120)
                elapsed = time.perf_counter() - started
                check_journal(supervisor, total)
                wait_until_idle(pid, timeout=120)
            rss_all = rss_kib(pid)
            log_per_delivery = (supervisor.hook_log.stat().st_size - log_warm) / (total - warm)
        # Stopped: the journal is checkpointed into its file, the last spans are written.
        journal_per_delivery = (journal_bytes(supervisor) - journal_at_start) / total
        files = trace_files(supervisor.trace_dir)
        remaining_spans = trace_lines(supervisor.trace_dir)
        if arrivals.distinct_paths != total - warm:
            raise SystemExit(f"{arrivals.distinct_paths} distinct deliveries of {total - warm}")
        if not any(path.endswith("/v1/metrics") for _, path, _ in collector.requests):
            raise SystemExit("no metrics reached the stand-in collector")
        check_trace_files(files, disk, max_bytes, bound)

    growth = (rss_all - rss_warm) / 1024
    load = load_average()
    figures = [
        Figure(
            benchmark="memory",
            name=f"supervisor RSS after {total:,} webhook deliveries",
            value=rss_all / 1024,
            unit="MiB",
            baseline=rss_warm / 1024,
            baseline_name=f"after {warm:,}",
            target=TARGET_GROWTH_MIB,
            checked="growth",
            detail=f"growth {growth:+.1f} MiB; {total - warm:,} deliveries in {elapsed:.0f} s "
            f"({(total - warm) / elapsed:.0f}/s); load average {load}",
        ),
        Figure(
            benchmark="memory",
            name="trace files on disk, the most seen during the run",
            value=disk.largest_total / MIB,
            unit="MiB",
            baseline=bound / MIB,
            baseline_name=f"the bound: {DEFAULT_KEEP} rotated files + the current one, "
            f"{max_bytes / MIB:g} MiB each",
            target=bound / MIB,
            checked="value",
            detail=f"{trace_per_delivery:.0f} bytes of spans per delivery, so "
            f"{trace_per_delivery * total / MIB:.0f} MiB without rotation; largest file "
            f"{disk.largest_file / MIB:.1f} MiB; {len(files)} files kept at the end, "
            f"holding the last {remaining_spans:,} spans",
        ),
        Figure(
            benchmark="memory",
            name="journal growth per delivery",
            value=journal_per_delivery,
            unit="bytes",
            baseline=trace_per_delivery,
            baseline_name="trace file bytes per delivery (its two spans)",
            detail=f"{journal_per_delivery * total / MIB:.1f} MiB for {total:,} deliveries, "
            f"kept until the journal's retention removes them; hook log "
            f"{log_per_delivery:.0f} bytes per delivery",
        ),
    ]
    return report(SCRIPT, figures, args)


def check_journal(supervisor: RunningSupervisor, executions: int) -> None:
    rows = wait_for_journal(supervisor.journal, executions)
    if rows != executions:
        raise SystemExit(f"{rows} journal rows for {executions} executions")


def check_trace_files(files: list[Path], disk: TraceDiskWatch, max_bytes: int, bound: int) -> None:
    """Rotated at the bound: rotated files exist, never more than `keep` of them, no file
    past its limit, and never more than the bound on disk."""
    rotated = [path for path in files if not path.name.endswith(".jsonl")]
    if not rotated:
        raise SystemExit(f"the trace file was never rotated: {[p.name for p in files]}")
    if len(rotated) > DEFAULT_KEEP:
        raise SystemExit(f"{len(rotated)} rotated trace files kept, more than {DEFAULT_KEEP}")
    if disk.largest_file > max_bytes or disk.largest_total > bound:
        raise SystemExit(
            f"trace files took {disk.largest_total} bytes (largest {disk.largest_file}), "
            f"past the bound of {bound} ({max_bytes} a file)"
        )


if __name__ == "__main__":
    sys.exit(main())
