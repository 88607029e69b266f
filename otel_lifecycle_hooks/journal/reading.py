"""The journal's read side, written once for SQLite and PostgreSQL.

`JournalReader` holds every query a reader makes (`history`, `replay`, the `ui` page, crash
recovery, a reconciler) and turns its rows into `rows.py`'s types. A backend supplies one
method, `_select`: run one read written with `?` placeholders (the PostgreSQL journal turns them
into `%s`) and give its rows by column name, or no rows when the journal cannot be read (its
`healthy` then says so). Connections, write batching, spilling and claims stay each backend's.

Where the two databases' own rules differ, the values are brought within what both accept
before they reach the SQL, so that both answer alike: a negative limit or offset is 0 (SQLite
would read "no limit", PostgreSQL refuse), and an id past 64 bits matches nothing (SQLite's
driver would raise).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from . import cells
from .rows import (
    EARLIER_INTERRUPTED_OUTCOMES,
    FAILED_OUTCOMES,
    INTERRUPTED,
    UNFINISHED,
    AttemptRow,
    ExecutionRow,
    SessionCounts,
    SessionRow,
    attempt_row,
    execution_row,
    session_row,
)

# The range of both databases' integers (SQLite's INTEGER, PostgreSQL's BIGINT).
_SMALLEST_ID = -(2**63)
_LARGEST_ID = 2**63 - 1

_EXECUTION = "SELECT * FROM executions WHERE id = ?"
_ATTEMPTS = "SELECT * FROM attempts WHERE execution_uid = ? ORDER BY attempt"
# The newest execution beyond the newest `?` (retention.py cuts its row bound at it too).
NEWEST_ID_BEYOND = "SELECT id FROM executions ORDER BY id DESC LIMIT 1 OFFSET ?"
_REPLAYED = (
    "SELECT DISTINCT replayed_from FROM executions"
    " WHERE replayed_from IS NOT NULL AND outcome = 'success'"
)
# Per session: how many executions, and how many of them failed (FAILED_OUTCOMES).
_SESSION_COUNTS = (
    "SELECT session_id, count(*) AS deliveries,"
    " sum(CASE WHEN outcome IN ({failed}) THEN 1 ELSE 0 END) AS failed,"
    " max(started_at) AS last_at FROM executions WHERE session_id IN ({sessions})"
    " GROUP BY session_id"
)
_SESSION = "SELECT * FROM sessions WHERE session_id = ?"
# Sessions that start at the same moment come in the order of their ids: the two databases
# would otherwise each keep an order of their own.
_SESSIONS = "SELECT * FROM sessions{where} ORDER BY started_at DESC, session_id DESC LIMIT ?"
_UNFINISHED_SESSIONS = (
    "SELECT * FROM sessions WHERE {unfinished}{agent} ORDER BY started_at, session_id"
)


# One hook's newest executions (a bounded window), their outcomes and the nearest-rank
# percentiles of their durations: the smallest duration whose rank reaches p of the count.
_HOOK_SUMMARY = (
    "WITH w AS (SELECT duration_ms, outcome FROM executions{where} ORDER BY id DESC LIMIT ?),"
    " r AS (SELECT duration_ms, outcome, ROW_NUMBER() OVER (ORDER BY duration_ms) AS n,"
    " COUNT(*) OVER () AS total FROM w)"
    " SELECT max(total) AS total,"
    " sum(CASE WHEN outcome = 'success' THEN 1 ELSE 0 END) AS succeeded,"
    " sum(CASE WHEN outcome IN ({failed}) THEN 1 ELSE 0 END) AS failed,"
    " min(CASE WHEN n >= 0.50 * total THEN duration_ms END) AS p50,"
    " min(CASE WHEN n >= 0.95 * total THEN duration_ms END) AS p95,"
    " min(CASE WHEN n >= 0.99 * total THEN duration_ms END) AS p99 FROM r"
).replace("{failed}", ", ".join(f"'{outcome}'" for outcome in FAILED_OUTCOMES))


@dataclass(frozen=True, slots=True)
class HookSummary:
    """One hook's recent executions in figures: `total` in the window, how many `succeeded`
    and `failed`, and the 50th, 95th and 99th percentiles of their durations (None when the
    window is empty)."""

    hook: str
    total: int
    succeeded: int
    failed: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None


class Row(Protocol):
    """A database row read by column name (sqlite3.Row, or psycopg's dict row)."""

    def __getitem__(self, column: str, /) -> Any: ...


class JournalReader(ABC):
    """Every read both journals answer, over the one query method each supplies (`_select`).
    Never raises: a journal that cannot be read answers empty."""

    @abstractmethod
    def _select(self, sql: str, params: Sequence[Any]) -> Sequence[Row]:
        """The rows of one read (`?` placeholders), or none when it could not be made."""

    # -- executions --

    def get(self, execution_id: int) -> ExecutionRow | None:
        """The execution with this id, if any."""
        if not _SMALLEST_ID <= execution_id <= _LARGEST_ID:
            return None
        rows = self._select(_EXECUTION, (execution_id,))
        return execution_row(rows[0]) if rows else None

    def attempts(self, execution_uid: str | None) -> list[AttemptRow]:
        """The attempts of the execution whose row_uid this is, in order."""
        if not execution_uid:
            return []
        return [attempt_row(row) for row in self._select(_ATTEMPTS, (execution_uid,))]

    def recent(self, hook_name: str | None = None, limit: int = 20) -> list[ExecutionRow]:
        """The latest executions, newest first; of one hook if `hook_name` is given."""
        return self.executions(hook=hook_name, limit=limit)

    def failed(self, since: float | None = None) -> list[ExecutionRow]:
        """Executions that did not deliver (`FAILED_OUTCOMES`), started at or after `since`,
        oldest first."""
        return self.executions(outcomes=FAILED_OUTCOMES, since=since, oldest_first=True)

    def executions(
        self,
        *,
        agent_id: str | Sequence[str] | None = None,
        session_id: str | Sequence[str] | None = None,
        hook: str | None = None,
        outcomes: tuple[str, ...] | None = None,
        since: float | None = None,
        limit: int | None = None,
        oldest_first: bool = False,
        event: str | None = None,
        after_id: int | None = None,
        before_id: int | None = None,
        until: float | None = None,
        agent: str | None = None,
        search: str | None = None,
    ) -> list[ExecutionRow]:
        """Executions matching every filter given, newest first (or oldest first); an agent or
        session filter may name several ids (any of them matches). `before_id` / `after_id`
        are keyset cursors (ids below / above); `agent` is an agent id or name; `search` a
        delivery id, session id or idempotency key."""
        where, params = execution_filters(
            agent_id=agent_id, session_id=session_id, hook=hook, outcomes=outcomes, since=since,
            event=event, after_id=after_id, before_id=before_id, until=until, agent=agent,
            search=search,
        )  # fmt: skip
        sql = f"SELECT * FROM executions{where} ORDER BY id {'ASC' if oldest_first else 'DESC'}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(_count(limit))
        return [execution_row(row) for row in self._select(sql, params)]

    def hook_summary(
        self,
        hook: str,
        *,
        window: int = 1000,
        since: float | None = None,
        after_id: int | None = None,
    ) -> HookSummary:
        """How `hook`'s newest `window` executions (started at or after `since`, with ids
        above `after_id`) went: how many, how many succeeded, and their duration percentiles,
        computed by the database over that bounded window."""
        where, params = execution_filters(hook=hook, since=since, after_id=after_id)
        rows = self._select(_HOOK_SUMMARY.format(where=where), (*params, _count(window)))
        row = rows[0] if rows else None
        total = int(row["total"] or 0) if row is not None else 0
        if row is None or total == 0:
            return HookSummary(hook, 0, 0, 0, None, None, None)
        return HookSummary(
            hook=hook,
            total=total,
            succeeded=int(row["succeeded"] or 0),
            failed=int(row["failed"] or 0),
            p50_ms=cells.number(row["p50"]),
            p95_ms=cells.number(row["p95"]),
            p99_ms=cells.number(row["p99"]),
        )

    def delivered_by_replay(self) -> set[int]:
        """Ids of executions that a later replay delivered (a successful row re-sent them)."""
        found = (cells.integer(row["replayed_from"]) for row in self._select(_REPLAYED, ()))
        return {execution_id for execution_id in found if execution_id is not None}

    def newest_id_beyond(self, rows: int) -> int | None:
        """The id of the newest execution that is not among the newest `rows` (None when
        there are no more than `rows`)."""
        found = self._select(NEWEST_ID_BEYOND, (_count(rows),))
        return cells.integer(found[0]["id"]) if found else None

    def session_counts(self, session_ids: Sequence[str]) -> dict[str, SessionCounts]:
        """Per session id that has executions: its `deliveries`, how many `failed`, and
        `last_at` (its latest execution's start)."""
        if not session_ids:
            return {}
        sql = _SESSION_COUNTS.format(
            failed=", ".join("?" for _ in FAILED_OUTCOMES),
            sessions=", ".join("?" for _ in session_ids),
        )
        return {
            row["session_id"]: SessionCounts(
                deliveries=int(row["deliveries"]),
                failed=int(row["failed"] or 0),
                last_at=row["last_at"],
            )
            for row in self._select(sql, (*FAILED_OUTCOMES, *session_ids))
        }

    # -- sessions --

    def session(self, session_id: str) -> SessionRow | None:
        """One session by id."""
        rows = self._select(_SESSION, (session_id,))
        return session_row(rows[0]) if rows else None

    def sessions(self, agent_id: str | None = None, limit: int = 100) -> list[SessionRow]:
        """The latest sessions (of one agent), newest first."""
        if agent_id is None:
            rows = self._select(_SESSIONS.format(where=""), (_count(limit),))
        else:
            sql = _SESSIONS.format(where=" WHERE agent_id = ?")
            rows = self._select(sql, (agent_id, _count(limit)))
        return [session_row(row) for row in rows]

    def unfinished_sessions(self, agent_id: str | None = None) -> list[SessionRow]:
        """Sessions (of `agent_id`, or of every agent) that began post-start, never ended,
        and were not recovered, oldest first."""
        agent = "" if agent_id is None else " AND agent_id = ?"
        sql = _UNFINISHED_SESSIONS.format(unfinished=UNFINISHED, agent=agent)
        params = () if agent_id is None else (agent_id,)
        return [session_row(row) for row in self._select(sql, params)]


def execution_filters(
    *,
    agent_id: str | Sequence[str] | None = None,
    session_id: str | Sequence[str] | None = None,
    hook: str | None = None,
    outcomes: tuple[str, ...] | None = None,
    since: float | None = None,
    event: str | None = None,
    after_id: int | None = None,
    before_id: int | None = None,
    until: float | None = None,
    agent: str | None = None,
    search: str | None = None,
) -> tuple[str, list[Any]]:
    """A WHERE clause (or '') and its parameters for the executions' filters; an agent or
    session filter may name several ids (any of them matches)."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("agent_id", agent_id), ("session_id", session_id), ("hook", hook), ("event", event),
    ):  # fmt: skip
        if isinstance(value, str):
            clauses.append(f"{column} = ?")
            params.append(value)
        elif value is not None:
            clauses.append(f"{column} IN ({', '.join('?' for _ in value)})" if value else "1 = 0")
            params.extend(value)
    if after_id is not None:
        clauses.append("id > ?")
        params.append(min(max(after_id, _SMALLEST_ID), _LARGEST_ID))
    if before_id is not None:
        clauses.append("id < ?")
        params.append(min(max(before_id, _SMALLEST_ID), _LARGEST_ID))
    if agent is not None:
        # An agent id, or the name its sessions give it (what the page and `history` show).
        clauses.append(
            "(agent_id = ? OR agent_id IN (SELECT agent_id FROM sessions WHERE agent_name = ?))"
        )
        params.extend((agent, agent))
    if search is not None:
        # Each lookup through its own index (the id's, the session's, the key's), never a
        # scan: an OR over the three columns would read the table on either database.
        found = [
            "SELECT id FROM executions WHERE session_id = ?",
            "SELECT id FROM executions WHERE idempotency_key = ?",
        ]
        params.extend((search, search))
        if search.isdigit() and int(search) <= _LARGEST_ID:
            found.append("SELECT id FROM executions WHERE id = ?")
            params.append(int(search))
        clauses.append(f"id IN ({' UNION '.join(found)})")
    if outcomes:
        clause, values = _outcomes_filter(outcomes)
        clauses.append(clause)
        params.extend(values)
    if since is not None:
        clauses.append("started_at >= ?")
        params.append(since)
    if until is not None:
        clauses.append("started_at < ?")
        params.append(until)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _outcomes_filter(outcomes: Sequence[str]) -> tuple[str, list[str]]:
    """A clause and its parameters for the rows that read as one of `outcomes`
    (`rows.read_outcome`): an interrupted delivery an earlier release journaled as failed or
    timed out is found as `interrupted`, not as what it was written as."""
    listed = f"outcome IN ({', '.join('?' for _ in outcomes)})"
    if INTERRUPTED in outcomes:
        also = [outcome for outcome in EARLIER_INTERRUPTED_OUTCOMES if outcome not in outcomes]
        if not also:  # `failures`: every form is among the outcomes listed
            return listed, list(outcomes)
        # A union of index lookups, as `search`'s: an OR, or an IN that also took every
        # failed row, has SQLite scan the whole table for a page.
        found = [f"SELECT id FROM executions WHERE {listed}"] + [
            f"SELECT id FROM executions WHERE outcome = '{outcome}'"
            f" AND error_type = '{INTERRUPTED}'"
            for outcome in also
        ]
        return f"id IN ({' UNION '.join(found)})", list(outcomes)
    earlier = [outcome for outcome in EARLIER_INTERRUPTED_OUTCOMES if outcome in outcomes]
    if earlier:
        # A test of each row the outcome's index gives: a page reads no more than it shows.
        written_as = ", ".join(f"'{outcome}'" for outcome in earlier)
        return (
            f"{listed} AND NOT (outcome IN ({written_as})"
            f" AND COALESCE(error_type, '') = '{INTERRUPTED}')",
            list(outcomes),
        )
    return listed, list(outcomes)


def _count(value: int) -> int:
    """A LIMIT or OFFSET both databases take: 0 for a negative one, at most 64 bits."""
    return min(max(value, 0), _LARGEST_ID)
