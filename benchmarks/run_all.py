"""Run every benchmark from a wheel installed in a clean venv, several times, and keep the
table in docs/performance.md.

    make bench                                        # the same as the next line
    .venv/bin/python benchmarks/run_all.py            # wheel, clean venv, 3 rounds; the doc
    .venv/bin/python benchmarks/run_all.py --runs 5   # more rounds
    .venv/bin/python benchmarks/run_all.py --quick    # tiny counts, one round; doc left alone
    .venv/bin/python benchmarks/run_all.py --python .venv/bin/python --quick   # no wheel

The wheel is built from this checkout (`pip wheel --no-deps`) and installed with its
dependencies into a fresh venv under build/bench (see wheel_venv.py); every `bench_*.py` runs
with that venv's python, in its own process (a benchmark must not inherit another's imports
or threads) and from a neutral working directory (never the checkout, whose package would
shadow the installed one). Rounds are interleaved: every script once, then every script
again, so that a slow spell of the machine hits each script in one round, not all of one
script's runs. Each figure is aggregated by (benchmark, name) over the rounds: the median of
its value and of its ratio, with their minimum and maximum; a target is met only when the
median meets it. Exits 1 when a target was missed on its median, or a script failed (it
exits 2 when the work it timed was not all done, or it did not measure an installed copy).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from _common import BENCH_DIR, REPO_DIR, Figure, format_number
from wheel_venv import prepare

DOC = REPO_DIR / "docs" / "performance.md"
BUILD_DIR = REPO_DIR / "build" / "bench"
TABLE_START = "<!-- benchmark table: written by benchmarks/run_all.py -->"
TABLE_END = "<!-- end of benchmark table -->"
DEFAULT_RUNS = 3
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
    "bench_gate.py",
    "bench_hook_scale.py",
    "bench_agents.py",
    "bench_ui_api.py",
]
_FIGURE_FIELDS = {f.name for f in fields(Figure)}


@dataclass
class Aggregate:
    """One figure over the rounds: the `Figure` of each round in which it was measured."""

    runs: list[Figure] = field(default_factory=list)

    @property
    def first(self) -> Figure:
        return self.runs[0]

    def values(self) -> list[float]:
        return [f.value for f in self.runs]

    def ratios(self) -> list[float]:
        return [f.ratio for f in self.runs if f.ratio is not None]

    def median(self) -> Figure:
        """The figure as judged: median value and baseline, and the median of the rounds'
        ratios (each round's own: paired, or value / baseline)."""
        baselines = [f.baseline for f in self.runs if f.baseline is not None]
        ratios = self.ratios()
        targets = [f.target for f in self.runs if f.target is not None]
        first = self.first
        return Figure(
            benchmark=first.benchmark,
            name=first.name,
            value=statistics.median(self.values()),
            unit=first.unit,
            baseline=statistics.median(baselines) if baselines else None,
            baseline_name=first.baseline_name,
            # A target is the same in every round, unless a script derives it from what it
            # measured: then the rounds' median target is the fair one.
            target=statistics.median(targets) if targets else None,
            checked=first.checked,
            detail=first.detail,
            paired_ratio=statistics.median(ratios) if ratios else None,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts; leave the doc alone")
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        metavar="N",
        help=f"rounds over the scripts (default {DEFAULT_RUNS}, 1 with --quick)",
    )
    parser.add_argument("--only", action="append", default=[], metavar="SCRIPT")
    parser.add_argument(
        "--python",
        metavar="PATH",
        help="run the scripts with this interpreter instead of building the "
        "wheel venv (figures are then not of an install: quick runs only)",
    )
    parser.add_argument(
        "--build-dir",
        type=Path,
        default=BUILD_DIR,
        help="where the wheel and the clean venv are made (default build/bench)",
    )
    args = parser.parse_args()
    runs = args.runs if args.runs is not None else (1 if args.quick else DEFAULT_RUNS)
    if runs < 1:
        parser.error("--runs must be at least 1")
    unknown = [s for s in args.only if s not in SCRIPTS]
    if unknown:
        parser.error(f"not a benchmark of run_all: {', '.join(unknown)}")
    scripts = [s for s in SCRIPTS if not args.only or s in args.only]
    started = time.monotonic()
    python = args.python or str(prepare(args.build_dir))
    aggregates: dict[tuple[str, str], Aggregate] = {}
    failed: list[str] = []
    cpu_before = cpu_times()
    with tempfile.TemporaryDirectory(prefix="bench-results-") as tmp:
        for round_number in range(1, runs + 1):
            for script in scripts:
                results = Path(tmp) / f"{round_number}-{script}.json"
                argv = [python, str(BENCH_DIR / script), "--json", str(results)]
                if args.quick:
                    argv.append("--quick")
                script_started = time.monotonic()
                # A neutral working directory: `python -c` and `-m` put it on sys.path.
                completed = subprocess.run(argv, cwd=tmp, env=script_env(), check=False)
                print(
                    f"[round {round_number}/{runs}: {script} exit {completed.returncode}, "
                    f"{time.monotonic() - script_started:.0f} s]",
                    flush=True,
                )
                if completed.returncode not in (0, 1) or not results.exists():
                    failed.append(f"{script} round {round_number} (exit {completed.returncode})")
                    continue
                for data in json.loads(results.read_text()):
                    figure = Figure(**{k: v for k, v in data.items() if k in _FIGURE_FIELDS})
                    key = (figure.benchmark, figure.name)
                    aggregates.setdefault(key, Aggregate()).runs.append(figure)
    elapsed = time.monotonic() - started
    machine_text = machine(cpu_before, cpu_times())
    table = render_table(list(aggregates.values()), machine_text, elapsed, runs, args.quick)
    if failed:
        # In the doc too: a round whose work was not all done has no figures in the table.
        table += "\n\n" + "\n".join(f"Failed: {line}." for line in failed)
    print()
    print(table)
    if not args.quick and not args.only and not args.python:
        write_table(table)
        print(f"\n(written to {DOC.relative_to(REPO_DIR)})")
    missed = [f"{b}: {n}" for (b, n), a in aggregates.items() if a.median().met is False]
    for line in failed:
        print(f"FAILED: {line}")
    if missed and not args.quick:
        print("targets missed on the median: " + "; ".join(missed))
    return 1 if failed or (missed and not args.quick) else 0


def script_env() -> dict[str, str]:
    """Ours, without PYTHONPATH: nothing but the interpreter's own site decides what is
    imported."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


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


def render_table(
    aggregates: list[Aggregate], machine_text: str, elapsed: float, runs: int, quick: bool
) -> str:
    quick_note = " (quick: counts too small to judge)" if quick else ""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        (
            f"Run {when} on {machine_text}; {runs} round{'s' if runs != 1 else ''} over the "
            f"scripts, {elapsed:.0f} s{quick_note}. Value and ratio: median of the rounds "
            "(lowest–highest); a target is met when the median meets it."
        ),
        "",
        "| benchmark | figure | value | baseline | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for aggregate in aggregates:
        f = aggregate.median()
        values, ratios = aggregate.values(), aggregate.ratios()
        value = f"{format_number(f.value)} {f.unit}"
        if len(values) > 1:
            value += f" ({format_number(min(values))}–{format_number(max(values))})"
        baseline = (
            f"{format_number(f.baseline)} {f.unit} ({f.baseline_name})"
            if f.baseline is not None
            else "-"
        )
        ratio = f"{f.ratio:.2f}x" if f.ratio is not None else "-"
        if f.ratio is not None and len(ratios) > 1:
            ratio += f" ({min(ratios):.2f}–{max(ratios):.2f})"
        met = {True: "yes", False: "**no**", None: ""}[f.met]
        if len(aggregate.runs) < runs:
            met += f" ({len(aggregate.runs)} of {runs} rounds)"
        lines.append(
            f"| {f.benchmark} | {f.name} | {value} | {baseline} | {ratio} "
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
