"""The benchmarks still run: each script with --quick (tiny counts) prints its figures with a
baseline, a ratio and the command that reproduces it. The figures themselves are not judged
here; `make bench` does that."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("bench_*.py"))
# Scripts whose figures are shown for information, with no target (their former targets are gone).
INFORMATION_ONLY = {"bench_script_spawn.py", "bench_throughput.py"}


def test_every_benchmark_is_run_by_run_all() -> None:
    run_all = (BENCHMARKS / "run_all.py").read_text()
    assert SCRIPTS and all(f'"{script}"' in run_all for script in SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_runs_quick_and_reports_figures_against_a_baseline(
    script: str, tmp_path: Path
) -> None:
    results = tmp_path / "figures.json"
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", "--json", str(results)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=BENCHMARKS.parent,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert f"reproduce: .venv/bin/python benchmarks/{script}" in completed.stdout
    figures = json.loads(results.read_text())
    assert figures
    for figure in figures:
        assert figure["value"] > 0
        assert figure["baseline"] and figure["baseline"] > 0, figure
        # Whole-process figures are judged by the median of their interleaved pairs' ratios.
        expected = figure["paired_ratio"] or figure["value"] / figure["baseline"]
        assert figure["ratio"] == pytest.approx(expected)
        assert f"{figure['name']}:" in completed.stdout
    assert any(figure["target"] is not None for figure in figures) or script in INFORMATION_ONLY
