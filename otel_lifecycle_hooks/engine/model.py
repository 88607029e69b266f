"""The values that flow through the engine: an event, the session it belongs to, and the
record of one hook execution."""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import SpanContext

from ..spec.model import HookSpec


@dataclass(frozen=True)
class LifecycleEvent:
    """One lifecycle or runtime event: its template name and its context variables
    (PHASE, ACTIVITY, TOOL_NAME ... keyed by variable name)."""

    name: str
    fields: Mapping[str, str] = field(default_factory=dict)
    timestamp: float = 0.0  # unix seconds
    # Not uuid4: its os.urandom syscall costs up to ~0.2 ms on some kernels, paid per event.
    event_id: str = field(default_factory=lambda: f"{random.getrandbits(128):032x}")
    recovered: bool = False  # replayed by crash recovery for an earlier, killed run


@dataclass
class SessionInfo:
    """What the engine knows about the agent session an event belongs to."""

    session_id: str
    metadata: Mapping[str, str] = field(default_factory=dict)  # AGENT_NAME, AGENT_ID, ...
    span_context: SpanContext | None = None
    # Response capture: HOOK_<NAME>_RESPONSE / _STATUS of earlier hooks of this session.
    captured: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def capture(self, values: Mapping[str, Any]) -> None:
        with self._lock:
            self.captured.update(values)

    def captured_snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self.captured)


@dataclass(frozen=True)
class Execution:
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
