"""What every journal answers: the `Journal` protocol both backends implement.

`open_journal` returns a `Journal`, whichever backend the URL names (`sqlite.py`, the embedded
file; `postgres.py`, a database a fleet shares). Callers use these methods only and never ask
which backend they hold: where a backend has nothing to do for a call (SQLite keeps no writes
queued on the machine, so its `backlog` is "" and its `flush` only commits), its method says
so in its docstring.

Every method never raises for a journal that cannot be read or written: a read answers empty
and `healthy` turns False; a write is counted in `stats()` (the journal is a record, not a
dependency: hooks run whether or not it can be written).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from .liveness import LivenessClock
from .reading import HookSummary
from .retention import Retention
from .rows import AttemptRow, ExecutionLike, ExecutionRow, SessionCounts, SessionRow

__all__ = ["Journal"]


class Journal(Protocol):
    """An execution journal: hook executions with their attempts, supervised sessions, and
    what crash recovery and a reconciler need of them. Thread-safe; never raises."""

    @property
    def path(self) -> str | Path:
        """Where it is, as messages name it: the SQLite file, or the database's URL without
        its password."""
        ...

    @property
    def healthy(self) -> bool:
        """False while the journal cannot be read or written (the last call failed)."""
        ...

    # -- writing executions --

    def record_execution(
        self, row: ExecutionRow, attempts: Sequence[AttemptRow] = ()
    ) -> int | None:
        """Append `row` and its `attempts`; its id when the backend knows it at once."""
        ...

    def record(self, execution: ExecutionLike) -> int | None:
        """Append the engine's execution record with its attempts (the executor's sink)."""
        ...

    def update_execution(
        self, row: ExecutionRow, attempts: Sequence[AttemptRow] = ()
    ) -> int | None:
        """Rewrite the in-flight execution journaled under `row.row_uid` and add `attempts`."""
        ...

    # -- reading executions --

    def get(self, execution_id: int) -> ExecutionRow | None:
        """The execution with this id, if any."""
        ...

    def attempts(self, execution_uid: str | None) -> list[AttemptRow]:
        """The attempts of the execution whose row_uid this is, in order."""
        ...

    def recent(self, hook_name: str | None = None, limit: int = 20) -> list[ExecutionRow]:
        """The latest executions, newest first; of one hook if `hook_name` is given."""
        ...

    def failed(self, since: float | None = None) -> list[ExecutionRow]:
        """Executions that did not deliver (started at or after `since`), oldest first."""
        ...

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
        """Executions matching every filter given, newest first (or oldest first)."""
        ...

    def hook_summary(
        self,
        hook: str,
        *,
        window: int = 1000,
        since: float | None = None,
        after_id: int | None = None,
    ) -> HookSummary:
        """How the hook's newest `window` executions went (counts, duration percentiles)."""
        ...

    def delivered_by_replay(self) -> set[int]:
        """Ids of executions that a later replay delivered."""
        ...

    def newest_id_beyond(self, rows: int) -> int | None:
        """The id of the newest execution not among the newest `rows` (None if none is)."""
        ...

    def session_counts(self, session_ids: Sequence[str]) -> dict[str, SessionCounts]:
        """Per session id that has executions: its deliveries, failures and latest start."""
        ...

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
        ...

    def begin_event(
        self,
        session_id: str,
        event: str,
        timestamp: float,
        seal: str | None = None,
        *,
        wait: float | None = None,
    ) -> bool:
        """An owed event begins at `timestamp`: journaled before any of its hooks is sent.
        False when the moment could not be kept (the caller then derives it)."""
        ...

    def mark_agent(self, session_id: str, pid: int, started_at: float | None) -> None:
        """The agent process of the session: its pid and start time."""
        ...

    def heartbeat(self, session_id: str, at: float | None = None) -> None:
        """The session's supervisor is alive (at `at`, or on the journal's clock)."""
        ...

    def liveness_clock(self) -> LivenessClock | None:
        """What a heartbeat's age is measured against; None when it cannot be read."""
        ...

    def mark_post_start(self, session_id: str, at: float | None = None) -> None:
        """The session's post-start hooks finished."""
        ...

    def close_session(
        self, session_id: str, exit_code: int | None, at: float | None = None
    ) -> None:
        """The session ended (its session-end hooks were fired)."""
        ...

    def mark_recovered(self, session_id: str, at: float | None = None) -> None:
        """Crash recovery fired this session's owed hooks: never recover it again."""
        ...

    def unfinished_sessions(self, agent_id: str | None = None) -> list[SessionRow]:
        """Sessions that began post-start, never ended and were not recovered, oldest first."""
        ...

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
        """Take an unfinished session for recovery: its row if this caller won it."""
        ...

    def release_claim(self, session_id: str, claimer: str, at: float | None = None) -> None:
        """Give back `claimer`'s claim: the next pass may claim the session at once."""
        ...

    def session(self, session_id: str) -> SessionRow | None:
        """One session by id."""
        ...

    def sessions(self, agent_id: str | None = None, limit: int = 100) -> list[SessionRow]:
        """The latest sessions (of one agent), newest first."""
        ...

    # -- upkeep --

    def apply_retention(
        self,
        retention: Retention,
        now: float | None = None,
        chunk: int | None = None,
        stopped: Callable[[], bool] | None = None,
    ) -> int:
        """Delete what `retention` no longer keeps, a chunk per transaction; how many
        executions went."""
        ...

    def stats(self) -> dict[str, int]:
        """Running counts of what did not go as written since open (`failures`, ...)."""
        ...

    def backlog(self) -> str:
        """A line saying writes wait on this machine, not in the journal yet; "" when none."""
        ...

    def flush(self, timeout: float = 5.0) -> bool:
        """Commit every write made so far; False if `timeout` passed first."""
        ...

    def close(self) -> None:
        """Write what is waiting and close; later calls are no-ops."""
        ...
