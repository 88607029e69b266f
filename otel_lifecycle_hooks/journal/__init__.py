"""The execution journal: every hook execution and every supervised session.

One URL chooses where it lives, the same for every command (`--journal URL`, else
`$LIFECYCLE_HOOKS_JOURNAL`, or the older `$OTEL_LIFECYCLE_HOOKS_JOURNAL`): a path or
`sqlite:///path` for the embedded SQLite file (the default,
`~/.local/state/otel-lifecycle-hooks/journal.sqlite3`), or `postgresql://...` for a database
that a fleet of supervisors and a reconciler share (docs/fleet.md). Both hold the same schema
(`schema.py`), migrated on open, and answer the same calls: the `Journal` protocol (`base.py`)
that `open_journal` returns. (`Journal` exported here is the SQLite journal, under the name it
had before there were two.) `views.py` is what readers (`history show`, the `ui` page) use;
`retention.py` how long rows are kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..extras import POSTGRES_SCHEMES, require_extra
from . import base
from .postgres import PostgresJournal
from .rows import FAILED_OUTCOMES, OWED_EVENTS, AttemptRow, ExecutionRow, SessionRow
from .schema import SCHEMA_VERSION
from .sqlite import (
    BUSY_TIMEOUT,
    COMMIT_AFTER_ROWS,
    COMMIT_AFTER_SECONDS,
    JOURNAL_ENV,
    Journal,
    SqliteJournal,
)

__all__ = [
    "COMMIT_AFTER_ROWS",
    "COMMIT_AFTER_SECONDS",
    "FAILED_OUTCOMES",
    "JOURNAL_ENV",
    "OWED_EVENTS",
    "SCHEMA_VERSION",
    "AttemptRow",
    "ExecutionRow",
    "Journal",
    "PostgresJournal",
    "SessionRow",
    "SqliteJournal",
    "default_journal_path",
    "is_postgres_url",
    "journal_location",
    "open_journal",
]

_SQLITE_SCHEME = "sqlite://"


def is_postgres_url(location: str | Path) -> bool:
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def journal_setting(environ: Mapping[str, str]) -> str:
    """`$LIFECYCLE_HOOKS_JOURNAL`, else the older `$OTEL_LIFECYCLE_HOOKS_JOURNAL`, else ""."""
    return environ.get(JOURNAL_ENV.removeprefix("OTEL_")) or environ.get(JOURNAL_ENV) or ""


def journal_location(explicit: str | Path | None, environ: Mapping[str, str]) -> str | Path:
    """`explicit` (--journal), else `$LIFECYCLE_HOOKS_JOURNAL` (or the older
    `$OTEL_LIFECYCLE_HOOKS_JOURNAL`), else the default file: a PostgreSQL URL as it is, anything
    else as the path of a SQLite file."""
    given = explicit or journal_setting(environ)
    if not given:
        return default_journal_path(environ)
    if isinstance(given, Path) or is_postgres_url(given):
        return given
    if given.startswith(_SQLITE_SCHEME):
        # sqlite:///abs/path, as a file:/// URL names an absolute path (SQLAlchemy's four
        # slashes mean the same); sqlite://rel/path is relative.
        rest = given[len(_SQLITE_SCHEME) :]
        return Path("/" + rest.lstrip("/")) if rest.startswith("/") else Path(rest)
    return Path(given)


def default_journal_path(environ: Mapping[str, str]) -> Path:
    """The SQLite file: `$LIFECYCLE_HOOKS_JOURNAL` (or the older name) when it names one, else
    `$HOME/.local/state/otel-lifecycle-hooks/journal.sqlite3`."""
    explicit = journal_setting(environ)
    if explicit and not is_postgres_url(explicit):
        location = journal_location(explicit, {})
        assert isinstance(location, Path)
        return location
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "state" / "otel-lifecycle-hooks" / "journal.sqlite3"


def open_journal(
    location: str | Path,
    *,
    busy_timeout: float = BUSY_TIMEOUT,
    spill_dir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> base.Journal:
    """The journal at `location` (a path, `sqlite:///...` or `postgresql://...`).
    `busy_timeout` is SQLite's (seconds a write waits for another process's lock);
    `spill_dir` and `environ` are PostgreSQL's (where writes that cannot reach it wait)."""
    if is_postgres_url(location):
        require_extra("psycopg", "postgres", "a PostgreSQL journal")
        return PostgresJournal(str(location), spill_dir=spill_dir, environ=environ)
    return SqliteJournal(journal_location(location, {}), busy_timeout=busy_timeout)
