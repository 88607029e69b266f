"""The package as users get it: a wheel built from this checkout, installed with its
dependencies into a virtual environment made for the purpose.

    .venv/bin/python benchmarks/wheel_venv.py build/bench     # prints the venv's python

`make bench` benchmarks that environment, never the development one: an editable install's
`.pth` finder imports modules in every interpreter of its venv (baseline and subject alike),
and the source tree holds no bytecode until something writes it. pip installs the wheel as a
user's `pip install` would (dependencies from the configured index, through pip's own cache)
and byte-compiles what it installs, as it does by default.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
PACKAGE = "otel_lifecycle_hooks"


def pip_env() -> dict[str, str]:
    """pip as the machine configures it (its index, find-links, cache), quiet about itself."""
    env = dict(os.environ)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.pop("PYTHONPATH", None)
    return env


def build_wheel(out_dir: Path, python: str = sys.executable) -> Path:
    """`pip wheel --no-deps` of this checkout into `out_dir`; the wheel's path."""
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    _run(
        [
            python,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(out_dir),
            str(REPO_DIR),
        ]
    )
    wheels = sorted(out_dir.glob(f"{PACKAGE}-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one wheel in {out_dir}, found {[w.name for w in wheels]}")
    return wheels[0]


def make_venv(venv_dir: Path, wheel: Path, python: str | None = None) -> Path:
    """A fresh venv at `venv_dir` (an earlier one is removed) with `wheel` and its
    dependencies installed and byte-compiled; the venv's python. The `[postgres]` extra comes
    too, as a fleet's install has it: bench_ui_api.py measures the PostgreSQL journal with it;
    nothing else imports it unless its journal is PostgreSQL."""
    base = python or str(getattr(sys, "_base_executable", sys.executable))
    shutil.rmtree(venv_dir, ignore_errors=True)
    _run([base, "-m", "venv", str(venv_dir)])
    venv_python = venv_dir / "bin" / "python"
    _run([str(venv_python), "-m", "pip", "install", "--quiet", f"{wheel}[postgres]"])
    check_installed(venv_python)
    return venv_python


def check_installed(venv_python: Path) -> str:
    """The package's location as `venv_python` imports it from a neutral directory; raises
    unless it is the venv's own site-packages copy."""
    completed = subprocess.run(
        [str(venv_python), "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
        capture_output=True,
        text=True,
        cwd=venv_python.parent,
        env=pip_env(),
        check=False,
    )
    location = completed.stdout.strip()
    prefix = str(venv_python.parent.parent.resolve())
    if completed.returncode != 0 or not os.path.realpath(location).startswith(prefix + os.sep):
        raise RuntimeError(
            f"{venv_python} imports {PACKAGE} from {location or completed.stderr[-300:]!r}, "
            f"not from its own site-packages under {prefix}"
        )
    return location


def prepare(build_dir: Path) -> Path:
    """Build the wheel and the clean venv under `build_dir`; the venv's python."""
    started = time.monotonic()
    wheel = build_wheel(build_dir / "wheel")
    built = time.monotonic()
    python = make_venv(build_dir / "venv", wheel)
    print(
        f"wheel {wheel.name} built in {built - started:.0f} s, installed into a clean venv "
        f"({build_dir / 'venv'}) in {time.monotonic() - built:.0f} s",
        flush=True,
    )
    return python


def _run(argv: list[str]) -> None:
    completed = subprocess.run(
        argv, capture_output=True, text=True, env=pip_env(), cwd=REPO_DIR, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {completed.returncode}:\n"
            f"{(completed.stdout + completed.stderr)[-3000:]}"
        )


if __name__ == "__main__":
    print(prepare(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_DIR / "build" / "bench"))
