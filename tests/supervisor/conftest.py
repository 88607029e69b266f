"""Fixtures for the supervisor tests (helpers live in supervised.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervisor.supervised import Workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    """A Workspace in tmp_path; every supervisor and orphaned agent it started is killed after."""
    space = Workspace(tmp_path)
    yield space
    space.cleanup()
