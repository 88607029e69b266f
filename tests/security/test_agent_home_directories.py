"""A root supervisor never makes directories in the agent's space with root's rights: the
pointer folder is made by the agent's user, so where that user could not make it (a missing
home below a directory of root's, a runtime directory of root's) nothing is made at all, and
what is made belongs to the agent from the start, never chowned after the fact."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.supervisor.channel import SessionChannel

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act for another user")

NOBODY = (65534, 65534)


@pytest.fixture
def top() -> Iterator[Path]:
    # pytest's tmp_path is root-only; the agent must be able to go through this one.
    directory = Path(tempfile.mkdtemp(prefix="olh-home-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def open_and_close(environ: dict[str, str], socket_dir: Path) -> None:
    channel = SessionChannel(lambda _: None, owner=NOBODY)
    try:
        channel.open(str(socket_dir / "events.sock"), environ)
    finally:
        channel.close()


def test_a_missing_home_of_the_agent_is_not_made_by_root(top: Path) -> None:
    home = top / "missing-home"  # its parent is root's: the agent could not make it
    open_and_close({"HOME": str(home)}, top)

    assert not home.exists()


def test_a_runtime_directory_of_root_gets_no_folder_of_the_agent(top: Path) -> None:
    """Root's own $XDG_RUNTIME_DIR passed on to the agent: root must not make a folder of
    the agent's in it (the agent cannot), and the pointer goes to the agent's home."""
    runtime = top / "run-user-0"
    runtime.mkdir(mode=0o700)
    home = top / "home"
    home.mkdir()
    os.chown(home, *NOBODY)
    open_and_close({"HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}, top)

    assert list(runtime.iterdir()) == []
    made = [
        home / ".local",
        home / ".local/state",
        home / ".local/state/otel-lifecycle-hooks",
        home / ".local/state/otel-lifecycle-hooks/run",
    ]
    assert [path.stat().st_uid for path in made] == [NOBODY[0]] * len(made)


def test_the_agent_makes_its_missing_folders_with_its_own_rights(top: Path) -> None:
    """A home the agent owns but whose `.local` is a directory of root's it cannot write:
    root could make the folder there, the agent cannot, so none is made."""
    home = top / "home"
    home.mkdir()
    os.chown(home, *NOBODY)
    (home / ".local").mkdir(mode=0o755)  # root's
    open_and_close({"HOME": str(home)}, top)

    assert list((home / ".local").iterdir()) == []
