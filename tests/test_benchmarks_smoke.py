"""The benchmarks still run: each script with --quick (tiny counts) prints its figures with a
baseline, a ratio and the command that reproduces it; `run_all.py` builds the wheel, installs
it into a clean venv and runs a script from there; a full run refuses the source tree. The
figures themselves are not judged here; `make bench` does that."""

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
        timeout=600,  # a hang guard: a quick run takes seconds, minutes on a loaded machine
        check=False,
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert f"reproduce: .venv/bin/python benchmarks/{script}" in completed.stdout
    figures = json.loads(results.read_text())
    assert figures
    for figure in figures:
        # A count of what may rightly not happen (connections opened once warm) may be 0.
        assert figure["value"] > 0 or figure["unit"] == "connections", figure
        assert figure["baseline"] and figure["baseline"] > 0, figure
        # Whole-process figures are judged by the median of their interleaved pairs' ratios.
        expected = figure["paired_ratio"] or figure["value"] / figure["baseline"]
        assert figure["ratio"] == pytest.approx(expected)
        assert f"{figure['name']}:" in completed.stdout
    assert any(figure["target"] is not None for figure in figures) or script in INFORMATION_ONLY


def test_a_full_run_from_the_source_tree_is_refused_before_it_measures(tmp_path: Path) -> None:
    # The development venv imports the package from the checkout (an editable install).
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_hook_path.py"), "--json", "figures.json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert "NOT MEASURED: otel_lifecycle_hooks is imported from" in completed.stderr
    assert not (tmp_path / "figures.json").exists()


def test_run_all_measures_the_wheel_installed_in_a_clean_venv(tmp_path: Path) -> None:
    build = tmp_path / "build"
    completed = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "run_all.py"),
            "--quick",
            "--runs",
            "2",
            "--only",
            "bench_harness_event.py",
            "--build-dir",
            str(build),
        ],
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard: it builds a wheel and a venv
        check=False,
        cwd=tmp_path,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-3000:]
    venv_python = build / "venv" / "bin" / "python"
    # The scripts ran with the venv's python, and it imports the wheel's copy, not the source.
    assert f"reproduce: {venv_python} benchmarks/bench_harness_event.py" in output
    assert "is imported from" not in output
    installed = subprocess.run(
        [
            str(venv_python),
            "-c",
            "import otel_lifecycle_hooks; print(otel_lifecycle_hooks.__file__)",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert installed.startswith(str(build / "venv" / "lib"))
    assert list((Path(installed).parent / "__pycache__").glob("*.pyc")), "pip compiled nothing"
    # Two rounds, aggregated: the median with its spread.
    row = next(line for line in output.splitlines() if "| Claude Code event, command path" in line)
    assert "x (" in row and "–" in row
