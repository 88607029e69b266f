"""The PostgreSQL journal: one database that a fleet of supervisors and reconcilers share.

Writing never waits for the database. Every write is queued in memory and a writer thread
commits the queue in batches; a database that is slow or down only makes the queue longer.
Past `MAX_PENDING` queued writes, further ones go to a local spill file instead of memory.
Session writes (what recovery relies on) are also appended to that file as they are made, so
that a supervisor killed before its writer caught up leaves them on disk. Whatever is still
unwritten at `close` (after `CLOSE_TIMEOUT`) is kept in the file and reported in one line; the
next journal opened on this machine for the same database adopts such files and writes them.
Replaying a write twice is harmless: execution rows carry a unique `row_uid`, and session
writes only fill what is empty or move a moment forward.

One exception bounds, rather than removes, a wait: the moment an owed event begins (its
X-Scion-Hook-ID) waits up to `BEGIN_EVENT_WAIT` for its commit while the database answers, so
that a reconciler elsewhere reuses that id; while the database is known down it does not wait.
A caller may ask for a longer wait that holds while the database is down or refuses (post-start,
whose registration a reconciler must be able to find): the writer then retries at short
intervals, and a moment still not committed when the wait ends is synced to the spill file
and counted (`stats()["unconfirmed"]`), never dropped.

`stats()` counts what did not go as written: write failures, writes refused, writes kept only
in a spill file, spill files adopted, waits that ended before the commit (telemetry reads it).

Reads (`history`, `reconcile`, recovery at start) and claims are made when asked: they are not
on a hook's path. They and the writer share one connection, opened when first needed and
closed once unused for `CONNECTION_IDLE`: a fleet of N supervisors holds at most N connections
(none for a supervisor with nothing to write), and no session-level state is ever relied on
(no server-side prepared statements, advisory locks only within a transaction, no LISTEN, and
only SET LOCAL), so a pooler in transaction mode (PgBouncer) can stand between them and the
database.

A frozen node never stalls recovery: every transaction this journal opens is ended by the
database once idle for `IDLE_IN_TRANSACTION_TIMEOUT` (a stopped process's locks go with it),
and a claim waits at most `CLAIM_LOCK_WAIT` for a session's row: one still locked then is
skipped for this pass, with a warning, and claimed at a later one. A write batch waits at most
`WRITE_LOCK_WAIT` for a row, and is then kept and tried again (the database answered: no
outage), while reads and claims go on without it.

Heartbeats are stamped with the database's clock when they are committed, and queued (never
spilled) while it is down; `liveness_clock` gives recoverers the database's now and the moment
from which supervisors could write again (liveness.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

from .liveness import LivenessClock
from .reading import JournalReader
from .retention import CHUNK_ROWS, Retention, apply, never_stopped
from .rows import (
    CLAIM,
    EVENT_COLUMNS,
    INSERT_ATTEMPT,
    INSERT_EXECUTION,
    OPEN_SESSION,
    OPEN_SESSION_UNSEALED,
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

MAX_PENDING = 10_000  # queued writes kept in memory; past this they are spilled to the file
BATCH_ROWS = 500  # writes committed in one transaction
# A write waits this long for others to share its transaction (one commit per delivery would
# be the database's and the supervisor's largest cost under load); a waited-on write does not.
BATCH_WINDOW = 0.1
CLOSE_TIMEOUT = 5.0  # seconds `close` waits for the queue to be written
BEGIN_EVENT_WAIT = 0.25  # seconds an owed event's start waits for its commit (database up)
RETENTION_YIELD = 1.0  # seconds a retention chunk waits for queued writes to go first
ADOPTED_WAIT = 3.0  # seconds recovery waits for adopted spill files to be written
# Seconds after which the unused connection is closed: longer than the default heartbeat
# (10 s), so that a running supervisor keeps its one connection rather than reopening it at
# every beat; one with nothing to write (or a command that read once) lets it go.
CONNECTION_IDLE = 30.0
CONNECT_TIMEOUT = 3  # seconds, for every connection
# Between attempts to reach a database that is down: capped low, so that a supervisor's
# queued heartbeat is in within seconds of the database's return (each delay jittered by up
# to a quarter, so that a fleet does not reconnect in step).
RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0)
# While a caller waits for its commit (a registration), retries stay this close, jittered so
# that a fleet refused together ("too many clients") does not come back in one burst.
URGENT_RETRY_DELAY = 0.5
# Serialises migrations of one database across every process that opens it.
_MIGRATION_LOCK = 0x6F746C68
# A frozen node (SIGSTOP, a paused VM) stopped inside one of its transactions keeps that
# transaction's row locks while its connection lives, and a reconciler claiming its session
# would wait on them forever. Every transaction this journal opens is therefore ended by the
# database once left idle this long (its writes are replayed, harmlessly, if the node resumes):
# ours last milliseconds between statements, so only a stopped process reaches it.
IDLE_IN_TRANSACTION_TIMEOUT = 5.0
# How long a claim waits for a session's row lock: longer than the above, so that a frozen
# supervisor's lock has gone by then and the session is recovered in the same pass; a lock
# held longer (another client's) skips the session this pass, said so, and the next pass
# tries again.
CLAIM_LOCK_WAIT = 8.0
# How long a write batch waits for a row lock before it is tried again (after the longest
# of RETRY_DELAYS): short, as the writer holds the one connection the claims and reads use.
WRITE_LOCK_WAIT = 1.0
_IDLE_MS = int(IDLE_IN_TRANSACTION_TIMEOUT * 1000)
_IDLE_LIMIT = f"SET LOCAL idle_in_transaction_session_timeout = '{_IDLE_MS}ms'"
_CLAIM_LOCK_LIMIT = f"SET LOCAL lock_timeout = '{int(CLAIM_LOCK_WAIT * 1000)}ms'"
_WRITE_LOCK_LIMIT = f"SET LOCAL lock_timeout = '{int(WRITE_LOCK_WAIT * 1000)}ms'"

_INSERT_EXECUTION = INSERT_EXECUTION.replace("?", "%s") + " ON CONFLICT (row_uid) DO NOTHING"
_INSERT_ATTEMPT = (
    INSERT_ATTEMPT.replace("?", "%s") + " ON CONFLICT (execution_uid, attempt) DO NOTHING"
)

_Write = tuple[str, tuple[Any, ...]]


def _sql(text: str) -> str:
    return text.replace("?", "%s")


# A heartbeat at a moment the caller names (never moved back); an earlier version's
# supervisors spilled it, so that an upgrade still writes the spill files that hold it.
_HEARTBEAT = (
    "UPDATE sessions SET heartbeat_at = %s WHERE session_id = %s"
    " AND (heartbeat_at IS NULL OR heartbeat_at < %s)"
)
# The heartbeat on the database's clock, when it is written: what a reconciler compares with
# the database's now (liveness.py). Never spilled nor replayed from a file: a heartbeat
# written late by another process would show a dead supervisor alive.
_HEARTBEAT_NOW = (
    "UPDATE sessions SET heartbeat_at = EXTRACT(EPOCH FROM clock_timestamp())::float8"
    " WHERE session_id = %s"
)
# The database's now and the moment it started, on its clock.
_CLOCK = (
    "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8 AS now,"
    " EXTRACT(EPOCH FROM pg_postmaster_start_time())::float8 AS started"
)
# The assignments `_update` writes to a session row.
_SESSION_UPDATES = (
    "agent_pid = %s, agent_started_at = %s",
    "post_started_at = %s",
    "ended_at = %s, exit_code = %s",
    "recovered_at = %s",
)


def _update_sql(assignments: str) -> str:
    return f"UPDATE sessions SET {assignments} WHERE session_id = %s"


def _begin_event_sql(column: str) -> str:
    return _update_sql(f"{column} = COALESCE({column}, %s), seal = COALESCE(%s, seal)")


# Every statement this journal writes: the only ones a spill file may hold. A spill folder the
# agent can write would otherwise run its SQL with the journal's database role. The previous
# schema's session writes (no seal) are kept, so that an upgrade still writes its spill files.
_WRITTEN = frozenset(
    {
        _INSERT_EXECUTION,
        _INSERT_ATTEMPT,
        _sql(UPDATE_EXECUTION),
        _sql(OPEN_SESSION),
        _HEARTBEAT,
        *(_update_sql(assignments) for assignments in _SESSION_UPDATES),
        *(_begin_event_sql(column) for column in EVENT_COLUMNS.values()),
        _sql(OPEN_SESSION_UNSEALED),
        *(_update_sql(f"{c} = COALESCE({c}, %s)") for c in EVENT_COLUMNS.values()),
    }
)


def redacted_url(url: str) -> str:
    """The URL with any password (in its userinfo or a `password=` parameter) taken out."""
    parts = urlsplit(url)
    if parts.password is not None:
        host = parts.hostname or ""
        netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
        parts = parts._replace(netloc=netloc)
    if "password" in parts.query.lower():
        kept = [
            "password=***" if item.split("=", 1)[0].lower() == "password" else item
            for item in parts.query.split("&")
        ]
        parts = parts._replace(query="&".join(kept))
    return urlunsplit(parts)


def default_spill_dir(url: str, environ: Mapping[str, str]) -> Path:
    """Where writes that could not reach this database wait: one folder per database."""
    home = environ.get("HOME") or str(Path.home())
    key = hashlib.sha256(redacted_url(url).encode()).hexdigest()[:16]
    return Path(home) / ".local" / "state" / "otel-lifecycle-hooks" / "pending" / key


class PostgresJournal(JournalReader):
    """The execution journal over a PostgreSQL database: a `base.Journal`, its reads
    `reading.JournalReader`'s. Thread-safe; never raises."""

    def __init__(
        self,
        url: str,
        *,
        spill_dir: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.url = url
        self.path = redacted_url(url)  # what messages name (the SQLite journal's `path`)
        self._spill_dir = (
            Path(spill_dir)
            if spill_dir
            else default_spill_dir(url, os.environ if environ is None else environ)
        )
        self._max_pending = max_pending
        self._cond = threading.Condition()
        self._queue: deque[_Write] = deque()
        self._in_flight = 0  # writes at the queue's head that the writer is committing
        self._closing = False
        self._db_down = False  # the writer's last attempt failed
        self._down_reported = False
        self._committed = 0  # writes committed since open (waiters compare against it)
        self._enqueued = 0
        self._urgent = False  # a caller waits for the queue's commit: no batching window
        self.refused = 0  # writes the database refused (reported one by one)
        self._failures = 0  # attempts to write that failed (the database down or refusing)
        self._spilled_total = 0  # writes kept only in a spill file (not also queued)
        self._adopted = 0  # spill files of earlier processes written to the database
        self._unconfirmed = 0  # waited-on writes not committed when the wait ended
        self._waiting = 0  # callers waiting for a commit: retries stay close
        self._healthy = True
        # Set when a read or write found the database unreachable; the next `liveness_clock`
        # then takes the database's now as the moment supervisors could write again.
        self._outage_seen = False
        self._reachable_since = 0.0
        # The writer's last attempt waited in vain for a row another connection holds: what
        # waits for the writer (recovery's reads) does not wait for it meanwhile.
        self._lock_blocked = False
        self._spill_lock = threading.Lock()
        self._spill: IO[str] | None = None
        self._spill_path = self._spill_dir / "unused.jsonl"  # named when first written
        self._spilled_unwritten = 0  # writes only in the spill file
        # Files to write (orphans adopted, our own spill rotated out), each held under flock
        # until written and removed: another journal never takes a file that is held.
        self._held: list[tuple[Path, IO[str]]] = self._adopt_orphans()
        self._orphans = {path for path, _ in self._held}  # what `adopted` counts
        # The one connection, shared by the writer and the readers: held under this lock for
        # one transaction or one read at a time.
        self._db_lock = threading.Lock()
        self._db: Any = None
        self._db_used = 0.0  # monotonic time of its last use
        self._migrated = False  # the schema was checked once: later connections skip it
        self._writer = threading.Thread(target=self._write_loop, name="journal-pg", daemon=True)
        self._writer.start()

    @property
    def healthy(self) -> bool:
        """False while reads fail (the database is down, or holds a newer schema)."""
        return self._healthy

    # -- executions --

    def record_execution(
        self, row: ExecutionRow, attempts: Sequence[AttemptRow] = ()
    ) -> int | None:
        """Queue `row` and its `attempts`; None (its id is the database's, known once
        written)."""
        # An owed event's row (what recovery reads to skip a hook that ran) and a failed
        # delivery's (what replay re-sends) are kept on disk at once, as session writes are.
        durable = commits_at_once(row)
        values = execution_values(row, new_row_uid())
        self._enqueue(_INSERT_EXECUTION, values, durable=durable)
        for attempt in attempts:  # the same batch, after their execution
            self._enqueue(_INSERT_ATTEMPT, attempt_values(attempt, values[-1]), durable=durable)
        return None

    def record(self, execution: ExecutionLike) -> None:
        """Queue the engine's execution record (a sink for the executor) with its attempts."""
        self.record_execution(execution_row_of(execution), attempts_of(execution))

    def update_execution(
        self, row: ExecutionRow, attempts: Sequence[AttemptRow] = ()
    ) -> int | None:
        """Queue the rewrite of the execution journaled under `row.row_uid` (in flight) with
        `row`'s values, and its new `attempts`; None (as `record_execution`)."""
        durable = commits_at_once(row)
        self._enqueue(_sql(UPDATE_EXECUTION), execution_values(row), durable=durable)
        for attempt in attempts:
            self._enqueue(
                _INSERT_ATTEMPT, attempt_values(attempt, row.row_uid or ""), durable=durable
            )
        return None

    def apply_retention(
        self,
        retention: Retention,
        now: float | None = None,
        chunk: int | None = None,
        stopped: Callable[[], bool] | None = None,
    ) -> int:
        """Delete what `retention` no longer keeps, a chunk per transaction, on the journal's
        connection between the writer's batches (not through the write queue; never on a
        hook's path), until done or `stopped()`; how many executions went."""

        def execute(batch: list[tuple[str, tuple[Any, ...]]]) -> int:
            self._wait_for_queue(RETENTION_YIELD)
            *before, (last_sql, last_params) = batch
            # One statement, so one transaction on the autocommit connection.
            steps = [f"step{n} AS ({sql} RETURNING 1)" for n, (sql, _) in enumerate(before)]
            params = [p for _, values in before for p in values]
            steps.append(f"gone AS ({last_sql} RETURNING 1)")
            found = self._select(
                f"WITH {', '.join(steps)} SELECT count(*) AS n FROM gone", (*params, *last_params)
            )
            return int(found[0]["n"]) if found else 0

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
        values = open_session_values(
            session_id, agent_id, agent_name, template_files, pid, _now(started_at),
            templates, metadata or {}, variables or {}, host, seal,
        )  # fmt: skip
        self._enqueue(_sql(OPEN_SESSION), values)

    def begin_event(
        self,
        session_id: str,
        event: str,
        timestamp: float,
        seal: str | None = None,
        *,
        wait: float | None = None,
    ) -> bool:
        """Queue the moment an owed event begins and wait for its commit: up to
        `BEGIN_EVENT_WAIT` while the database answers, or, with `wait`, up to that many seconds
        whether or not it does (a write still waiting then is synced to the spill file, counted
        as unconfirmed, and written when the database answers). Always True, as
        SqliteJournal.begin_event means it: a write the database cannot take now is kept and
        written when it can, so this moment is the one it will hold."""
        column = EVENT_COLUMNS[event]
        ticket = self._enqueue(_begin_event_sql(column), (timestamp, seal, session_id))
        committed = self._wait_for(ticket, BEGIN_EVENT_WAIT if wait is None else wait, wait is None)
        if not committed and wait is not None:
            self._sync_spill()  # on the disk, not only in the kernel: a node lost keeps it
            with self._cond:
                self._unconfirmed += 1
                down = self._db_down
            log.warning(
                "execution journal %s: session %s's %s not in the database after %gs (%s);"
                " kept in %s and written when it answers; a pod lost with that disk before"
                " then loses it (counted)",
                self.path, session_id, event, wait,
                "unreachable or refusing" if down else "slow", self._spill_path,
            )  # fmt: skip
        return True

    def _wait_for(self, ticket: int, timeout: float, give_up_when_down: bool) -> bool:
        """Whether the write with `ticket` was committed within `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._urgent = True
            self._waiting += 1
            self._cond.notify_all()
            try:
                while self._committed < ticket and not self._closing:
                    if give_up_when_down and self._db_down:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                return self._committed >= ticket
            finally:
                self._waiting -= 1

    def stats(self) -> dict[str, int]:
        """Running counts of what did not go as written, since open: `failures` (attempts
        to write that failed), `refused` (writes the database refused), `spilled` (writes
        kept only in a spill file), `adopted` (earlier processes' spill files written),
        `unconfirmed` (owed moments not committed when their wait ended), `pending`."""
        with self._cond:
            counts = {
                "failures": self._failures,
                "refused": self.refused,
                "spilled": self._spilled_total,
                "adopted": self._adopted,
                "unconfirmed": self._unconfirmed,
            }
        counts["pending"] = self.pending()
        return counts

    def _sync_spill(self) -> None:
        with self._spill_lock:
            if self._spill is None:
                return
            try:
                self._spill.flush()
                os.fsync(self._spill.fileno())
            except OSError as exc:
                log.error("execution journal %s: could not sync %s: %s", self.path,
                          self._spill_path, exc)  # fmt: skip

    def mark_agent(self, session_id: str, pid: int, started_at: float | None) -> None:
        self._update("agent_pid = %s, agent_started_at = %s", (pid, started_at), session_id)

    def heartbeat(self, session_id: str, at: float | None = None) -> None:
        """The session's supervisor is alive: written with the database's clock when it is
        committed (a supervisor passes no `at`: its own clock never decides liveness).
        Queued while the database is down, so that it goes in as soon as it is back."""
        if at is None:
            self._enqueue(_HEARTBEAT_NOW, (session_id,), durable=False, droppable=True)
        else:
            self._enqueue(_HEARTBEAT, (at, session_id, at), durable=False, droppable=True)

    def liveness_clock(self) -> LivenessClock | None:
        """The database's now, and the moment from which a live supervisor could have
        written: its start, or this journal's return from an outage it saw (liveness.py);
        None when it cannot be read."""
        with self._cond:
            outage_seen = self._outage_seen or self._db_down
        rows = self._select(_CLOCK, ())
        if not rows:
            return None
        now, started = float(rows[0]["now"]), float(rows[0]["started"] or 0.0)
        if outage_seen:
            with self._cond:
                self._outage_seen = False
                self._reachable_since = now
        return LivenessClock(now, max(started, self._reachable_since))

    def mark_post_start(self, session_id: str, at: float | None = None) -> None:
        self._update("post_started_at = %s", (_now(at),), session_id)

    def close_session(
        self, session_id: str, exit_code: int | None, at: float | None = None
    ) -> None:
        self._update("ended_at = %s, exit_code = %s", (_now(at), exit_code), session_id)

    def mark_recovered(self, session_id: str, at: float | None = None) -> None:
        self._update("recovered_at = %s", (_now(at),), session_id)

    def unfinished_sessions(self, agent_id: str | None = None) -> list[SessionRow]:
        """As `JournalReader.unfinished_sessions`, once the spill files adopted at open (a
        killed supervisor's writes on this machine) are written, or `ADOPTED_WAIT` passed."""
        self._wait_for_adopted()
        return super().unfinished_sessions(agent_id)

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
        """Take an unfinished session for recovery (one UPDATE: under the row's lock, of any
        number of claimers exactly one sees it unclaimed), re-sealed with `seal` when given;
        None if another holds it."""
        self._wait_for_adopted()
        now = _now(at)
        params = claim_values(claimer, lease, now, session_id, steal_from, seal)
        rows = self._select(CLAIM, params, locked_row=session_id)
        return session_row(rows[0]) if rows else None

    def release_claim(self, session_id: str, claimer: str, at: float | None = None) -> None:
        """Give back `claimer`'s claim of a session it could not finish recovering, once the
        rows of what it sent are committed (the next claimer reads them, and skips what
        delivered); a database that does not answer leaves the claim to lapse."""
        if not self.flush():
            return
        self._select(RELEASE_CLAIM, (_now(at) - 1.0, session_id, claimer))

    def flush(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """Wait until every queued write is committed; False if `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._urgent = True
            self._cond.notify_all()
            target = self._enqueued
            while self._committed < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _wait_for_queue(self, timeout: float) -> None:
        """Wait up to `timeout` for the queued writes to be committed: a retention chunk on
        the shared connection lets a hook's writes go first (an owed event's start waits for
        its commit)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue and not (self._db_down or self._lock_blocked or self._closing):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def _wait_for_adopted(self, timeout: float = ADOPTED_WAIT) -> None:
        """Recovery reads after the writes a killed supervisor left on this machine (the
        moments of its owed events) are in: otherwise it would claim new ones."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._held and not (self._db_down or self._lock_blocked):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def backlog(self) -> str:
        """A line saying the database was unavailable and writes wait on this machine (queued,
        or in spill files not written yet: this process's and earlier ones'); "" when none."""
        with self._cond:
            queued = len(self._queue) + self._spilled_unwritten
            files = len(self._held)
            down = self._db_down or not self._healthy
        if not queued and not files:
            return ""
        parts = [f"{queued} writes queued"] if queued else []
        if files:
            parts.append(f"{files} spill files not written yet")
        state = "is unavailable" if down else "was unavailable"
        return (
            f"the journal {self.path} {state}: {', '.join(parts)} on this machine; what they"
            " hold is not shown until written"
        )

    def pending(self) -> int:
        """Writes not committed yet (queued, or only in the spill file)."""
        with self._cond:
            return len(self._queue) + self._spilled_unwritten

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Write what is queued within `timeout`; keep the rest in the spill file, and say so."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        # A database known to be down is not waited for: what is queued is kept at once.
        deadline = time.monotonic() + timeout
        while self._writer.is_alive() and not self._db_down:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._writer.join(min(remaining, 0.05))
        with self._cond:
            left = list(self._queue)
            self._queue.clear()
        if left:
            self._spill_writes(left)
        with self._spill_lock:
            unwritten = self._spilled_unwritten
            if self._spill is not None:
                if not unwritten:  # removed while still held: nobody adopts it meanwhile
                    with contextlib.suppress(OSError):
                        self._spill_path.unlink()
                self._spill.close()
                self._spill = None
        if unwritten:
            log.warning(
                "execution journal %s unreachable: %d writes kept in %s, written by the next"
                " journal opened for it on this machine",
                self.path,
                unwritten,
                self._spill_path,
            )
        for _, handle in self._held:  # not written: left, unlocked, for the next journal
            handle.close()
        # A writer stuck in a statement (a database that stopped answering) keeps the lock:
        # its connection is then left to the process's exit, never waited on here.
        if self._db_lock.acquire(timeout=1.0):
            try:
                self._drop_connection()
            finally:
                self._db_lock.release()

    # -- writing --

    def _update(self, assignments: str, values: tuple[Any, ...], session_id: str) -> None:
        self._enqueue(_update_sql(assignments), (*values, session_id))

    def _enqueue(
        self, sql: str, params: tuple[Any, ...], *, durable: bool = True, droppable: bool = False
    ) -> int:
        """Queue one write; its ticket (the commit count at which it is written). `durable`
        writes (sessions) are also appended to the spill file at once; a `droppable` one
        (a heartbeat) is never spilled: left out when it cannot be queued."""
        params = tuple(_storable(param) for param in params)
        if durable:
            self._spill_writes([(sql, params)], written_later=True)
        with self._cond:
            if self._closing or len(self._queue) >= self._max_pending:
                if not droppable:
                    self._spill_writes([(sql, params)])
                return self._enqueued
            self._queue.append((sql, params))
            self._enqueued += 1
            ticket = self._enqueued
            self._cond.notify_all()
        return ticket

    def _spill_writes(self, writes: Sequence[_Write], *, written_later: bool = False) -> None:
        """Append writes to this process's spill file; `written_later`: the queue holds them
        too (a copy for a crash), so they are not counted as unwritten."""
        try:
            with self._spill_lock:
                if self._spill is None:
                    self._spill, self._spill_path = self._new_spill_file()
                for sql, params in writes:
                    self._spill.write(json.dumps([sql, list(params)]) + "\n")
                self._spill.flush()  # in the kernel: a SIGKILL does not lose it
                if not written_later:
                    self._spilled_unwritten += len(writes)
                    self._spilled_total += len(writes)
        except OSError as exc:
            log.error(
                "execution journal %s: could not keep %d writes: %s", self.path, len(writes), exc
            )

    def _new_spill_file(self) -> tuple[IO[str], Path]:
        self._spill_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        stem = f"{os.getpid()}-{random.getrandbits(48):012x}"
        hidden = self._spill_dir / f"{stem}.new"
        fd = os.open(hidden, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_APPEND, 0o600)
        handle = os.fdopen(fd, "a", encoding="utf-8")
        # Locked before it gets the name others look for: held while this process lives, so
        # that a file nobody holds is an orphan to adopt.
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        path = self._spill_dir / f"{stem}.jsonl"
        os.replace(hidden, path)
        return handle, path

    def _adopt_orphans(self) -> list[tuple[Path, IO[str]]]:
        """Spill files of processes that are gone, held for this journal's writer."""
        adopted: list[tuple[Path, IO[str]]] = []
        try:
            candidates = sorted(self._spill_dir.glob("*.jsonl"))
        except OSError:
            return adopted
        for path in candidates:
            try:
                handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held until written
            except OSError:
                continue  # taken and written by another journal meanwhile
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()  # held by a live process
                continue
            adopted.append((path, handle))
        return adopted

    def _write_loop(self) -> None:
        import psycopg  # the [postgres] extra: only a postgresql:// journal needs it

        failures = 0
        while True:
            with self._cond:
                while not (self._queue or self._held or self._closing or self._spilled_unwritten):
                    if not self._cond.wait(CONNECTION_IDLE):  # nothing came meanwhile
                        self._release_idle_connection()
                window_ends = time.monotonic() + BATCH_WINDOW
                while (
                    self._queue
                    and len(self._queue) < BATCH_ROWS
                    and not (self._urgent or self._closing or self._db_down)
                ):
                    left = window_ends - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                self._urgent = False
                if self._closing and not self._queue:
                    break
                adopted = self._held[0] if self._held and not self._queue else None
                replay_own = bool(not self._queue and adopted is None and self._spilled_unwritten)
                batch = [self._queue[i] for i in range(min(BATCH_ROWS, len(self._queue)))]
            try:
                with self._db_lock:
                    try:
                        self._write_step(self._connection(), adopted, replay_own, batch)
                    except BaseException:
                        self._drop_connection()  # reopened at the next attempt
                        raise
                failures = 0
                if self._db_down:
                    log.warning("execution journal %s reachable again", self.path)
                    self._down_reported = False  # the next outage is reported too
                with self._cond:
                    self._db_down = False
                    self._lock_blocked = False
            except psycopg.errors.LockNotAvailable:
                # The database answers; another connection holds a row these writes change
                # (a frozen node's open transaction, until the database ends it): no outage,
                # so liveness is not judged afresh; the writes stay queued and go next time.
                with self._cond:
                    self._failures += 1
                    self._lock_blocked = True
                    self._cond.notify_all()
                    if self._closing:
                        break
                    self._cond.wait(RETRY_DELAYS[-1])
            except Exception as exc:  # noqa: BLE001 - psycopg's errors, and a file we could not read
                with self._cond:
                    self._db_down = True
                    self._outage_seen = True
                    self._failures += 1
                    urgent = self._waiting > 0
                    self._cond.notify_all()
                if not self._down_reported:
                    self._down_reported = True
                    log.warning(
                        "execution journal %s unreachable (%s); writes are kept and written"
                        " when it answers",
                        self.path,
                        _first_line(exc),
                    )
                delay = RETRY_DELAYS[min(failures, len(RETRY_DELAYS) - 1)]
                delay *= 1.0 - random.random() / 4
                if urgent:
                    delay = min(delay, URGENT_RETRY_DELAY) * random.uniform(0.5, 1.5)
                failures += 1
                with self._cond:
                    if self._closing:
                        break
                    self._cond.wait(delay)

    def _write_step(
        self, db: Any, adopted: tuple[Path, IO[str]] | None, replay_own: bool, batch: list[_Write]
    ) -> None:
        """One step of the writer: an adopted file, our own spill file, or a queued batch."""
        if adopted is not None:
            self._write_file(db, adopted[0])
            adopted[0].unlink()
            adopted[1].close()
            with self._cond:
                self._held.pop(0)
                self._adopted += adopted[0] in self._orphans
                self._cond.notify_all()
        elif replay_own:
            self._replay_own_spill(db)
        else:
            self._write_batch(db, batch)
            with self._cond:
                for _ in batch:
                    self._queue.popleft()
                self._committed += len(batch)
                self._cond.notify_all()

    def _write_batch(self, db: Any, batch: Sequence[_Write]) -> None:
        """One transaction for the batch. A write the database refuses (not a connection
        failure) must not hold up the rest: the batch is then written one by one, and each
        refused write is reported and left out."""
        import psycopg  # the [postgres] extra: only a postgresql:// journal needs it

        try:
            with db.transaction(), db.cursor() as cursor:
                cursor.execute(_IDLE_LIMIT)
                cursor.execute(_WRITE_LOCK_LIMIT)
                index = 0
                while index < len(batch):  # consecutive writes of one statement go together
                    sql = batch[index][0]
                    end = index
                    while end < len(batch) and batch[end][0] == sql:
                        end += 1
                    cursor.executemany(sql, [params for _, params in batch[index:end]])
                    # executemany's pipeline leaves the database's idle timer unarmed (seen on
                    # PostgreSQL 15); a simple statement after it arms it again.
                    cursor.execute(_IDLE_LIMIT)
                    index = end
            return
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise  # the database is unreachable: kept, and tried again
        except psycopg.Error:
            pass
        for sql, params in batch:
            try:
                with db.transaction(), db.cursor() as cursor:
                    cursor.execute(_IDLE_LIMIT)
                    cursor.execute(_WRITE_LOCK_LIMIT)
                    cursor.execute(sql, params)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                raise
            except psycopg.Error as exc:
                self.refused += 1
                log.error(
                    "execution journal %s refused a write, left out (%d so far): %s",
                    self.path,
                    self.refused,
                    _first_line(exc),
                )

    def _write_file(self, db: Any, path: Path) -> None:
        writes: list[_Write] = []
        foreign = 0
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    sql, params = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash
                if sql not in _WRITTEN or not isinstance(params, list):
                    foreign += 1  # not a write of this journal: never run
                    continue
                writes.append((sql, tuple(params)))
        if foreign:
            self.refused += foreign
            log.error(
                "execution journal %s: spill file %s held %d statements this journal never "
                "writes; refused (keep its folder where only the supervisor writes)",
                self.path, path, foreign,
            )  # fmt: skip
        for start in range(0, len(writes), BATCH_ROWS):
            self._write_batch(db, writes[start : start + BATCH_ROWS])

    def _replay_own_spill(self, db: Any) -> None:
        # Rotated out first (still held): writes spilled meanwhile go to a new file, counted
        # afresh; this one is written like an adopted file.
        with self._spill_lock:
            if self._spill is None:
                self._spilled_unwritten = 0
                return
            self._spill.flush()
            self._held.append((self._spill_path, self._spill))
            self._spill = None
            self._spilled_unwritten = 0

    # -- reading --

    def _select(
        self, sql: str, params: Sequence[Any], *, locked_row: str | None = None
    ) -> list[Mapping[str, Any]]:
        """One read or claim (`?` placeholders) on the shared connection; [] when it fails.
        A claim names the session whose row it locks (`locked_row`): it waits at most
        `CLAIM_LOCK_WAIT` for that lock, and [] when it was held longer."""
        import psycopg  # the [postgres] extra: only a postgresql:// journal needs it

        with self._db_lock:
            try:
                db = self._connection()
                values = [_storable(param) for param in params]
                if locked_row is None:
                    with db.cursor() as cursor:
                        cursor.execute(_sql(sql), values)
                        rows = list(cursor.fetchall()) if cursor.description else []
                else:
                    with db.transaction(), db.cursor() as cursor:
                        cursor.execute(_IDLE_LIMIT)
                        cursor.execute(_CLAIM_LOCK_LIMIT)
                        cursor.execute(_sql(sql), values)
                        rows = list(cursor.fetchall()) if cursor.description else []
                self._healthy = True  # a database that was down answers again
                return rows
            except psycopg.errors.LockNotAvailable:
                # The database answered: the row is another connection's (a frozen node's open
                # transaction, until the database ends it, or another client's).
                self._healthy = True
                log.warning(
                    "execution journal %s: session %s's row stayed locked by another connection"
                    " for %gs (a frozen node's open transaction?); not claimed in this pass,"
                    " tried again at the next",
                    self.path, locked_row, CLAIM_LOCK_WAIT,
                )  # fmt: skip
                return []
            except Exception as exc:  # noqa: BLE001 - psycopg's errors: a read never raises
                log.error("execution journal %s: could not read: %s", self.path, _first_line(exc))
                self._healthy = False
                self._outage_seen = True
                self._drop_connection()
                return []

    def _connection(self) -> Any:
        """The shared connection, opened if need be; the caller holds `_db_lock`."""
        self._db_used = time.monotonic()
        if self._db is None:
            self._db = self._connect()
        return self._db

    def _drop_connection(self) -> None:
        """Close the shared connection (failed, idle, or the journal closing); the caller
        holds `_db_lock`."""
        if self._db is not None:
            with contextlib.suppress(Exception):
                self._db.close()
            self._db = None

    def _release_idle_connection(self) -> None:
        """A supervisor writes a heartbeat now and then and reads only at start: a connection
        unused for `CONNECTION_IDLE` is closed, and opened again when next needed."""
        if self._db is None or time.monotonic() - self._db_used < CONNECTION_IDLE:
            return
        if self._db_lock.acquire(blocking=False):
            try:
                if time.monotonic() - self._db_used >= CONNECTION_IDLE:
                    self._drop_connection()
            finally:
                self._db_lock.release()

    def _connect(self) -> Any:
        import psycopg  # the [postgres] extra: only a postgresql:// journal needs it
        from psycopg.rows import dict_row

        db = psycopg.connect(
            self.url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT,
            row_factory=dict_row,
            application_name="otel-lifecycle-hooks",
            # No server-side prepared statements: a pooler in transaction mode (PgBouncer) in
            # front of the database then works as it is.
            prepare_threshold=None,
        )
        if not self._migrated:
            try:
                _migrate(db)
            except Exception:
                db.close()
                raise
            self._migrated = True
        # Autocommit: a read is its own transaction, a write batch opens one (`transaction()`);
        # none is left open between uses, as a pooler in transaction mode requires.
        return db


def _migrate(db: Any) -> None:
    with db.transaction():
        db.execute(_IDLE_LIMIT)  # a process frozen mid-migration holds no one up for long
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        db.execute("CREATE TABLE IF NOT EXISTS journal_schema (version INTEGER NOT NULL)")
        row = db.execute("SELECT max(version) AS version FROM journal_schema").fetchone()
        current = (row["version"] if row else None) or 0
        if current > SCHEMA_VERSION:
            raise RuntimeError(
                f"schema version {current} is newer than this package's {SCHEMA_VERSION}"
            )
        for version, body in statements("postgresql", current):
            for statement in body:
                db.execute(statement)
            db.execute("INSERT INTO journal_schema (version) VALUES (%s)", (version,))


def _storable(value: Any) -> Any:
    # PostgreSQL's text cannot hold NUL, which an agent may well send: U+FFFD instead, in what
    # is written and in what is looked up (so a read finds what was written, never fails).
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value


def _now(at: float | None) -> float:
    return at if at is not None else time.time()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
