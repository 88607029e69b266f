"""Deliveries still being retried, journaled before they end.

An execution is journaled when it ends; one that retries for seconds would be invisible until
then (the `ui` page, `history`). So at its first retry wait it is journaled as `running`,
with the attempts made so far, and at each later wait its new attempts are added; when it
ends, that same row (same id) is rewritten with its outcome and its last attempts. An
execution that succeeds or fails at its first attempt costs nothing here: no retry, no write.

A `running` row whose run was killed stays `running`: readers show it as unfinished, and
crash recovery does not count it as a hook that ran.

An execution the engine's shutdown stopped waiting for is journaled as `interrupted` while it
still runs (engine/dispatch.py; `given_up`); its row is kept here too, so that if it ends after
all, before the journal closes, that row is rewritten with what it did, not joined by a second.
An execution whose own run was interrupted ends like any other (`record`), in the same form.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from .base import Journal
from .rows import (
    RUNNING,
    AttemptRow,
    ExecutionRow,
    attempts_of,
    execution_row_of,
    new_row_uid,
)

log = logging.getLogger("otel_lifecycle_hooks.journal")

# (session id, hook, event, idempotency key): what an execution's retries and its end share.
_Key = tuple[str, str, str, str]


class InFlight:
    """Journals `journal`'s executions in flight; `record` is the executor's journal sink."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._lock = threading.Lock()
        # Per execution in flight: its row's uid and how many of its attempts are journaled.
        self._rows: dict[_Key, tuple[str, int]] = {}
        # The same, for those the shutdown gave up on and journaled while they still run.
        self._given_up: dict[_Key, tuple[str, int]] = {}
        # Held across a running row's write and a given-up record's, which come from two
        # threads (the hook's, the shutdown's): the second finds the first's row to rewrite.
        self._writing = threading.Lock()

    def retrying(
        self,
        hook: Any,
        event: Any,
        session: Any,
        idempotency_key: str,
        attempt_log: Sequence[AttemptRow],
        max_attempts: int,
        delay: float,
    ) -> None:
        """The execution waits `delay` seconds before its next attempt: journal it as running.
        Never raises (a journal that cannot be written never stops a hook)."""
        if not attempt_log:
            return
        with self._writing:
            try:
                key = (session.session_id, hook.name, event.name, idempotency_key)
                with self._lock:
                    if key in self._given_up:
                        return  # its interrupted row stands until it ends
                    uid, written = self._rows.get(key) or (new_row_uid(), 0)
                started_at = attempt_log[0].started_at
                following = len(attempt_log) + 1
                row = ExecutionRow(
                    row_uid=uid,
                    hook=hook.name,
                    event=event.name,
                    outcome=RUNNING,
                    started_at=started_at,
                    attempts=len(attempt_log),
                    duration_ms=max(0.0, time.time() - started_at) * 1000.0,
                    session_id=session.session_id,
                    agent_id=session.metadata.get("AGENT_ID") or "",
                    # Built here from numbers only: no endpoint's or agent's text.
                    message=f"attempt {following} of {max_attempts} in {delay:g}s",
                    idempotency_key=idempotency_key,
                    recovered=bool(getattr(event, "recovered", False)),
                )
                new_attempts = tuple(attempt_log[written:])
                if written == 0:
                    self._journal.record_execution(row, new_attempts)
                else:
                    self._journal.update_execution(row, new_attempts)
                # Only once written: an execution whose row never made it is journaled anew at
                # its end.
                with self._lock:
                    self._rows[key] = (uid, len(attempt_log))
            except Exception:
                log.exception("journaling hook %s in flight failed", getattr(hook, "name", hook))

    def record(self, execution: Any) -> int | None:
        """Journal an execution that ended: its in-flight row rewritten, or a new row."""
        return self._record(execution, given_up=False)

    def given_up(self, execution: Any) -> int | None:
        """Journal an execution the shutdown stopped waiting for, as interrupted, while it
        still runs: its in-flight row rewritten, or a new row, kept for its own end."""
        with self._writing:
            return self._record(execution, given_up=True)

    def _record(self, execution: Any, given_up: bool) -> int | None:
        found = None
        if self._rows or self._given_up:  # the common case, nothing in flight, is one check
            key = _key_of(execution)
            with self._lock:
                found = self._rows.pop(key, None) or self._given_up.pop(key, None)
        if found is None and not given_up:
            return self._journal.record(execution)
        uid, written = found or (new_row_uid(), 0)
        row = execution_row_of(execution)._replace(row_uid=uid)
        attempts = attempts_of(execution)[written:]
        if given_up:
            # The shutdown's record knows of no attempt; the row it rewrites knows how many.
            row = row._replace(attempts=max(row.attempts, written))
            # Journaled while it still runs: its own end may come yet, and then rewrites this
            # row. Kept before the write, which that end follows.
            with self._lock:
                self._given_up[_key_of(execution)] = (uid, written + len(attempts))
        if found is None:
            return self._journal.record_execution(row, attempts)
        return self._journal.update_execution(row, attempts)


def _key_of(execution: Any) -> _Key:
    return (
        execution.session_id,
        execution.hook.name,
        execution.event.name,
        execution.idempotency_key,
    )
