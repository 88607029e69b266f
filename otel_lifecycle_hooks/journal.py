"""The local execution journal: every hook execution and every supervised session, in SQLite.

The CLI reads it (`list`, `history`, `replay`), and the supervisor uses its sessions table for
crash recovery: a session that reached post-start and never recorded its end was killed, so its
session-end hooks are still owed.

The journal is a record, not a dependency: hooks must run whether or not it can be written. A
corrupt file, a full disk or an unwritable directory is reported once (logger
`otel_lifecycle_hooks.journal`, and `Journal.healthy` turns False); from then on every call is
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

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

log = logging.getLogger("otel_lifecycle_hooks.journal")

SCHEMA_VERSION = 1
BUSY_TIMEOUT = 5.0  # seconds to wait for another process's write lock
# Execution rows are committed at the latest this long after the first uncommitted one...
COMMIT_AFTER_SECONDS = 0.1
# ...or once this many are waiting.
COMMIT_AFTER_ROWS = 64
JOURNAL_ENV = "OTEL_LIFECYCLE_HOOKS_JOURNAL"

# Outcomes a replay may re-send (`dropped`: never attempted, the run's grace period ended;
# `interrupted`: still in flight when the engine shut down).
FAILED_OUTCOMES = ("failed", "timeout", "dropped", "interrupted")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS executions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id      TEXT NOT NULL DEFAULT '',
    agent_id        TEXT NOT NULL DEFAULT '',
    hook            TEXT NOT NULL,
    event           TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    duration_ms     REAL NOT NULL DEFAULT 0,
    started_at      REAL NOT NULL,
    http_status     INTEGER,
    exit_code       INTEGER,
    error_type      TEXT,
    message         TEXT NOT NULL DEFAULT '',
    trace_id        TEXT,
    span_id         TEXT,
    idempotency_key TEXT,
    request         TEXT,
    recovered       INTEGER NOT NULL DEFAULT 0,
    replayed_from   INTEGER
);
CREATE INDEX IF NOT EXISTS executions_by_hook ON executions (hook, id);
CREATE INDEX IF NOT EXISTS executions_by_start ON executions (started_at);
CREATE TABLE IF NOT EXISTS sessions (
    session_id      TEXT PRIMARY KEY,
    agent_id        TEXT NOT NULL DEFAULT '',
    agent_name      TEXT NOT NULL DEFAULT '',
    template_files  TEXT NOT NULL DEFAULT '[]',
    pid             INTEGER,
    started_at      REAL NOT NULL,
    post_started_at REAL,
    ended_at        REAL,
    exit_code       INTEGER,
    recovered_at    REAL
);
CREATE INDEX IF NOT EXISTS sessions_by_agent ON sessions (agent_id);
"""

_EXECUTION_COLUMNS = (
    "session_id", "agent_id", "hook", "event", "outcome", "attempts", "duration_ms",
    "started_at", "http_status", "exit_code", "error_type", "message", "trace_id", "span_id",
    "idempotency_key", "request", "recovered", "replayed_from",
)  # fmt: skip


class ExecutionRow(NamedTuple):
    """One hook execution as journaled. `request` is the redacted rendered request (or
    command), kept so that `replay` can send it again; `replayed_from` links a replay to the
    row it re-sent; `recovered` marks executions fired by crash recovery."""

    hook: str
    event: str
    outcome: str  # success | failed | timeout | skipped | refused
    started_at: float  # unix seconds
    attempts: int = 1
    duration_ms: float = 0.0
    session_id: str = ""
    agent_id: str = ""
    http_status: int | None = None
    exit_code: int | None = None
    error_type: str | None = None
    message: str = ""
    trace_id: str | None = None
    span_id: str | None = None
    idempotency_key: str | None = None
    request: Mapping[str, Any] | None = None
    recovered: bool = False
    replayed_from: int | None = None
    id: int | None = None


class SessionRow(NamedTuple):
    """One supervised agent session, for crash recovery."""

    session_id: str
    agent_id: str
    agent_name: str
    template_files: tuple[str, ...]
    pid: int | None
    started_at: float
    post_started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    recovered_at: float | None = None


class _ExecutionLike(Protocol):
    """What `Journal.record` reads from the engine's execution record."""

    session_id: str
    outcome: str
    attempts: int
    duration: float
    started_at: float
    idempotency_key: str
    status_code: int | None
    exit_code: int | None
    error_type: str | None
    message: str
    request: Mapping[str, Any] | None
    trace_id: str | None
    span_id: str | None


_T = TypeVar("_T")


def default_journal_path(environ: Mapping[str, str]) -> Path:
    """`$OTEL_LIFECYCLE_HOOKS_JOURNAL`, else `$HOME/.local/state/otel-lifecycle-hooks/journal.sqlite3`."""
    explicit = environ.get(JOURNAL_ENV)
    if explicit:
        return Path(explicit)
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "state" / "otel-lifecycle-hooks" / "journal.sqlite3"


