"""`AgentSession`: the package's API for recording lifecycle events on a session span."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from .. import events as ev
from .dispatch import DispatchResult
from .engine import HookEngine
from .gates import ATTR_DECISION, ATTR_DECISION_REASON, DECISION_EVENT, GateDecision
from .model import LifecycleEvent, SessionInfo
from .processor import LIVE_SESSIONS, LifecycleHookProcessor, seen_event_ids

log = logging.getLogger("otel_lifecycle_hooks.engine")


class InProcessHooks(Protocol):
    """What a session tells the in-process hooks it was given: each event, then the end."""

    def observe(self, event: str, fields: Mapping[str, str]) -> None: ...

    def close(self) -> bool: ...


# Builds a session's in-process hooks from what `in_process_hooks=` holds. The system that
# defines them (systems/inprocess.py, seed 004) registers it: the engine does not import it.
InProcessFactory = Callable[[Any, "AgentSession"], InProcessHooks]
_in_process_factories: list[InProcessFactory] = []


def register_in_process_hooks(factory: InProcessFactory) -> None:
    """Make `factory` build the in-process hooks of every session given some."""
    _in_process_factories[:] = [factory]


class AgentSession:
    """One agent session: the `invoke_agent {name}` span and the events recorded on it.

    `record()` fires the matching hooks directly (so they run even when the span is sampled
    out or the SDK is disabled), adds the `agent.lifecycle.<event>` span event for the
    trace, and emits the same event as a log record (OTEP 4430: `event_name`
    `agent.lifecycle.<event>`, the span event's attributes, in the session span's context)
    through `logger_provider` (the global one by default). It returns after the blocking hooks
    finished; `result.failed` names a blocking `on_error: fail` hook that did not succeed.

    `in_process_hooks` (a `systems.inprocess.LifecycleHookRegistry` or a list of hooks with
    `name` and `on_event`) are told of every event too, each on its own worker (seed 004);
    `end()` gives them a few seconds to catch up before the span ends.
    """

    def __init__(
        self,
        hooks: LifecycleHookProcessor | HookEngine,
        *,
        agent_name: str,
        metadata: Mapping[str, str] | None = None,
        session_id: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        parent: trace.SpanContext | None = None,
        in_process_hooks: Any = None,
        logger_provider: Any = None,
        start_time: int | None = None,  # unix nanoseconds; default now
    ) -> None:
        if isinstance(hooks, LifecycleHookProcessor):
            self._processor: LifecycleHookProcessor | None = hooks
            self.engine = hooks.engine
        else:
            self._processor, self.engine = None, hooks
        self.session_id = session_id or uuid.uuid4().hex
        merged = {"AGENT_NAME": agent_name, "SESSION_ID": self.session_id}
        merged.update(self.engine.template.metadata)
        merged.update({k: v for k, v in (metadata or {}).items() if v})
        merged.setdefault("AGENT_ID", self.session_id)
        self.metadata = merged
        provider = tracer_provider or trace.get_tracer_provider()
        attributes: dict[str, Any] = {
            ev.ATTR_OPERATION_NAME: ev.OPERATION_INVOKE_AGENT,
            ev.ATTR_CONVERSATION_ID: self.session_id,
        }
        for name, attr in ev.METADATA_ATTRIBUTES.items():
            if merged.get(name):
                attributes[attr] = merged[name]
        context = trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent else None
        self.span: Span = provider.get_tracer("otel_lifecycle_hooks").start_span(
            f"invoke_agent {agent_name}",
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=start_time,
        )
        known = self._processor.session_for(self.span) if self._processor else None
        self.info = known or SessionInfo(
            session_id=self.session_id, metadata=merged, span_context=self.span.get_span_context()
        )
        if known is not None:
            known.metadata = merged
        self._span_id = self.span.get_span_context().span_id
        if self._span_id:  # a non-recording span of a no-op provider has none
            LIVE_SESSIONS.add(self._span_id, self.info)
        self._seen = seen_event_ids(self.engine)
        self._logger_provider = logger_provider
        self._event_logger: Any = None
        self._span_in_context: Any = None
        # The event records held back by hold_event_records(): (event, attributes, timestamp).
        self._held_records: list[tuple[str, dict[str, Any], float]] | None = None
        # Seed 004's in-process hooks (a LifecycleHookRegistry or a list of hooks), if any.
        self.in_process: InProcessHooks | None = None
        if in_process_hooks is not None:
            if not _in_process_factories:
                raise TypeError(
                    "in_process_hooks need otel_lifecycle_hooks.systems.inprocess, which "
                    "defines them; import it (or LifecycleHookRegistry from it) first"
                )
            self.in_process = _in_process_factories[0](in_process_hooks, self)

    def _record_decision(self, event: str, decision: GateDecision) -> None:
        """The session span's event for what the gates of `event` decided."""
        attributes: dict[str, Any] = {
            ev.ATTR_EVENT: event,
            ATTR_DECISION: decision.verdict,
            ev.HOOK_ATTR_NAME: decision.gate,
        }
        if decision.reason:
            attributes[ATTR_DECISION_REASON] = decision.reason
        self.span.add_event(DECISION_EVENT, attributes)

    def record(
        self,
        event: str,
        fields: Mapping[str, Any] | None = None,
        *,
        deadline: float | None = None,
        recovered: bool = False,
        timestamp: float | None = None,  # unix seconds; default now
        late: bool = False,
    ) -> DispatchResult:
        """Record `event` (a template or runtime event name) with its context variables.
        `late`: the event happened at `timestamp`, before the session was made (`run` holds
        the events before its agent's spawn that fire no hook), and its span event says so."""
        if event not in ev.ALL_EVENTS:
            raise ValueError(f"unknown lifecycle event {event!r}")
        values = {k: _text(v) for k, v in (fields or {}).items() if v is not None}
        if timestamp is None:
            moment = self.info.next_moment(self.engine.clock.wall())
        elif late:  # a moment of its own, after the session's earlier ones
            moment = self.info.next_moment(timestamp)
        else:  # fixed before: journaled, or claimed by a recoverer
            moment = self.info.keep_moment(timestamp)
        lifecycle_event = LifecycleEvent(
            name=event, fields=values, timestamp=moment, recovered=recovered
        )
        attributes: dict[str, Any] = {
            ev.ATTR_EVENT: event,
            ev.ATTR_EVENT_ID: lifecycle_event.event_id,
        }
        for name, value in self.engine.redact_reported(values).items():  # agent-reported
            attr = ev.EVENT_ATTRIBUTES.get(name)
            if attr is not None:
                attributes[attr] = (
                    int(value) if attr == "process.exit.code" and _is_int(value) else value
                )
        # Fired here, directly: the span-event and log-record routes skip this id.
        self._seen.first_sight(lifecycle_event.event_id)
        self.span.add_event(
            ev.span_event_name(event),
            attributes,
            timestamp=round(lifecycle_event.timestamp * 1e9) if late else None,
        )
        self._emit_event_record(event, attributes, lifecycle_event.timestamp)
        result = self.engine.fire(lifecycle_event, self.info, deadline=deadline)
        if result.gated:
            self._record_decision(event, result.decision)
        if self.in_process is not None:
            self.in_process.observe(event, values)
        return result

    def hold_event_records(self) -> None:
        """Hold the log records of the events recorded from now on until
        `release_event_records()` (or `end()`), each with its own timestamp: `run` records its
        first phases before its agent starts, which need not wait for the Logs API's import
        (about 0.5 ms). Their hooks and span events are not held."""
        if self._held_records is None:
            self._held_records = []

    def release_event_records(self) -> None:
        """Emit the records held back, in order, and the next ones as they are recorded."""
        held, self._held_records = self._held_records, None
        for event, attributes, timestamp in held or ():
            self._emit_event_record(event, attributes, timestamp)

    def _emit_event_record(self, event: str, attributes: dict[str, Any], timestamp: float) -> None:
        """The event as a log record, correlated with the session span; never raises."""
        if self._held_records is not None:
            self._held_records.append((event, attributes, timestamp))
            return
        try:
            # The Logs API, about 0.5 ms (-X importtime): at the first record emitted, once
            # `run`'s agent has started (hold_event_records).
            from ..telemetry.logs_api import LogRecord, SeverityNumber, get_logger_provider

            if self._event_logger is None:
                provider = self._logger_provider or get_logger_provider()
                self._event_logger = provider.get_logger("otel_lifecycle_hooks")
                # The session span's context, for every record: a context is immutable.
                self._span_in_context = trace.set_span_in_context(self.span)
            self._event_logger.emit(
                LogRecord(
                    timestamp=int(timestamp * 1e9),
                    context=self._span_in_context,
                    severity_number=SeverityNumber.INFO,
                    attributes=attributes,
                    event_name=ev.span_event_name(event),
                )
            )
        except Exception:  # telemetry never stops a hook
            log.debug("could not emit the lifecycle event record", exc_info=True)

    def set_attribute(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)

    def end(self) -> None:
        self.release_event_records()
        if self.in_process is not None:
            self.in_process.close()  # their errors still land on the span
        LIVE_SESSIONS.remove(self._span_id)
        self.span.end()

    def __enter__(self) -> AgentSession:  # noqa: PYI034 - not meant to be subclassed
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _is_int(value: str) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True
