"""The values that flow through the engine: an event, the session it belongs to, and the
record of one hook execution."""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..template.model import HookSpec
from .gates import GateDecision

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

MICROS = 1_000_000  # an event's moment is kept to the microsecond (its ${TIMESTAMP})


def moment_micros(at: float) -> int:
    """`at` (unix seconds) in whole microseconds, as `${TIMESTAMP}` shows it."""
    return round(at * MICROS)


def new_event_id() -> str:
    """A fresh random event id: 128 bits as 32 hex digits."""
    # Not uuid4: its os.urandom syscall costs up to ~0.2 ms on some kernels, per event.
    return f"{random.getrandbits(128):032x}"


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    """One lifecycle or runtime event: its template name and its context variables
    (PHASE, ACTIVITY, TOOL_NAME ... keyed by variable name). Not changed once made.
    Equal events are equal in every field; the hash is the event id's alone."""

    name: str = field(hash=False)
    fields: Mapping[str, str] = field(default_factory=dict, hash=False)
    timestamp: float = field(default=0.0, hash=False)  # unix seconds
    event_id: str = field(default_factory=new_event_id)
    # replayed by crash recovery for an earlier, killed run
    recovered: bool = field(default=False, hash=False)


class SessionInfo:
    """What the engine knows about the agent session an event belongs to."""

    __slots__ = ("_last_moment", "_lock", "captured", "metadata", "session_id", "span_context")

    def __init__(
        self,
        session_id: str,
        metadata: Mapping[str, str] | None = None,  # AGENT_NAME, AGENT_ID, ...
        span_context: SpanContext | None = None,
        captured: dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.metadata: Mapping[str, str] = {} if metadata is None else metadata
        self.span_context = span_context
        # Response capture: HOOK_<NAME>_RESPONSE / _STATUS of earlier hooks of this session.
        self.captured: dict[str, Any] = {} if captured is None else captured
        self._lock = threading.Lock()
        self._last_moment = 0  # microseconds since the epoch: the latest moment given out

    def next_moment(self, at: float) -> float:
        """The moment of a new event of this session taken at `at` (unix seconds): `at` to the
        microsecond, or a microsecond after the latest moment of this session when that is not
        earlier. No two events of a session share one: it is their `${TIMESTAMP}`, and so the
        end of their X-Scion-Hook-ID."""
        micros = moment_micros(at)
        with self._lock:
            if micros <= self._last_moment:
                micros = self._last_moment + 1
            self._last_moment = micros
        return micros / MICROS

    def keep_moment(self, at: float) -> float:
        """A moment fixed before (journaled, or claimed by a recoverer), returned unchanged: the
        events taken after it get later ones."""
        micros = moment_micros(at)
        with self._lock:
            self._last_moment = max(self._last_moment, micros)
        return at

    def __repr__(self) -> str:
        return f"SessionInfo(session_id={self.session_id!r}, metadata={self.metadata!r})"

    def capture(self, values: Mapping[str, Any]) -> None:
        with self._lock:
            self.captured.update(values)

    def captured_snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self.captured)


class Execution(NamedTuple):
    """What one run of one hook did: fed to the span, metrics, hook log and journal."""

    hook: HookSpec
    event: LifecycleEvent
    session_id: str
    outcome: str  # success | failed | timeout | skipped | refused
    attempts: int
    duration: float  # seconds, first attempt start to final result
    started_at: float  # unix seconds
    idempotency_key: str
    status_code: int | None = None
    exit_code: int | None = None
    error_type: str | None = None
    message: str = ""  # redacted
    request: Mapping[str, Any] | None = None  # redacted rendered request, for the journal
    trace_id: str | None = None
    span_id: str | None = None
    agent_id: str | None = None
    replayed_from: int | None = None  # the journal row this execution re-sends
    # One journal AttemptRow per attempt made (redacted, bounded: engine/attempt_log.py).
    attempt_log: tuple[Any, ...] = ()
    # What a gate decided (engine/gates.py GateDecision); None for every other hook.
    decision: GateDecision | None = None
