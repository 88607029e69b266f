"""The run's phase and the agent's activity, and the firing of each lifecycle event's hooks
with them as context (PHASE, ACTIVITY): legacy hook scripts, phase changes, owed events whose
moment the journal keeps first, and the limits' events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..engine.dispatch import DispatchResult
from ..engine.session import AgentSession
from .legacy import run_legacy_hooks


class Phases:
    """Where the run is (`phase`), what the agent does (`activity`), and `record`, through
    which every event of the session fires its hooks."""

    def __init__(self, environ: Mapping[str, str], user: str | None) -> None:
        self._environ = environ
        self._user = user
        self.phase = "created"
        self.activity = "idle"
        self.dispatching = False  # the main thread is firing hooks
        self.limit_hit: tuple[str, int | None] | None = None
        self.session: AgentSession | None = None  # once the engine is made
        # The moment an owed event begins, journaled before its hooks are sent (journaling.py).
        self.owed_moment: Callable[[str], float] | None = None

    def record(
        self,
        event: str,
        fields: Mapping[str, str] | None = None,
        *,
        deadline: float | None = None,
        timestamp: float | None = None,
    ) -> DispatchResult:
        """Fire `event`'s hooks with the phase, the activity and `fields` as context."""
        assert self.session is not None
        values = {"PHASE": self.phase, "ACTIVITY": self.activity}
        values.update(fields or {})
        self.dispatching = True  # a second stop signal may abandon these hooks
        try:
            return self.session.record(event, values, deadline=deadline, timestamp=timestamp)
        finally:
            self.dispatching = False

    def record_owed(
        self, event: str, fields: Mapping[str, str] | None = None, *, deadline: float | None = None
    ) -> DispatchResult:
        """An event a killed session would still owe (or, for post-start, that makes the rest
        owed): its moment is journaled before any hook is sent, and is its ${TIMESTAMP}, so
        that recovery sends the same X-Scion-Hook-IDs (recovery.py)."""
        assert self.owed_moment is not None
        moment = self.owed_moment(event)
        return self.record(event, fields, deadline=deadline, timestamp=moment)

    def set_phase(self, phase: str) -> None:
        """Move to `phase`, firing phase-change when it is a change."""
        previous, self.phase = self.phase, phase
        if previous != phase:
            self.record("phase-change", {"PREVIOUS_PHASE": previous})

    def set_activity(self, activity: str) -> str:
        """Take the activity an activity-change reported; returns the previous one."""
        previous, self.activity = self.activity, activity
        return previous

    def limit_exceeded(self, name: str, count: int | None, message: str = "") -> None:
        """The first limit hit: activity `limits_exceeded`, then limits-exceeded's hooks.
        `count` is None for a limit the agent reported (`status limits_exceeded`)."""
        if self.limit_hit is not None:
            return
        self.limit_hit = (name, count)
        previous = self.set_activity("limits_exceeded")
        self.record("activity-change", {"PREVIOUS_ACTIVITY": previous})
        fields = {"LIMIT_NAME": name, "LIMIT_COUNT": "" if count is None else str(count)}
        if message:
            fields["MESSAGE"] = message
        self.record("limits-exceeded", fields)

    def legacy(self, event: str, deadline: float | None = None) -> None:
        """The seed's hook scripts for `event` (legacy.py), before the template's hooks."""
        run_legacy_hooks(event, self._environ, deadline=deadline, user=self._user)
