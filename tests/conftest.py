"""Shared fixtures: a loopback HTTP target server and a throwaway HOME."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.target_server import TargetServer


@pytest.fixture
def target_server() -> Iterator[TargetServer]:
    """A started TargetServer on 127.0.0.1; stopped (never hanging) after the test."""
    with TargetServer() as server:
        yield server


@pytest.fixture
def tmp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME pointed at an empty directory, and no journal / hook-log location overrides."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("JOURNAL", "LOG"):
        monkeypatch.delenv(f"LIFECYCLE_HOOKS_{name}", raising=False)
        monkeypatch.delenv(f"OTEL_LIFECYCLE_HOOKS_{name}", raising=False)
    return home
