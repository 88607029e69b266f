"""The run's phase and the agent's activity, and the firing of each lifecycle event's hooks
with them as context (PHASE, ACTIVITY): legacy hook scripts, phase changes, owed events whose
moment the journal keeps first, and the limits' events.

The session (its span, the engine, telemetry) is made when first needed: at the first event
that fires a hook, or when the supervisor asks (right after the agent's spawn). The events
before it that fire no hook are held with their moments and recorded on it first, so that
an agent whose template has nothing to do before its start does not wait for the SDK.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from .legacy import discover, run_legacy_hooks

if TYPE_CHECKING:
    from ..engine.dispatch import DispatchResult
    from ..engine.session import AgentSession
    from ..template.model import Template


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class HeldEvent(NamedTuple):
    """An event recorded before the session was made, which fired no hook."""

    event: str
    values: dict[str, str]
    at: float  # unix seconds


class Phases:
    """Where the run is (`phase`), what the agent does (`activity`), and `record`, through
    which every event of the session fires its hooks."""

    def __init__(self, environ: Mapping[str, str], user: str | None, template: Template) -> None:
        self._environ = environ
        self._user = user
        self._template = template
        self.phase = "created"
        self.activity = "idle"
        self.dispatching = False  # the main thread is firing hooks
        self.limit_hit: tuple[str, int | None] | None = None
        self.session: AgentSession | None = None  # once made (`start_session`)
        # Makes the session, with the engine and telemetry: the supervisor's.
        self.make_session: Callable[[], AgentSession] | None = None
        self._held: list[HeldEvent] = []
        # The moment an owed event begins, journaled before its hooks are sent (journaling.py).
        self.owed_moment: Callable[[str], float] | None = None

    def start_session(self) -> AgentSession:
        """The session, made now if it was not: the events held are recorded on it first,
        each at its own moment."""
        if self.session is None:
            assert self.make_session is not None
            session = self.session = self.make_session()
            held, self._held = self._held, []
            for item in held:
                session.record(item.event, item.values, timestamp=item.at, late=True)
        return self.session

    def record(
        self,
        event: str,
        fields: Mapping[str, str] | None = None,
        *,
        deadline: float | None = None,
        timestamp: float | None = None,
    ) -> DispatchResult | None:
        """Fire `event`'s hooks with the phase, the activity and `fields` as context. None when
        the session is not made yet and `event` has no hook: it is held until it is."""
        values = self._context(fields)
        if self.session is None and not self._template.hooks_for(event):
            self._held.append(HeldEvent(event, values, time.time()))
            return None
        return self._fire(event, values, deadline, timestamp)

    def record_owed(
        self, event: str, fields: Mapping[str, str] | None = None, *, deadline: float | None = None
    ) -> DispatchResult:
        """An event a killed session would still owe (or, for post-start, that makes the rest
        owed): its moment is journaled before any hook is sent, and is its ${TIMESTAMP}, so
        that recovery sends the same X-Scion-Hook-IDs (recovery.py)."""
        assert self.owed_moment is not None
        moment = self.owed_moment(event)
        return self._fire(event, self._context(fields), deadline, moment)

    def _context(self, fields: Mapping[str, str] | None) -> dict[str, str]:
        values = {"PHASE": self.phase, "ACTIVITY": self.activity}
        values.update(fields or {})
        return values

    def _fire(
        self, event: str, values: dict[str, str], deadline: float | None, timestamp: float | None
    ) -> DispatchResult:
        session = self.start_session()
        self.dispatching = True  # a second stop signal may abandon these hooks
        try:
            return session.record(event, values, deadline=deadline, timestamp=timestamp)
        finally:
            self.dispatching = False

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
        """The seed's hook scripts for `event` (legacy.py), before the template's hooks. A
        session with scripts to run has its parts made first: what runs before the agent's
        start is shown (`status`) and recorded as it happens."""
        if self.session is None and discover(event, self._environ):
            self.start_session()
        run_legacy_hooks(event, self._environ, deadline=deadline, user=self._user)
