"""A virtual environment holding this checkout as a user's `pip install otel-lifecycle-hooks
opentelemetry-distro` would: the package with no extra (so no gRPC exporter, which the test
extras bring) and the distro. Pages of the docs that a user follows from a plain install run
there. It is cached between runs under `cache_root()`, one per checkout and pyproject.toml;
the checkout is installed editable, so its code is always the one under test."""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import sys
from pathlib import Path

from tests.support.cache import cache_root

CHECKOUT = Path(__file__).resolve().parents[2]


def plain_install_bin() -> Path:
    """The venv's bin/ (python, opentelemetry-instrument, otel-lifecycle-hooks)."""
    key = hashlib.sha256(
        str(CHECKOUT).encode() + (CHECKOUT / "pyproject.toml").read_bytes()
    ).hexdigest()[:16]
    home = cache_root() / f"plain-install-{key}"
    stamp = home / ".installed"
    with open(cache_root() / f"plain-install-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # other tests or work trees may build it at once
        if not stamp.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True)
            subprocess.run(
                [
                    str(home / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    "-e", str(CHECKOUT), "opentelemetry-distro",
                ],
                check=True,
            )  # fmt: skip
            stamp.touch()
    return home / "bin"
