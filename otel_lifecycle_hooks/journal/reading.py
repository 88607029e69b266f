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
from typing import Any, Protocol

from . import cells
from .rows import (
    FAILED_OUTCOMES,
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
_NTH_NEWEST_ID = "SELECT id FROM executions ORDER BY id DESC LIMIT 1 OFFSET ?"
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
    ) -> list[ExecutionRow]:
        """Executions matching every filter given, newest first (or oldest first); an agent or
        session filter may name several ids (any of them matches)."""
        where, params = execution_filters(
            agent_id=agent_id, session_id=session_id, hook=hook, outcomes=outcomes, since=since,
            event=event, after_id=after_id,
        )  # fmt: skip
        sql = f"SELECT * FROM executions{where} ORDER BY id {'ASC' if oldest_first else 'DESC'}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(_count(limit))
        return [execution_row(row) for row in self._select(sql, params)]

    def delivered_by_replay(self) -> set[int]:
        """Ids of executions that a later replay delivered (a successful row re-sent them)."""
        found = (cells.integer(row["replayed_from"]) for row in self._select(_REPLAYED, ()))
        return {execution_id for execution_id in found if execution_id is not None}

    def newest_id_beyond(self, rows: int) -> int | None:
        """The id of the newest execution that is not among the newest `rows` (None when
        there are no more than `rows`)."""
        found = self._select(_NTH_NEWEST_ID, (_count(rows),))
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
    if outcomes:
        clauses.append(f"outcome IN ({', '.join('?' for _ in outcomes)})")
        params.extend(outcomes)
    if since is not None:
        clauses.append("started_at >= ?")
        params.append(since)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _count(value: int) -> int:
    """A LIMIT or OFFSET both databases take: 0 for a negative one, at most 64 bits."""
    return min(max(value, 0), _LARGEST_ID)
