"""This session in the journal, and the runs of the same agent before it: crash recovery of
their owed hooks, this session's row (sealed with the journal key), the moments of its owed
events (owed_moments.py), its heartbeat, the journal's retention, and the run's summary of
what the journal lost.

All of it happens once the agent has started (none of it decides whether it may), or before
the first journal call of a session that ends before its agent starts. The journal is a
record, not a dependency: a failing journal call is logged and the run goes on.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..engine.engine import HookEngine
from ..engine.session import AgentSession
from ..journal.placement import replaceable_by
from ..journal.retention import RetentionKeeper, apply_every_rows, retention_from
from ..template.model import Template
from .agent_tree import agent_user_ids
from .deferred import DeferredJournal
from .owed_moments import OwedMoments, journal_call, journal_losses, read_journal_key
from .recovery import (
    Heartbeat,
    heartbeat_interval,
    process_start_time,
    recover_orphaned_sessions,
    session_fields,
    session_lock_dir,
)
from .watchers import OwedFailures, RowsWritten

if TYPE_CHECKING:
    from .owed_moments import JournalLike

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

T = TypeVar("T")


class SessionJournal:
    """The session's rows in the journal (none when the run keeps no journal) and the
    recovery of the agent's earlier runs."""

    def __init__(
        self,
        journal: JournalLike | None,
        engine: HookEngine,
        session: AgentSession,
        template: Template,
        environ: Mapping[str, str],
        metadata: Mapping[str, str],
        grace_period: float,
        user: str | None,
        owed_failures: OwedFailures,
    ) -> None:
        self._journal = journal
        self._engine = engine
        self._session = session
        self._template = template
        self._environ = environ
        self._metadata = metadata
        self._grace_period = grace_period
        self._user = user
        self._owed_failures = owed_failures
        self._moments = OwedMoments(journal, session, environ)
        self._opened = False  # recovery, the session row, heartbeat and retention
        self._heartbeat: Heartbeat | None = None
        self._retention: RetentionKeeper | None = None
        self._recovery_failed = 0  # owed hooks of earlier runs that failed when recovered
        self._close_at_exit: int | None = None  # the exit code, once close waits for the drain

    # -- the start --

    def open(self) -> None:
        """Crash recovery of earlier runs, this session's row, its heartbeat and the journal's
        retention: once."""
        if self._opened:
            return
        self._opened = True
        key = read_journal_key(self._environ)
        self._check_placement(sealed=key is not None)
        self._recover_earlier_runs(key)
        row = self._session_row()
        self._moments.seal_row(key, row)
        self._call("open_session", lambda journal: journal.open_session(**row))
        if self._journal is not None:
            self._heartbeat = Heartbeat(
                self._journal,
                self._session.session_id,
                heartbeat_interval(self._environ),
                session_lock_dir(self._environ),
            )
        self._keep_retention()

    def mark_agent(self, pid: int) -> None:
        """The agent's pid and start time: what tells a later run whether it still lives."""
        session_id, started = self._session.session_id, process_start_time(pid)
        self._call("mark_agent", lambda journal: journal.mark_agent(session_id, pid, started))

    def mark_post_start(self) -> None:
        """post-start's hooks are done: the session's later events are owed from now."""
        session_id = self._session.session_id
        self._call("mark_post_start", lambda journal: journal.mark_post_start(session_id))

    def owed_moment(self, event: str) -> float:
        """The moment owed `event` begins, journaled before any of its hooks is sent."""
        moment = self._session.info.next_moment(self._engine.clock.wall())
        if self._journal is not None and not self._opened:
            try:  # the row and its seal first: the moment's seal extends them
                self.open()
            except Exception:
                log.exception("journaling the session failed")
        return self._moments.begin(event, moment)

    def _call(self, method: str, call: Callable[[JournalLike], T]) -> T | None:
        """`call(journal)` (the journal's `method`) once the session's row is written."""
        if self._journal is not None and not self._opened:  # the row comes first
            try:
                self.open()
            except Exception:  # a session ending before its agent started: its end goes on
                log.exception("journaling the session failed")
        return journal_call(self._journal, method, call)

    def _session_row(self) -> dict[str, Any]:
        return {
            "session_id": self._session.session_id,
            "agent_id": self._metadata["AGENT_ID"],
            "agent_name": self._metadata["AGENT_NAME"],
            "template_files": [os.path.abspath(f) for f in self._template.files],
            "pid": os.getpid(),
            "started_at": time.time(),
            **session_fields(self._template, self._environ, self._session.metadata),
        }

    def _check_placement(self, *, sealed: bool) -> None:
        """Warn when the agent's user can replace the SQLite journal (journal/placement.py):
        then every row is the agent's, and only sealed ones are worth recovering."""
        owner = agent_user_ids(self._user)
        path = self._journal.path if self._journal is not None else None
        if owner is None or not isinstance(path, os.PathLike):
            return
        through = replaceable_by(Path(path), *owner)
        if through is not None:
            log.warning(
                "the journal %s can be replaced by the agent's user %s (through %s): keep it "
                "in a directory only the supervisor writes%s",
                path, self._user, through,
                "" if sealed else ", and set LIFECYCLE_HOOKS_JOURNAL_KEY so that "
                "recovery acts only on sealed rows",
            )  # fmt: skip

    def _recover_earlier_runs(self, key: bytes | None) -> None:
        """Fire the owed hooks of earlier runs of this agent that were killed (recovery.py)."""
        # Each owed event of a recovered session gets the grace period of its own, as a live
        # session's would: a slow pre-stop never starves its session-end.
        failures: list[str] = []
        recover_orphaned_sessions(
            self._journal,
            self._metadata["AGENT_ID"],
            self._metadata,
            self._engine.executor.run,
            self._template,
            key=key,
            budget=self._grace_period,
            lock_dir=session_lock_dir(self._environ),
            failures=failures,
        )
        self._recovery_failed += len(failures)

    def _keep_retention(self) -> None:
        """Old journal rows go at start, hourly, and every so many executions written, on a
        thread of their own (retention.py)."""
        if self._journal is not None:
            self._retention = RetentionKeeper(
                self._journal,
                retention_from(self._environ),
                every_rows=apply_every_rows(self._environ),
            )
            self._engine.recorders.watch(RowsWritten(self._retention))

    # -- the end --

    def end(self, exit_code: int) -> None:
        """session-end's hooks were sent: close the session now, or, when a hook may retry
        past the run (a retry horizon), once the engine drained (`close`)."""
        if any(hook.retry_horizon for hook in self._template.hooks):
            # Closed once its owed hooks finished (non-blocking ones drain at exit): one with
            # a retry horizon that failed leaves the session owed, for the next run or
            # `reconcile` to send again with the same id.
            self._close_at_exit = exit_code
        else:
            session_id = self._session.session_id
            self._call(
                "close_session", lambda journal: journal.close_session(session_id, exit_code)
            )
        self.stop_heartbeat()

    def stop_heartbeat(self) -> None:
        """No more heartbeats: the session is ending."""
        if self._heartbeat is not None:
            self._heartbeat.stop()

    def stop_retention(self) -> None:
        """No more retention passes: the run is ending."""
        if self._retention is not None:
            self._retention.stop()

    def close(self) -> None:
        """Once the engine drained: close the session unless an owed hook is still owed,
        report what the journal lost, and close a journal this run opened."""
        if self._close_at_exit is not None:
            self._close_or_keep_owed(self._close_at_exit)
        self._report_losses()
        if isinstance(self._journal, DeferredJournal):
            self._journal.close()  # the engine's recorders close only what they opened

    def _close_or_keep_owed(self, exit_code: int) -> None:
        """Close the session, unless an owed hook with a retry horizon failed: then it stays
        unfinished in the journal, and the next run or `reconcile` sends what did not
        deliver (only that), with the same X-Scion-Hook-IDs, until its horizon."""
        session_id = self._session.session_id
        failed = self._owed_failures.taken()
        if not failed:
            self._call(
                "close_session", lambda journal: journal.close_session(session_id, exit_code)
            )
            return
        log.warning(
            "session %s: %s failed; it stays owed in the journal and is retried by the next run"
            " or `reconcile` until its retry horizon",
            session_id, ", ".join(failed),
        )  # fmt: skip

    def losses(self) -> dict[str, int]:
        """The journal's loss counts (none until it is opened) and the owed hooks of earlier
        runs that failed in recovery: what `agent.lifecycle.journal.losses` reports."""
        return journal_losses(self._journal, self._recovery_failed)

    def _report_losses(self) -> None:
        """One line in the run's summary when the journal lost, spilled or could not confirm
        writes (what the metric counts), and each registration sent before it was durable."""
        for note in self._moments.durability_notes:
            log.warning("journal: %s", note)
        try:
            counts = self.losses()
        except Exception:  # the journal reports its own failures
            log.debug("reading the journal's loss counts failed", exc_info=True)
            return
        shown = {k: v for k, v in counts.items() if v and k not in ("adopted", "pending")}
        if shown:
            log.warning(
                "journal losses this run: %s",
                ", ".join(f"{kind} {count}" for kind, count in sorted(shown.items())),
            )
