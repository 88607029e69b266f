"""How long the journal keeps its rows: by age, by count, or both.

`$LIFECYCLE_HOOKS_JOURNAL_RETENTION` (or `--retention` where a command offers it) holds one or
two limits separated by a comma: an age (`30d`, `12h`, `90m`: executions that started longer
ago go) and a count of executions (`100000rows`: the newest that many stay). `off` keeps
everything. Unset, the journal keeps `DEFAULT_RETENTION`: the newest 50,000 executions, a
bound on its size (docs/reliability.md states the bytes per delivery) that does not depend on
any clock being right.

The supervisor applies it when it starts, then every `APPLY_EVERY` seconds, and, so that a
flood cannot grow the journal past its row bound until the next hourly pass, again each time
`$LIFECYCLE_HOOKS_JOURNAL_RETENTION_EVERY` executions (default `DEFAULT_APPLY_EVERY_ROWS`) have
been written since the last pass: a bound of N rows holds at N plus that many, plus what is
written during one pass. Passes run on a thread of their own (indexed DELETEs of at most
`CHUNK_ROWS` executions per transaction, so that a hook's journal write never waits long
behind a large first pass), on SQLite and PostgreSQL alike; `history` honours it as it
reads, so rows past the limits are never shown even before a supervisor deletes them. An
execution goes with its attempts; a session row goes once it ended (or was recovered) and is
older than the age limit or beyond the newest that many sessions (the row bound applies to
sessions too, so that the default keeps a fleet's sessions table bounded), never while its
hooks may still be owed.

A pass that is cut short (a short `run` exits, the database goes away) loses nothing: every
chunk is its own transaction and each pass deletes what is past the limits then, so the next
pass, in this process or the next one, carries on where it stopped. `RetentionKeeper.stop`
lets the chunk under way finish and starts no other.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import LifecycleHooksError
from .reading import NEWEST_ID_BEYOND

log = logging.getLogger("otel_lifecycle_hooks.journal")

RETENTION_ENV = "LIFECYCLE_HOOKS_JOURNAL_RETENTION"
DEFAULT_RETENTION = "50000rows"
APPLY_EVERY = 3600.0  # seconds between two passes of a long-running supervisor
APPLY_EVERY_ROWS_ENV = "LIFECYCLE_HOOKS_JOURNAL_RETENTION_EVERY"
DEFAULT_APPLY_EVERY_ROWS = 1000  # executions written between two passes, at most

_AGE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_ROWS = re.compile(r"(\d+)\s*rows?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class RetentionError(ValueError, LifecycleHooksError):
    """A retention setting that cannot be read; the message says what would be valid."""


@dataclass(frozen=True, slots=True)
class Retention:
    """Limits on what the journal keeps; None for no limit of that kind."""

    max_age: float | None = None  # seconds
    max_rows: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.max_age is None and self.max_rows is None

    def cutoff(self, now: float) -> float | None:
        """Executions that started before this unix time are beyond retention."""
        return None if self.max_age is None else now - self.max_age

    def describe(self) -> str:
        parts = []
        if self.max_age is not None:
            parts.append(f"{self.max_age / 86400:g}d")
        if self.max_rows is not None:
            parts.append(f"{self.max_rows}rows")
        return ",".join(parts) or "off"


def parse_retention(text: str) -> Retention:
    """`30d`, `100000rows`, `30d,100000rows` or `off`."""
    source = text.strip().lower()
    if source in ("off", "none", "0"):
        return Retention()
    age: float | None = None
    rows: int | None = None
    for part in (p.strip() for p in source.split(",")):
        if (match := _ROWS.fullmatch(part)) is not None and rows is None:
            rows = int(match.group(1))
            if rows < 1:
                raise RetentionError(f"{text!r}: keep at least 1 row, or write off")
        elif (match := _AGE.fullmatch(part)) is not None and age is None:
            age = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            if age <= 0:
                raise RetentionError(f"{text!r}: an age must be more than 0, or write off")
        else:
            raise RetentionError(
                f"{RETENTION_ENV}={text!r}: write an age (30d, 12h), a number of rows "
                "(100000rows), both separated by a comma (30d,100000rows), or off"
            )
    return Retention(age, rows)


def retention_from(environ: Mapping[str, str]) -> Retention:
    """The setting in `environ`, else the default; a setting that cannot be read is reported
    and the default used (a typo must not make the journal keep nothing, or everything)."""
    text = environ.get(RETENTION_ENV)
    if text is None or not text.strip():
        return parse_retention(DEFAULT_RETENTION)
    try:
        return parse_retention(text)
    except RetentionError as exc:
        log.warning("%s; keeping the default %s", exc, DEFAULT_RETENTION)
        return parse_retention(DEFAULT_RETENTION)


def apply_every_rows(environ: Mapping[str, str]) -> int:
    """`$LIFECYCLE_HOOKS_JOURNAL_RETENTION_EVERY`: executions written between two passes; a
    value that is not a whole number of at least 1 is reported and the default used."""
    text = environ.get(APPLY_EVERY_ROWS_ENV, "").strip()
    if not text:
        return DEFAULT_APPLY_EVERY_ROWS
    if text.isdigit() and int(text) >= 1:
        return int(text)
    log.warning(
        "%s=%r: write a whole number of executions, at least 1; using %d",
        APPLY_EVERY_ROWS_ENV,
        text,
        DEFAULT_APPLY_EVERY_ROWS,
    )
    return DEFAULT_APPLY_EVERY_ROWS


CHUNK_ROWS = 2000  # executions deleted per transaction: a writer never waits long behind one

# Runs statements in one transaction; the row count of the last.
Execute = Callable[[list[tuple[str, tuple[Any, ...]]]], int]
# Sessions retention may delete: their supervisor ended them, or a recovery finished them.
_FINISHED = "(ended_at IS NOT NULL OR recovered_at IS NOT NULL)"
_NTH_NEWEST_SESSION = "SELECT started_at FROM sessions ORDER BY started_at DESC LIMIT 1 OFFSET ?"


def never_stopped() -> bool:
    """A pass nobody stops: it runs until nothing is past the limits."""
    return False


def apply(
    retention: Retention,
    now: float,
    execute: Execute,
    chunk: int = CHUNK_ROWS,
    stopped: Callable[[], bool] = never_stopped,
) -> int:
    """Delete what `retention` no longer keeps at `now`, `chunk` executions (with their
    attempts), then `chunk` finished sessions, per call of `execute`, each its own
    transaction, until nothing is left or `stopped()`; how many executions went."""
    removed = 0
    for condition, params in _conditions(retention, now):
        oldest = f"SELECT id FROM executions WHERE {condition} ORDER BY id LIMIT ?"
        while True:
            gone = execute(
                [
                    (
                        (
                            "DELETE FROM attempts WHERE execution_uid IN"
                            f" (SELECT row_uid FROM executions WHERE id IN ({oldest}))"
                        ),
                        (*params, chunk),
                    ),
                    (f"DELETE FROM executions WHERE id IN ({oldest})", (*params, chunk)),
                ]
            )
            removed += gone
            if gone < chunk or stopped():
                break
        if stopped():
            return removed
    for condition, params in _session_conditions(retention, now):
        oldest = (
            f"SELECT session_id FROM sessions WHERE {condition} AND {_FINISHED}"
            " ORDER BY started_at LIMIT ?"
        )
        while not stopped():
            gone = execute(
                [(f"DELETE FROM sessions WHERE session_id IN ({oldest})", (*params, chunk))]
            )
            if gone < chunk:
                break
    return removed


def _session_conditions(retention: Retention, now: float) -> list[tuple[str, tuple[Any, ...]]]:
    conditions: list[tuple[str, tuple[Any, ...]]] = []
    cutoff = retention.cutoff(now)
    if cutoff is not None:
        conditions.append(("started_at < ?", (cutoff,)))
    if retention.max_rows is not None:
        # Older than the newest `max_rows` sessions (none when there are fewer: NULL).
        conditions.append((f"started_at < ({_NTH_NEWEST_SESSION})", (retention.max_rows - 1,)))
    return conditions


def _conditions(retention: Retention, now: float) -> list[tuple[str, tuple[Any, ...]]]:
    conditions: list[tuple[str, tuple[Any, ...]]] = []
    cutoff = retention.cutoff(now)
    if cutoff is not None:
        conditions.append(("started_at < ?", (cutoff,)))
    if retention.max_rows is not None:
        conditions.append((f"id <= ({NEWEST_ID_BEYOND})", (retention.max_rows,)))
    return conditions


class _NumbersRows(Protocol):
    # The one call `visible_filters` makes (a `base.Journal` has it; base imports this module).
    def newest_id_beyond(self, rows: int) -> int | None: ...


class _Prunable(Protocol):
    # What `RetentionKeeper` calls (a `base.Journal` has it; base imports this module).
    def apply_retention(
        self, retention: Retention, *, stopped: Callable[[], bool] | None = None
    ) -> int: ...


def visible_filters(
    journal: _NumbersRows, retention: Retention, now: float | None = None
) -> tuple[float | None, int | None]:
    """What a reader shows of the journal under `retention`: (started at or after, id
    above); None where that limit is off."""
    at = time.time() if now is None else now
    after_id = None
    if retention.max_rows is not None:
        after_id = journal.newest_id_beyond(retention.max_rows)
    return retention.cutoff(at), after_id


class RetentionKeeper:
    """Applies `retention` to `journal` now, every `interval` seconds, and whenever
    `every_rows` executions were `written` since the last pass, on its own daemon thread,
    until stopped: a large first pass never delays the agent's start, and a flood never
    waits for the hourly pass."""

    def __init__(
        self,
        journal: _Prunable,
        retention: Retention,
        interval: float = APPLY_EVERY,
        every_rows: int = DEFAULT_APPLY_EVERY_ROWS,
    ):
        self._journal = journal
        self._retention = retention
        self._interval = interval
        self._every_rows = max(1, every_rows)
        self._stopped = threading.Event()
        self._wake = threading.Event()  # set by stop, or by enough rows written
        self._written = 0  # executions written since the last pass began
        self._count_lock = threading.Lock()
        self.passes = 0
        self._thread = threading.Thread(target=self._keep, name="journal-retention", daemon=True)
        self._thread.start()

    def written(self, executions: int = 1) -> None:
        """`executions` more rows were written: a pass is due once `every_rows` have been
        (nothing to count when only an age limit is set)."""
        if self._retention.max_rows is None:
            return
        with self._count_lock:
            self._written += executions
            due = self._written >= self._every_rows
        if due:
            self._wake.set()

    def _keep(self) -> None:
        while True:
            with self._count_lock:
                self._written = 0
            try:
                removed = self._journal.apply_retention(
                    self._retention, stopped=self._stopped.is_set
                )
                if removed:
                    log.info(
                        "journal retention %s: %d executions removed",
                        self._retention.describe(),
                        removed,
                    )
            except Exception:  # the journal reports its own failures; hooks go on
                log.debug("journal retention failed", exc_info=True)
            self.passes += 1
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stopped.is_set():
                return

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
