"""The journal `run` opens at its first use: `--journal` given as any kind of path opens a SQLite
file there; a journal instance, or False (none), is used as it is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from otel_lifecycle_hooks.journal import open_journal
from otel_lifecycle_hooks.journal.rows import ExecutionRow
from otel_lifecycle_hooks.supervisor.deferred import DeferredJournal
from otel_lifecycle_hooks.supervisor.session_parts import engine_journal


class NamedPath:
    """A path that is neither `str` nor `pathlib.Path`: only `os.PathLike`."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def __fspath__(self) -> str:
        return str(self._path)


def as_text(path: Path) -> str:
    return str(path)


def as_bytes(path: Path) -> bytes:
    return os.fsencode(path)


@pytest.mark.parametrize("given", [as_text, Path, NamedPath, as_bytes])
def test_a_journal_named_by_any_path_is_opened_there_at_first_use(given, tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"

    journal = engine_journal(given(path), {"HOME": str(tmp_path / "home")})

    assert isinstance(journal, DeferredJournal)
    assert not journal.is_open and not path.exists()
    journal.record_execution(
        ExecutionRow(hook="notify", event="session-start", outcome="success", started_at=1.0)
    )
    journal.close()
    reread = open_journal(path)
    try:
        assert [row.hook for row in reread.executions()] == ["notify"]
    finally:
        reread.close()


def test_no_journal_named_opens_the_environments_at_first_use(tmp_path: Path) -> None:
    path = tmp_path / "from-environment.sqlite3"

    journal = engine_journal(None, {"LIFECYCLE_HOOKS_JOURNAL": str(path)})

    assert isinstance(journal, DeferredJournal) and not path.exists()
    assert journal.opened().path == path
    journal.close()


def test_a_journal_instance_or_none_at_all_is_used_as_it_is(tmp_path: Path) -> None:
    instance = open_journal(tmp_path / "journal.sqlite3")
    try:
        assert engine_journal(instance, {}) is instance
    finally:
        instance.close()
    assert engine_journal(False, {}) is False


def test_a_probe_for_a_special_method_opens_nothing(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    journal = DeferredJournal(path, {})

    assert not hasattr(journal, "__fspath__")
    assert not isinstance(journal, os.PathLike)

    assert not journal.is_open and not path.exists()
