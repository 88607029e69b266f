"""A virtual environment holding this checkout as a user's `pip install otel-lifecycle-hooks
opentelemetry-distro` would: the package with no extra (so no gRPC exporter, which the test
extras bring) and the distro. Pages of the docs that a user follows from a plain install run
there. It is cached between runs under `cache_root()`, one per checkout and pyproject.toml;
the checkout is installed editable, so its code is always the one under test."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.support.sdk_venv import cached_venv

CHECKOUT = Path(__file__).resolve().parents[2]


def plain_install_bin() -> Path:
    """The venv's bin/ (python, opentelemetry-instrument, otel-lifecycle-hooks)."""
    key = hashlib.sha256(
        str(CHECKOUT).encode() + (CHECKOUT / "pyproject.toml").read_bytes()
    ).hexdigest()[:16]
    packages = ["-e", str(CHECKOUT), "opentelemetry-distro"]
    return cached_venv(f"plain-install-{key}", packages) / "bin"
