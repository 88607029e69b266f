"""The state file: where it lives, atomic saves, unreadable files, and its lock."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from otel_lifecycle_hooks.harness.state import load_state, locked, save_state, state_path


def test_the_state_path_comes_from_the_environment_or_home(tmp_path: Path) -> None:
    explicit = tmp_path / "s.json"
    assert state_path({"OTEL_LIFECYCLE_HOOKS_STATE": str(explicit)}) == explicit
    assert state_path({"HOME": str(tmp_path)}) == (
        tmp_path / ".local" / "state" / "otel-lifecycle-hooks" / "activity.json"
    )


def test_a_saved_state_loads_back_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "activity.json"
    save_state(path, {"tracker": {"activity": "executing"}})
    save_state(path, {"tracker": {"activity": "idle"}})
    assert load_state(path) == {"tracker": {"activity": "idle"}, "v": 1}
    assert [p.name for p in path.parent.iterdir()] == ["activity.json"]


@pytest.mark.parametrize("content", ["", "not json", "[1, 2]", '{"v": 99}'])
def test_a_missing_or_unreadable_state_is_empty(tmp_path: Path, content: str) -> None:
    path = tmp_path / "activity.json"
    assert load_state(path) == {}
    path.write_text(content)
    assert load_state(path) == {}


def test_the_lock_is_exclusive_while_held(tmp_path: Path) -> None:
    path = tmp_path / "activity.json"
    lock_path = tmp_path / "activity.json.lock"
    with locked(path), open(lock_path, "a") as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock_path, "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released on exit
