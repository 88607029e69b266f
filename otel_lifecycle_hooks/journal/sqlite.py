"""The SQLite journal (the embedded default): every hook execution and every supervised session.

The CLI reads it (`list`, `history`, `replay`), and the supervisor uses its sessions table for
crash recovery: a session that reached post-start and never recorded its end was killed, so its
session-end hooks are still owed.

The journal is a record, not a dependency: hooks must run whether or not it can be written. A
corrupt file, a full disk or an unwritable directory is reported once (logger
`otel_lifecycle_hooks.journal`, and `SqliteJournal.healthy` turns False); from then on every call is
a no-op returning an empty answer. A busy database (another process holding the write lock
past the busy timeout) only drops that one write.

Under load, execution rows are committed in batches: a row that comes less than
`COMMIT_AFTER_SECONDS` after the last commit is written at once but committed with the rows
that follow it, within `COMMIT_AFTER_SECONDS` or `COMMIT_AFTER_ROWS` rows, whichever comes
first, and always before any other write or read, and on `close`; a row after a quiet spell is
committed at once. One commit per delivery was the journal's largest cost under load. A crash
can thus lose the journal rows of that last window (never a delivery: the rows describe hooks
that already ran); session rows, which crash recovery relies on, and the rows of failed or
timed-out deliveries, which `replay` re-sends from, are committed at once.

The engine's own rows (`record`, its sink) go one step further: a successful execution's row
that joins a batch is not even inserted by the caller, whose hook may be blocking the agent;
it waits in memory and the journal's commit thread inserts it with its batch. It is the same
window as above (reads and other writes insert and commit it first), without the INSERT on the
hook's path.

Rows hold what callers pass, already redacted: the journal does not redact.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..private_files import open_directory_path
from .liveness import LivenessClock, local_clock
from .reading import JournalReader
from .retention import CHUNK_ROWS, Retention, apply, never_stopped
from .rows import (
    CLAIM,
    EVENT_COLUMNS,
    ID_OF_UID,
    INSERT_ATTEMPT,
    INSERT_EXECUTION,
    OPEN_SESSION,
    RELEASE_CLAIM,
    UPDATE_EXECUTION,
    AttemptRow,
    ExecutionLike,
    ExecutionRow,
    SessionRow,
    attempt_values,
    attempts_of,
    claim_values,
    commits_at_once,
    execution_row_of,
    execution_values,
    new_row_uid,
    open_session_values,
    session_row,
)
from .schema import SCHEMA_VERSION, statements

log = logging.getLogger("otel_lifecycle_hooks.journal")

BUSY_TIMEOUT = 5.0  # seconds to wait for another process's write lock
# Execution rows are committed at the latest this long after the first uncommitted one...
COMMIT_AFTER_SECONDS = 0.1
# ...or once this many are waiting.
COMMIT_AFTER_ROWS = 64
JOURNAL_ENV = "OTEL_LIFECYCLE_HOOKS_JOURNAL"

_T = TypeVar("_T")


# The connection's page cache, in KiB (SQLite's default is 2,000). A supervisor's journal only
# grows (31 MB after 21,000 deliveries of 1,000 hooks), so the default cache fills and then
# holds 2 MiB of the process's memory for the rest of its life. With a quarter of it the
# journal's commit thread spent the same CPU per delivery (54 us, 1,000 hooks on one event)
# and the supervisor's peak RSS was 1.7 MiB lower.
PAGE_CACHE_KIB = 512


class SqliteJournal(JournalReader):
    """The execution journal over one SQLite file (WAL mode): a `base.Journal`, its reads
    `reading.JournalReader`'s. Thread-safe; never raises."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = BUSY_TIMEOUT) -> None:
        """Open (creating if needed) the journal at `path`. `busy_timeout`: seconds a write
        waits for another process's lock before that one write is dropped."""
        self.path = Path(path)
        self._busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._healthy = True
        self._busy_reported = False
        self._failures = 0  # writes not made (the journal disabled, busy, or failing)
        # The open batch of execution rows: how many, and when the first was written.
        self._uncommitted = 0
        # Rows of the batch not inserted yet, each with its attempts.
        self._queued: list[tuple[ExecutionRow, Sequence[AttemptRow]]] = []
        self._batch_started = 0.0
        self._last_commit = float("-inf")
        self._batch_open = threading.Condition(self._lock)
        self._committer: threading.Thread | None = None
        try:
            self._db = self._open()
        except (sqlite3.Error, OSError) as exc:
            self._disable("open", exc)

    @property
    def healthy(self) -> bool:
        """False once the journal has met a failure and stopped recording."""
        return self._healthy

    # -- executions --

    def record_execution(
        self, row: ExecutionRow, attempts: Sequence[AttemptRow] = ()
    ) -> int | None:
        """Append `row` and its `attempts`; its new id, or None if the journal is not
        recording."""
        if attempts and not row.row_uid:
            row = row._replace(row_uid=new_row_uid())
        values = execution_values(row)
        at_once = commits_at_once(row)
        return self._run(
            "record an execution",
            lambda db: self._insert_batched(db, values, at_once, attempts),
            None,
            batched=True,
        )

    def record(self, execution: ExecutionLike) -> int | None:
        """Append the engine's execution record (a sink for the executor) with its attempts:
        its new id, or None if the journal is not recording or the row joined a batch (a
        successful row that follows closely on others, inserted and committed by the
        journal's own thread)."""
        row = execution_row_of(execution)
        attempts = attempts_of(execution)
        if commits_at_once(row):
            return self.record_execution(row, attempts)
        return self._run(
            "record an execution", lambda db: self._queue(db, row, attempts), None, batched=True
        )

    def update_execution(
        self, row: ExecutionRow, attempts: Sequence[AttemptRow] = ()
    ) -> int | None:
        """Rewrite the execution journaled under `row.row_uid` (in flight) with `row`'s
        values and add `attempts` (those not journaled yet); its id, or None."""
        values = execution_values(row)

        def write(db: sqlite3.Connection) -> int | None:
            db.execute("BEGIN")  # the row and its new attempts together, or neither
            db.execute(UPDATE_EXECUTION, values)
            _insert_attempts(db, ((row.row_uid or "", attempts),))
            found = db.execute(ID_OF_UID, (row.row_uid,)).fetchone()
            db.execute("COMMIT")
            return int(found[0]) if found else None

        return self._run("update an execution", write, None)

    def apply_retention(
        self,
        retention: Retention,
        now: float | None = None,
        chunk: int | None = None,
        stopped: Callable[[], bool] | None = None,
    ) -> int:
        """Delete what `retention` no longer keeps, a chunk per transaction (hooks' writes
        take the lock between chunks); how many executions went."""

        def execute(batch: list[tuple[str, tuple[Any, ...]]]) -> int:
            def run(db: sqlite3.Connection) -> int:
                db.execute("BEGIN IMMEDIATE")
                try:
                    count = 0
                    for sql, params in batch:
                        count = db.execute(sql, params).rowcount
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                return count

            return self._run("apply retention", run, 0)

        return apply(retention, _now(now), execute, chunk or CHUNK_ROWS, stopped or never_stopped)

    # -- sessions --

    def open_session(
        self,
        session_id: str,
        *,
        agent_id: str = "",
        agent_name: str = "",
        template_files: Sequence[str] = (),
        pid: int | None = None,
        started_at: float | None = None,
        templates: Sequence[Mapping[str, str]] = (),
        metadata: Mapping[str, str] | None = None,
        variables: Mapping[str, str] | None = None,
        host: str = "",
        seal: str | None = None,
    ) -> None:
        """Record that a supervised session started (a row of the same id is kept)."""
        values = open_session_values(
            session_id, agent_id, agent_name, template_files, pid, _now(started_at),
            templates, metadata or {}, variables or {}, host, seal,
        )  # fmt: skip
        self._write("open a session", OPEN_SESSION, values)

    def begin_event(
        self,
        session_id: str,
        event: str,
        timestamp: float,
        seal: str | None = None,
        *,
        wait: float | None = None,
    ) -> bool:
        """An owed event (post-start, pre-stop, session-end) begins at `timestamp`, its
        `${TIMESTAMP}`: committed before any of its hooks is sent, with the row's new `seal`
        (seal.py) when one is given. A moment already journaled (by a reconciler's claim) is
        kept. `wait` is the PostgreSQL journal's: here the commit is made at once. False when
        it could not be committed (a full disk): the caller then takes the moment a claim would
        fix (rows.unjournaled_moments)."""
        column = EVENT_COLUMNS[event]
        sql = (
            f"UPDATE sessions SET {column} = COALESCE({column}, ?), seal = COALESCE(?, seal)"
            " WHERE session_id = ?"
        )

        def write(db: sqlite3.Connection) -> bool:
            db.execute(sql, (timestamp, seal, session_id))
            return True

        # Named as an update of its column, so that a disabled journal logs the owed moment lost.
        return self._run(f"update session {session_id} ({column})", write, False)

    def mark_agent(self, session_id: str, pid: int, started_at: float | None) -> None:
        """The agent process of the session: its pid and start time (from /proc)."""
        self._update_session("agent_pid = ?, agent_started_at = ?", (pid, started_at), session_id)

    def heartbeat(self, session_id: str, at: float | None = None) -> None:
        """The session's supervisor is alive at `at`."""
        self._update_session("heartbeat_at = ?", (_now(at),), session_id)

    def liveness_clock(self) -> LivenessClock:
        """What a heartbeat's age is measured against: one machine, so its clock, on which
        every heartbeat of this file was written (liveness.py)."""
        return LivenessClock(local_clock())

    def mark_post_start(self, session_id: str, at: float | None = None) -> None:
        """The session's post-start hooks finished."""
        self._update_session("post_started_at = ?", (_now(at),), session_id)

    def close_session(
        self, session_id: str, exit_code: int | None, at: float | None = None
    ) -> None:
        """The session ended (its session-end hooks were fired)."""
        self._update_session("ended_at = ?, exit_code = ?", (_now(at), exit_code), session_id)

    def mark_recovered(self, session_id: str, at: float | None = None) -> None:
        """Crash recovery fired this session's owed hooks: never recover it again."""
        self._update_session("recovered_at = ?", (_now(at),), session_id)

    def claim_session(
        self,
        session_id: str,
        claimer: str,
        lease: float,
        at: float | None = None,
        *,
        steal_from: str | None = None,
        seal: str | None = None,
    ) -> SessionRow | None:
        """Take an unfinished session for recovery: the row, with the moments of its owed
        events fixed (and `seal`, when given, as its new seal), if this caller won it; None if
        it is finished, recovered, or held by another claimer whose lease has not run out."""
        now = _now(at)
        params = claim_values(claimer, lease, now, session_id, steal_from, seal)

        def claim(db: sqlite3.Connection) -> list[Any]:
            db.execute("BEGIN IMMEDIATE")  # the write lock first: claimers queue here
            try:
                rows = db.execute(CLAIM, params).fetchall()
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return rows

        rows: list[Any] = self._run("claim a session", claim, [])
        return session_row(rows[0]) if rows else None

    def release_claim(self, session_id: str, claimer: str, at: float | None = None) -> None:
        """Give back `claimer`'s claim of a session it could not finish recovering: the next
        pass may claim it at once."""
        self._write("release a claim", RELEASE_CLAIM, (_now(at) - 1.0, session_id, claimer))

    def backlog(self) -> str:
        """Always "": every write is in the file once made (a batch not committed yet is
        committed before any read), none waits elsewhere on this machine."""
        return ""

    def flush(self, timeout: float = 5.0) -> bool:
        """Commit the open batch now; `timeout` is unused (SQLite's own busy timeout bounds
        the wait). False if the journal is not recording."""
        if self._db is None:
            return False
        return self._run("commit", lambda db: True, False)

    def close(self) -> None:
        """Commit what is waiting and close the database; later calls are no-ops."""
        with self._lock:
            if self._db is not None:
                try:
                    self._commit_batch(self._db)
                except sqlite3.Error as exc:
                    self._disable("commit on close", exc)
            self._batch_open.notify_all()  # the committer thread ends
            if self._db is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._db.close()
                self._db = None

    # -- internals --

    def _open(self) -> sqlite3.Connection:
        if os.geteuid() == 0:
            self._check_root_may_open()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # Created private before SQLite touches it: rows describe requests and failures.
        os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        db = sqlite3.connect(
            self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")  # durable enough in WAL, much cheaper
            db.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"schema version {version} is newer than this package's {SCHEMA_VERSION}"
                )
            if version < SCHEMA_VERSION:
                _migrate(db)
        except BaseException:
            db.close()
            raise
        return db

    def _check_root_may_open(self) -> None:
        """As root, the journal's folder is reached without following a link another user
        planted (and made only where root alone writes), and none of the names SQLite opens
        (the file, `-wal`, `-shm`, `-journal`) may be anything but a regular file: SQLite
        opens them by name and follows links, so a link the agent's user left in a folder it
        can write would make root create or write a database wherever it points
        (`/etc/ld.so.preload`, holding a path the agent wrote into a row). `PermissionError`
        otherwise; the journal is then not kept (reported once) and hooks still run. In such a
        folder a link swapped in while SQLite opens is not excluded: `run` warns about that
        placement (journal/placement.py)."""
        directory = open_directory_path(self.path.parent, make=True)
        try:
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    info = os.stat(self.path.name + suffix, dir_fd=directory, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISREG(info.st_mode):
                    raise PermissionError(
                        f"{self.path}{suffix} is not a regular file (a link, or another kind "
                        "of file): as root, the journal is never opened through it"
                    )
        finally:
            os.close(directory)

    def _run(
        self,
        what: str,
        action: Callable[[sqlite3.Connection], _T],
        default: _T,
        *,
        batched: bool = False,
    ) -> _T:
        """`action` under the lock; anything but a batched insert first commits the batch."""
        with self._lock:
            if self._db is None:
                if what != "read":
                    self._lost(what)
                return default
            try:
                if not batched:
                    self._commit_batch(self._db)
                return action(self._db)
            except (sqlite3.Error, OSError) as exc:
                if what != "read":
                    self._failures += 1
                if _is_busy(exc):
                    self._report_busy(what, exc)
                    if self._db.in_transaction and not self._uncommitted:
                        self._db.execute("ROLLBACK")  # the batch that could not start
                else:
                    self._disable(what, exc)
                return default

    def _insert_batched(
        self,
        db: sqlite3.Connection,
        values: tuple[Any, ...],
        at_once: bool,
        attempts: Sequence[AttemptRow] = (),
    ) -> int | None:
        now = time.monotonic()
        self._insert_queued(db)  # rows recorded before this one keep the lower ids
        uid = values[-1]
        if not db.in_transaction:
            if at_once or now - self._last_commit >= COMMIT_AFTER_SECONDS:  # nothing to join
                if attempts:  # the execution and its attempts together, or neither
                    db.execute("BEGIN")
                row_id = db.execute(INSERT_EXECUTION, values).lastrowid
                if attempts:
                    _insert_attempts(db, ((uid, attempts),))
                    db.execute("COMMIT")
                self._last_commit = now
                return row_id
            db.execute("BEGIN")
            self._batch_started = now
        row_id = db.execute(INSERT_EXECUTION, values).lastrowid
        _insert_attempts(db, ((uid, attempts),))
        self._uncommitted += 1
        if (
            at_once
            or self._uncommitted >= COMMIT_AFTER_ROWS
            or now - self._batch_started >= COMMIT_AFTER_SECONDS
        ):
            self._commit_batch(db)
        elif self._uncommitted == 1:
            self._wake_committer()
        return row_id

    def _queue(
        self, db: sqlite3.Connection, row: ExecutionRow, attempts: Sequence[AttemptRow]
    ) -> int | None:
        now = time.monotonic()
        batch_open = bool(self._queued) or db.in_transaction
        if not batch_open and now - self._last_commit >= COMMIT_AFTER_SECONDS:
            # After a quiet spell: nothing to join, committed at once.
            return self._insert_batched(db, execution_values(row), True, attempts)
        if not batch_open:
            self._batch_started = now
        self._queued.append((row, attempts))
        waiting = len(self._queued) + self._uncommitted
        if waiting == 1 or waiting >= COMMIT_AFTER_ROWS:
            self._wake_committer()
        return None

    def _insert_queued(self, db: sqlite3.Connection) -> None:
        if not self._queued:
            return
        # Taken first: rows that fail to insert (a busy database) are dropped, not retried.
        queued, self._queued = self._queued, []
        if not db.in_transaction:
            db.execute("BEGIN")
        values = [execution_values(row) for row, _ in queued]
        db.executemany(INSERT_EXECUTION, values)
        uids = (row_values[-1] for row_values in values)
        _insert_attempts(db, zip(uids, (attempts for _, attempts in queued), strict=True))
        self._uncommitted += len(queued)

    def _commit_batch(self, db: sqlite3.Connection) -> None:
        self._insert_queued(db)
        if db.in_transaction:
            db.execute("COMMIT")
            self._last_commit = time.monotonic()
        self._uncommitted = 0

    def _wake_committer(self) -> None:
        # One thread per journal commits a batch that no later row comes to commit.
        if self._committer is None:
            self._committer = threading.Thread(
                target=self._commit_when_due, name="journal-commit", daemon=True
            )
            self._committer.start()
        self._batch_open.notify()

    def _commit_when_due(self) -> None:
        with self._lock:
            while self._db is not None:
                waiting = self._uncommitted + len(self._queued)
                if not waiting:
                    self._batch_open.wait()
                    continue
                left = self._batch_started + COMMIT_AFTER_SECONDS - time.monotonic()
                if left > 0 and waiting < COMMIT_AFTER_ROWS:
                    self._batch_open.wait(left)
                    continue
                try:
                    self._commit_batch(self._db)
                except sqlite3.Error as exc:
                    if _is_busy(exc):
                        self._report_busy("commit", exc)
                        if self._db.in_transaction and not self._uncommitted:
                            self._db.execute("ROLLBACK")  # the batch that could not start
                    else:
                        self._disable("commit", exc)

    def _select(self, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
        return self._run("read", lambda db: db.execute(sql, params).fetchall(), [])

    def _update_session(self, assignments: str, values: tuple[Any, ...], session_id: str) -> None:
        sql = f"UPDATE sessions SET {assignments} WHERE session_id = ?"
        column = assignments.split("=", 1)[0].strip()
        self._write(f"update session {session_id} ({column})", sql, (*values, session_id))

    def _write(self, what: str, sql: str, values: Sequence[Any]) -> None:
        self._run(what, lambda db: db.execute(sql, values), None)

    def _lost(self, what: str) -> None:
        """A write the disabled journal cannot make: counted, and, for the moment an owed event
        began (what crash recovery relies on: an owed session-end), logged one by one."""
        self._failures += 1
        # The moment an owed event began (an owed session-end's): what recovery would need.
        if what.startswith("update session") and what.endswith(_OWED_MOMENTS):
            log.warning(
                "execution journal %s unavailable: could not %s; not recorded, crash recovery"
                " will not know of it (%d writes lost)",
                self.path, what, self._failures,
            )  # fmt: skip

    def stats(self) -> dict[str, int]:
        """Running counts of what did not go as written, since open: `failures` (writes not
        made: the journal disabled, busy, or failing)."""
        return {"failures": self._failures}

    def _disable(self, what: str, exc: BaseException) -> None:
        if self._healthy:
            log.error(
                "execution journal %s disabled (could not %s: %s); hooks keep running unrecorded",
                self.path,
                what,
                exc,
            )
        self._healthy = False
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    def _report_busy(self, what: str, exc: BaseException) -> None:
        if not self._busy_reported:
            self._busy_reported = True
            log.warning("execution journal %s is busy; could not %s: %s", self.path, what, exc)


def _insert_attempts(
    db: sqlite3.Connection, pairs: Iterable[tuple[str, Sequence[AttemptRow]]]
) -> None:
    rows = [attempt_values(attempt, uid) for uid, attempts in pairs for attempt in attempts]
    if rows:
        db.executemany(INSERT_ATTEMPT, rows)


# The name this class had when SQLite was the only journal (`otel_lifecycle_hooks.journal`
# still exports it); the protocol both journals implement is `base.Journal`.
Journal = SqliteJournal

_OWED_MOMENTS = tuple(f"({column})" for column in EVENT_COLUMNS.values())


def _migrate(db: sqlite3.Connection) -> None:
    # IMMEDIATE takes the write lock first: two processes may be creating the file at once.
    db.execute("BEGIN IMMEDIATE")
    try:
        current = db.execute("PRAGMA user_version").fetchone()[0]
        for version, body in statements("sqlite", current):
            for statement in body:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {version}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _is_busy(exc: BaseException) -> bool:
    return getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED")


def _now(at: float | None) -> float:
    return at if at is not None else time.time()
