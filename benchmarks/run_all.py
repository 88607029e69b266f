"""Run every benchmark, print its figures, and keep the table in docs/performance.md.

    .venv/bin/python benchmarks/run_all.py            # all of them; rewrites the table
    .venv/bin/python benchmarks/run_all.py --quick    # tiny counts; the doc is left alone

Each `bench_*.py` runs in its own process (a benchmark must not inherit another's imports or
threads) and prints its own figures, baselines, ratios and the command that reproduces it.
Exits 1 when a target was missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import BENCH_DIR, REPO_DIR, Figure, format_number

DOC = REPO_DIR / "docs" / "performance.md"
TABLE_START = "<!-- benchmark table: written by benchmarks/run_all.py -->"
TABLE_END = "<!-- end of benchmark table -->"
# In the order of the targets.
SCRIPTS = [
    "bench_hook_path.py",
    "bench_processor_overhead.py",
    "bench_dispatch_latency.py",
    "bench_delivery_cpu.py",
    "bench_throughput.py",
    "bench_script_spawn.py",
    "bench_memory.py",
    "bench_startup.py",
    "bench_harness_event.py",
    "bench_hook_scale.py",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts; leave the doc alone")
    parser.add_argument("--only", action="append", default=[], metavar="SCRIPT")
    args = parser.parse_args()
    scripts = [s for s in SCRIPTS if not args.only or s in args.only]
    figures: list[Figure] = []
    failed: list[str] = []
    started = time.monotonic()
    cpu_before = cpu_times()
    with tempfile.TemporaryDirectory(prefix="bench-results-") as tmp:
        for script in scripts:
            results = Path(tmp) / f"{script}.json"
            argv = [sys.executable, str(BENCH_DIR / script), "--json", str(results)]
            if args.quick:
                argv.append("--quick")
            completed = subprocess.run(argv, cwd=REPO_DIR, check=False)
            if not results.exists():
                failed.append(f"{script} (exit {completed.returncode}, no figures)")
                continue
            for data in json.loads(results.read_text()):
                for derived in ("ratio", "met", "target_text"):
                    data.pop(derived, None)
                figures.append(Figure(**data))
    elapsed = time.monotonic() - started
    table = render_table(figures, machine(cpu_before, cpu_times()), elapsed, args.quick)
    print()
    print(table)
    if not args.quick and not args.only:
        write_table(table)
        print(f"\n(written to {DOC.relative_to(REPO_DIR)})")
    missed = [f"{f.benchmark}: {f.name}" for f in figures if f.met is False]
    for line in failed:
        print(f"FAILED: {line}")
    if missed and not args.quick:
        print("targets missed: " + "; ".join(missed))
    return 1 if failed or (missed and not args.quick) else 0


def cpu_times() -> list[int]:
    """The machine's CPU time counters (user, nice, system, idle, iowait, irq, softirq, steal),
    in clock ticks; empty where /proc/stat is not there."""
    try:
        with open("/proc/stat") as stat:
            return [int(field) for field in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return []


def machine(cpu_before: list[int] | None = None, cpu_after: list[int] | None = None) -> str:
    """nproc, CPU model, Python, load, and the CPU time the host took from this (virtual)
    machine during the run: what a reader needs to compare figures across runs."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        load = ", load average at the end {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
    steal = ""
    if cpu_before and cpu_after and len(cpu_before) == len(cpu_after) == 8:
        spent = [after - before for before, after in zip(cpu_before, cpu_after, strict=True)]
        if sum(spent) > 0:
            steal = f", CPU stolen by the host {100 * spent[7] / sum(spent):.1f}%"
    return (
        f"{os.cpu_count()} CPUs (nproc), {model}, Python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.system()} {platform.release()}"
        f"{load}{steal}"
    )


def render_table(figures: list[Figure], machine_text: str, elapsed: float, quick: bool) -> str:
    quick_note = " (quick: counts too small to judge)" if quick else ""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"Run {when} on {machine_text}; {elapsed:.0f} s{quick_note}.",
        "",
        "| benchmark | figure | value | baseline | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        baseline = (
            f"{format_number(f.baseline)} {f.unit} ({f.baseline_name})"
            if f.baseline is not None
            else "-"
        )
        ratio = f"{f.ratio:.2f}x" if f.ratio is not None else "-"
        met = {True: "yes", False: "**no**", None: ""}[f.met]
        lines.append(
            f"| {f.benchmark} | {f.name} | {format_number(f.value)} {f.unit} | {baseline} | {ratio} "
            f"| {f.target_text} | {met} |"
        )
    return "\n".join(lines)


def write_table(table: str) -> None:
    """Replace the table between the markers in docs/performance.md, keeping the notes."""
    text = DOC.read_text() if DOC.exists() else f"# Performance\n\n{TABLE_START}\n{TABLE_END}\n"
    if TABLE_START not in text or TABLE_END not in text:
        text += f"\n{TABLE_START}\n{TABLE_END}\n"
    head, _, rest = text.partition(TABLE_START)
    _, _, tail = rest.partition(TABLE_END)
    DOC.write_text(f"{head}{TABLE_START}\n{table}\n{TABLE_END}{tail}")


if __name__ == "__main__":
    sys.exit(main())
