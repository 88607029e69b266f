"""private_files.py: what a root supervisor makes for the agent is created exclusively,
through a directory's descriptor, never through a link; folders are made with the agent's
rights; a directory of another user is refused with the reason."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.private_files import (
    create_file,
    make_directories_as,
    open_agent_directory,
    open_own_directory,
    replace_file,
)

NOBODY = (65534, 65534)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act for another user")


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[int]:
    descriptor = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield descriptor
    os.close(descriptor)


def test_a_new_file_gets_its_text_and_mode(tmp_path: Path, folder: int) -> None:
    create_file(folder, "made", b"text", 0o640)

    assert (tmp_path / "made").read_bytes() == b"text"
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o640


def test_a_link_at_the_name_is_refused_and_its_target_untouched(
    tmp_path: Path, folder: int
) -> None:
    target = tmp_path / "target"
    target.write_text("kept")
    target.chmod(0o600)
    (tmp_path / "made").symlink_to(target)

    with pytest.raises(FileExistsError):
        create_file(folder, "made", b"text", 0o644)
    assert (target.read_text(), stat.S_IMODE(target.stat().st_mode)) == ("kept", 0o600)


def test_replace_puts_a_regular_file_where_a_link_was_and_leaves_no_temporary(
    tmp_path: Path, folder: int
) -> None:
    target = tmp_path / "target"
    target.write_text("kept")
    (tmp_path / "pointer.json").symlink_to(target)

    replace_file(folder, "pointer.json", b"{}", 0o600)

    assert not (tmp_path / "pointer.json").is_symlink()
    assert (tmp_path / "pointer.json").read_text() == "{}"
    assert target.read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pointer.json", "target"]


def test_an_own_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)

    with pytest.raises(PermissionError, match="no one else can write"):
        open_own_directory(str(shared))


@needs_root
def test_a_file_for_the_agent_is_handed_over_through_its_descriptor(
    tmp_path: Path, folder: int
) -> None:
    create_file(folder, "theirs", b"x", 0o600, NOBODY)

    info = (tmp_path / "theirs").stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (*NOBODY, 0o600)


@pytest.fixture
def reachable() -> Iterator[Path]:
    # pytest's tmp_path is root-only: the agent's user must be able to go through this one.
    top = Path(tempfile.mkdtemp(prefix="olh-private-"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@needs_root
def test_an_agent_directory_reached_through_a_link_to_a_directory_of_root_is_refused(
    reachable: Path,
) -> None:
    home = reachable / "home"
    home.mkdir()
    os.chown(home, *NOBODY)
    roots = reachable / "roots"
    roots.mkdir(mode=0o700)
    (home / "state").symlink_to(roots)

    with pytest.raises(PermissionError, match="not by the agent's uid 65534"):
        open_agent_directory(str(home / "state"), NOBODY[0])


@needs_root
def test_folders_are_made_by_the_agent_and_only_where_it_may(reachable: Path) -> None:
    home = reachable / "home"
    home.mkdir()
    os.chown(home, *NOBODY)

    make_directories_as(str(home / "a" / "b"), *NOBODY)
    descriptor = open_agent_directory(str(home / "a" / "b"), NOBODY[0])
    os.close(descriptor)
    made = [home / "a", home / "a" / "b"]
    assert [(p.stat().st_uid, stat.S_IMODE(p.stat().st_mode)) for p in made] == [
        (NOBODY[0], 0o700)
    ] * 2

    with pytest.raises(OSError, match="as uid 65534"):
        make_directories_as(str(reachable / "not-the-agents"), *NOBODY)
    assert not (reachable / "not-the-agents").exists()
