"""A virtual environment with one release of the OpenTelemetry SDK (and nothing else the
package does not need to load a template and process spans), cached between runs under
`cache_root()`, so that the package can be tried on the oldest SDK pyproject allows."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

from tests.support.cache import cache_root


def cached_venv(name: str, packages: list[str]) -> Path:
    """The home of a venv `name` under `cache_root()` holding `packages` (pip arguments),
    built once: other tests and work trees may ask for the same venv at once."""
    home = cache_root() / name
    stamp = home / ".installed"
    with open(cache_root() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True)
            subprocess.run(
                [str(home / "bin" / "python"), "-m", "pip", "install", "--quiet", *packages],
                check=True,
            )
            stamp.touch()
    return home


def sdk_python(version: str) -> Path:
    """The python of a venv holding opentelemetry-api/-sdk `version` and pyyaml."""
    packages = [f"opentelemetry-api=={version}", f"opentelemetry-sdk=={version}", "pyyaml"]
    return cached_venv(f"otel-sdk-{version}", packages) / "bin" / "python"