class Journal:
    """The execution journal over one SQLite file (WAL mode). Thread-safe; never raises."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = BUSY_TIMEOUT) -> None:
        """Open (creating if needed) the journal at `path`. `busy_timeout`: seconds a write
        waits for another process's lock before that one write is dropped."""
        self.path = Path(path)
        self._busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._healthy = True
        self._busy_reported = False
        # The open batch of execution rows: how many, and when the first was written.
        self._uncommitted = 0
        self._queued: list[ExecutionRow] = []  # rows of the batch not inserted yet
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

    def record_execution(self, row: ExecutionRow) -> int | None:
        """Append `row`; its new id, or None if the journal is not recording."""
        values = _execution_values(row)
        # A failed delivery's row is what `replay` re-sends from: never left uncommitted.
        at_once = row.outcome in FAILED_OUTCOMES
        return self._run(
            "record an execution",
            lambda db: self._insert_batched(db, values, at_once),
            None,
            batched=True,
        )

    def record(self, execution: _ExecutionLike) -> int | None:
        """Append the engine's execution record (a sink for the executor): its new id, or
        None if the journal is not recording or the row joined a batch (a successful row that
        follows closely on others, inserted and committed by the journal's own thread)."""
        hook = getattr(execution, "hook", None)
        event = getattr(execution, "event", None)
        row = ExecutionRow(
            hook=_name_of(hook),
            event=_name_of(event),
            outcome=execution.outcome,
            started_at=execution.started_at,
            attempts=execution.attempts,
            duration_ms=execution.duration * 1000.0,
            session_id=execution.session_id,
            agent_id=getattr(execution, "agent_id", "") or "",
            http_status=execution.status_code,
            exit_code=execution.exit_code,
            error_type=execution.error_type,
            message=execution.message,
            trace_id=execution.trace_id,
            span_id=execution.span_id,
            idempotency_key=execution.idempotency_key,
            request=execution.request,
            recovered=bool(getattr(event, "recovered", False)),
            replayed_from=getattr(execution, "replayed_from", None),
        )
        if row.outcome in FAILED_OUTCOMES:
            return self.record_execution(row)
        return self._run("record an execution", lambda db: self._queue(db, row), None, batched=True)

    def get(self, execution_id: int) -> ExecutionRow | None:
        """The execution with this id, if any."""
        rows = self._select("SELECT * FROM executions WHERE id = ?", (execution_id,))
        return _execution_row(rows[0]) if rows else None

    def recent(self, hook_name: str | None = None, limit: int = 20) -> list[ExecutionRow]:
        """The latest executions, newest first; of one hook if `hook_name` is given."""
        if hook_name is None:
            rows = self._select("SELECT * FROM executions ORDER BY id DESC LIMIT ?", (limit,))
        else:
            rows = self._select(
                "SELECT * FROM executions WHERE hook = ? ORDER BY id DESC LIMIT ?",
                (hook_name, limit),
            )
        return [_execution_row(row) for row in rows]

    def failed(self, since: float | None = None) -> list[ExecutionRow]:
        """Executions that failed or timed out (started at or after `since`), oldest first."""
        marks = ", ".join("?" for _ in FAILED_OUTCOMES)
        rows = self._select(
            f"SELECT * FROM executions WHERE outcome IN ({marks}) AND started_at >= ? ORDER BY id",
            (*FAILED_OUTCOMES, since if since is not None else float("-inf")),
        )
        return [_execution_row(row) for row in rows]

    def delivered_by_replay(self) -> set[int]:
        """Ids of executions that a later replay delivered (a successful row re-sent them)."""
        rows = self._select(
            "SELECT DISTINCT replayed_from FROM executions"
            " WHERE replayed_from IS NOT NULL AND outcome = 'success'",
            (),
        )
        return {row[0] for row in rows}

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
    ) -> None:
        """Record that a supervised session started (replacing a row of the same id)."""
        values = (
            session_id, agent_id, agent_name, json.dumps(list(template_files)), pid,
            started_at if started_at is not None else time.time(),
        )  # fmt: skip
        self._run(
            "open a session",
            lambda db: db.execute(
                "INSERT OR REPLACE INTO sessions"
                " (session_id, agent_id, agent_name, template_files, pid, started_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                values,
            ),
            None,
        )

    def mark_post_start(self, session_id: str, at: float | None = None) -> None:
        """The session reached post-start: from now on, a missing end means a crash."""
        self._update_session("post_started_at = ?", (_now(at),), session_id)

    def close_session(
        self, session_id: str, exit_code: int | None, at: float | None = None
    ) -> None:
        """The session ended (its session-end hooks were fired)."""
        self._update_session("ended_at = ?, exit_code = ?", (_now(at), exit_code), session_id)

    def mark_recovered(self, session_id: str, at: float | None = None) -> None:
        """Crash recovery fired this session's owed hooks: never recover it again."""
        self._update_session("recovered_at = ?", (_now(at),), session_id)

    def unfinished_sessions(self, agent_id: str) -> list[SessionRow]:
        """Sessions of `agent_id` that reached post-start, never ended, and were not recovered."""
        rows = self._select(
            "SELECT * FROM sessions WHERE agent_id = ? AND post_started_at IS NOT NULL"
            " AND ended_at IS NULL AND recovered_at IS NULL ORDER BY started_at",
            (agent_id,),
        )
        return [_session_row(row) for row in rows]

    def session(self, session_id: str) -> SessionRow | None:
        """One session by id."""
        rows = self._select("SELECT * FROM sessions WHERE session_id = ?", (session_id,))
        return _session_row(rows[0]) if rows else None

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
                try:
                    self._db.close()
                except sqlite3.Error:
                    pass
                self._db = None

    # -- internals --

    def _open(self) -> sqlite3.Connection:
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
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"schema version {version} is newer than this package's {SCHEMA_VERSION}"
                )
            if version < SCHEMA_VERSION:
                _create_schema(db)
        except BaseException:
            db.close()
            raise
        return db

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
                return default
            try:
                if not batched:
                    self._commit_batch(self._db)
                return action(self._db)
            except (sqlite3.Error, OSError) as exc:
                if _is_busy(exc):
                    self._report_busy(what, exc)
                    if self._db.in_transaction and not self._uncommitted:
                        self._db.execute("ROLLBACK")  # the batch that could not start
                else:
                    self._disable(what, exc)
                return default

    def _insert_batched(
        self, db: sqlite3.Connection, values: tuple[Any, ...], at_once: bool
    ) -> int | None:
        now = time.monotonic()
        self._insert_queued(db)  # rows recorded before this one keep the lower ids
        if not db.in_transaction:
            if at_once or now - self._last_commit >= COMMIT_AFTER_SECONDS:  # nothing to join
                row_id = db.execute(_INSERT_EXECUTION, values).lastrowid
                self._last_commit = now
                return row_id
            db.execute("BEGIN")
            self._batch_started = now
        row_id = db.execute(_INSERT_EXECUTION, values).lastrowid
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

    def _queue(self, db: sqlite3.Connection, row: ExecutionRow) -> int | None:
        now = time.monotonic()
        batch_open = bool(self._queued) or db.in_transaction
        if not batch_open and now - self._last_commit >= COMMIT_AFTER_SECONDS:
            row_id = db.execute(_INSERT_EXECUTION, _execution_values(row)).lastrowid
            self._last_commit = now  # after a quiet spell: nothing to join, committed at once
            return row_id
        if not batch_open:
            self._batch_started = now
        self._queued.append(row)
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
        db.executemany(_INSERT_EXECUTION, map(_execution_values, queued))
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
        self._run("update a session", lambda db: db.execute(sql, (*values, session_id)), None)

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
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None

    def _report_busy(self, what: str, exc: BaseException) -> None:
        if not self._busy_reported:
            self._busy_reported = True
            log.warning("execution journal %s is busy; could not %s: %s", self.path, what, exc)


