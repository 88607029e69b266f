"""What the run watches of every execution: the owed hooks of this session that failed (the
session then stays owed in the journal), and each row journaled (the retention keeper's row
bound holds while a flood writes).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..engine.observers import ExecutionWatcher
from ..template.model import RETRIED_EVENTS

if TYPE_CHECKING:
    from ..engine.model import Execution
    from ..journal.retention import RetentionKeeper


class OwedFailures(ExecutionWatcher):
    """Notes this session's pre-stop and session-end hooks that have a retry horizon and did
    not deliver ("event/hook"); recovered hooks of earlier sessions are not this session's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed: list[str] = []

    def recorded(self, execution: Execution, history_id: int | None) -> None:
        event = execution.event
        if not execution.hook.retry_horizon:
            return
        # Here, not at the top: the journal's modules come after the agent's start (with
        # SQLite about 6 ms, -X importtime).
        from ..journal.rows import FAILED_OUTCOMES

        if (
            event.name in RETRIED_EVENTS
            and not event.recovered
            and execution.outcome in FAILED_OUTCOMES
        ):
            with self._lock:
                self._failed.append(f"{event.name}/{execution.hook.name}")

    def taken(self) -> list[str]:
        """The failed owed hooks so far, as "event/hook"."""
        with self._lock:
            return list(self._failed)


class RowsWritten(ExecutionWatcher):
    """Tells the journal's retention keeper of each execution journaled, so that its row
    bound holds while a flood writes (not only at the hourly pass)."""

    def __init__(self, keeper: RetentionKeeper) -> None:
        self._keeper = keeper

    def recorded(self, execution: Execution, history_id: int | None) -> None:
        # Every execution is journaled; its id may come later (the journal writes behind).
        self._keeper.written()
