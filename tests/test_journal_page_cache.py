"""The journal's connection keeps a small page cache: a supervisor's journal grows all its
life, and SQLite's default cache would hold 2 MiB of it in the process once filled."""

from __future__ import annotations

from pathlib import Path

from otel_lifecycle_hooks.journal import Journal
from otel_lifecycle_hooks.journal.sqlite import PAGE_CACHE_KIB


def test_the_journals_connection_caches_a_bounded_number_of_pages(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.db")
    try:
        assert journal._db is not None
        (cache,) = journal._db.execute("PRAGMA cache_size").fetchone()
    finally:
        journal.close()
    assert cache == -PAGE_CACHE_KIB  # negative: KiB, not pages
    assert PAGE_CACHE_KIB < 2000  # under SQLite's default