def _create_schema(db: sqlite3.Connection) -> None:
    # IMMEDIATE takes the write lock first: two processes may be creating the file at once.
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


_INSERT_EXECUTION = (
    f"INSERT INTO executions ({', '.join(_EXECUTION_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in _EXECUTION_COLUMNS)})"
)


def _is_busy(exc: BaseException) -> bool:
    return getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED")


def _name_of(spec: Any) -> str:
    # Not getattr's default: str() of a spec is its whole dataclass repr, built for nothing.
    name = getattr(spec, "name", None)
    return name if isinstance(name, str) else str(spec)


def _now(at: float | None) -> float:
    return at if at is not None else time.time()


def _execution_values(row: ExecutionRow) -> tuple[Any, ...]:
    request = json.dumps(row.request, sort_keys=True) if row.request is not None else None
    return (
        row.session_id, row.agent_id, row.hook, row.event, row.outcome, row.attempts,
        row.duration_ms, row.started_at, row.http_status, row.exit_code, row.error_type,
        row.message, row.trace_id, row.span_id, row.idempotency_key, request,
        int(row.recovered), row.replayed_from,
    )  # fmt: skip


def _execution_row(row: sqlite3.Row) -> ExecutionRow:
    request = json.loads(row["request"]) if row["request"] is not None else None
    return ExecutionRow(
        id=row["id"],
        hook=row["hook"],
        event=row["event"],
        outcome=row["outcome"],
        started_at=row["started_at"],
        attempts=row["attempts"],
        duration_ms=row["duration_ms"],
        session_id=row["session_id"],
        agent_id=row["agent_id"],
        http_status=row["http_status"],
        exit_code=row["exit_code"],
        error_type=row["error_type"],
        message=row["message"],
        trace_id=row["trace_id"],
        span_id=row["span_id"],
        idempotency_key=row["idempotency_key"],
        request=request,
        recovered=bool(row["recovered"]),
        replayed_from=row["replayed_from"],
    )


def _session_row(row: sqlite3.Row) -> SessionRow:
    return SessionRow(
        session_id=row["session_id"],
        agent_id=row["agent_id"],
        agent_name=row["agent_name"],
        template_files=tuple(json.loads(row["template_files"] or "[]")),
        pid=row["pid"],
        started_at=row["started_at"],
        post_started_at=row["post_started_at"],
        ended_at=row["ended_at"],
        exit_code=row["exit_code"],
        recovered_at=row["recovered_at"],
    )
