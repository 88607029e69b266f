"""Where the agent's user could replace a SQLite journal (journal/placement.py): its file, its
own directory (even sticky), or a directory above it that the user owns or may write without
the sticky bit. A journal only root can reach through is not replaceable."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.journal.placement import replaceable_by

NOBODY = (65534, 65534)
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: chowns to nobody")


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="olh-placement-"))  # root's, 0700, in sticky /tmp
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_journal_below_root_only_directories_is_not_replaceable(root: Path) -> None:
    (root / "state").mkdir(mode=0o755)
    assert replaceable_by(root / "state" / "journal.sqlite3", *NOBODY) is None


def test_the_agents_directory_file_or_an_open_ancestor_makes_it_replaceable(root: Path) -> None:
    own = root / "home"
    own.mkdir()
    os.chown(own, *NOBODY)
    (own / "state").mkdir(mode=0o755)  # root's, below the agent's home
    assert replaceable_by(own / "state" / "journal.sqlite3", *NOBODY) == own

    shared = root / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # sticky, world-writable: the agent may plant the journal first
    assert replaceable_by(shared / "journal.sqlite3", *NOBODY) == shared

    (root / "ok").mkdir(mode=0o755)
    planted = root / "ok" / "journal.sqlite3"
    planted.touch()
    os.chown(planted, *NOBODY)
    assert replaceable_by(planted, *NOBODY) == planted
