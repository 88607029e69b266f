"""A virtual environment with one release of the OpenTelemetry SDK (and nothing else the
package does not need to load a template and process spans), cached between runs under
`cache_root()`, so that the package can be tried on the oldest SDK pyproject allows."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

from tests.support.cache import cache_root


def sdk_python(version: str) -> Path:
    """The python of a venv holding opentelemetry-api/-sdk `version` and pyyaml."""
    home = cache_root() / f"otel-sdk-{version}"
    python = home / "bin" / "python"
    stamp = home / ".installed"
    with open(cache_root() / f"otel-sdk-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # other work trees may build the same venv at once
        if not stamp.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True)
            subprocess.run(
                [
                    str(python), "-m", "pip", "install", "--quiet",
                    f"opentelemetry-api=={version}", f"opentelemetry-sdk=={version}", "pyyaml",
                ],
                check=True,
            )  # fmt: skip
            stamp.touch()
    return python
