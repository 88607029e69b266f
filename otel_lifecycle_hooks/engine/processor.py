"""`LifecycleHookProcessor`: the OpenTelemetry SpanProcessor that turns lifecycle span events
on an agent's session span into hook executions.

The SDK has no callback for span events, so for session spans only the processor wraps that
one span's `_add_event` (a private method: its presence is checked, and where it is missing the
events are read when the span ends). A session span is the GenAI conventions' `invoke_agent` span:
named `invoke_agent` or `invoke_agent {agent name}`, with `gen_ai.operation.name: invoke_agent`.
A span that is not one costs a test of its name's first characters.
Events recorded through `AgentSession.record` are dispatched directly, so that hooks run even
when the session is sampled out or the SDK is disabled; they carry `agent.lifecycle.event_id`,
and the observer skips ids it has already dispatched, so each event fires each hook once.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from .. import events as ev
from .engine import HookEngine
from .model import LifecycleEvent, SessionInfo, new_event_id

log = logging.getLogger("otel_lifecycle_hooks.engine")

_FIELD_BY_ATTRIBUTE = {attr: name for name, attr in ev.EVENT_ATTRIBUTES.items()}
_METADATA_BY_ATTRIBUTE = {attr: name for name, attr in ev.METADATA_ATTRIBUTES.items()}


class SeenEventIds:
    """A bounded set of the event ids an engine has dispatched: whichever route sees an event
    first (`AgentSession.record`, a span event, a log record) fires it; the others skip it."""

    def __init__(self, limit: int = 4096) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def first_sight(self, event_id: str) -> bool:
        """True the first time `event_id` is offered (it is remembered), False after that."""
        with self._lock:
            if event_id in self._ids:
                return False
            self._ids[event_id] = None
            while len(self._ids) > self._limit:
                self._ids.popitem(last=False)
            return True


_SEEN_BY_ENGINE: weakref.WeakKeyDictionary[HookEngine, SeenEventIds] = weakref.WeakKeyDictionary()
_SEEN_LOCK = threading.Lock()


def seen_event_ids(engine: HookEngine) -> SeenEventIds:
    """The event ids `engine` has dispatched, shared by every processor built on it."""
    with _SEEN_LOCK:
        seen = _SEEN_BY_ENGINE.get(engine)
        if seen is None:
            seen = _SEEN_BY_ENGINE[engine] = SeenEventIds()
        return seen


class LiveSessions:
    """The agent sessions in progress in this process, by session span id and by agent name,
    for log records that name their session only through the span context or the agent."""

    def __init__(self) -> None:
        self._by_span: dict[int, SessionInfo] = {}
        self._lock = threading.Lock()

    def add(self, span_id: int, session: SessionInfo) -> None:
        with self._lock:
            self._by_span[span_id] = session

    def remove(self, span_id: int) -> None:
        with self._lock:
            self._by_span.pop(span_id, None)

    def by_span_id(self, span_id: int) -> SessionInfo | None:
        with self._lock:
            return self._by_span.get(span_id)

    def by_agent_name(self, name: str) -> SessionInfo | None:
        """The most recently started live session of the agent `name`."""
        with self._lock:
            found = [s for s in self._by_span.values() if s.metadata.get("AGENT_NAME") == name]
        return found[-1] if found else None


LIVE_SESSIONS = LiveSessions()


def _span_id(span: Any) -> int:
    context = span.get_span_context()
    return context.span_id if context is not None else 0


def _is_session(span: Any) -> bool:
    """Whether `span` is an agent session: named as one, then marked as one.

    The name first, because it is nearly free (a str's prefix test) and rules out a host's
    spans; `gen_ai.operation.name` read through the public attribute mapping would cost each
    of them about 0.5 us (the property's proxy, `Mapping.get` in Python, and the KeyError it
    raises and catches for a span without the attribute), which was most of what the processor
    cost a host's span. `is None` rather than truthiness: an SDK span's mapping is never None,
    and its length is one more call in Python."""
    name = span.name
    if not name.startswith(ev.OPERATION_INVOKE_AGENT) or not ev.names_a_session(name):
        return False  # the first test alone rules out a host's span, without a call
    attributes = span.attributes
    return (
        attributes is not None
        and attributes.get(ev.ATTR_OPERATION_NAME) == ev.OPERATION_INVOKE_AGENT
    )


def session_from_span(span: ReadableSpan) -> SessionInfo:
    """Agent metadata from the span's attributes, then its resource's."""
    metadata: dict[str, str] = {}
    for source in (span.resource.attributes if span.resource else {}, span.attributes or {}):
        for attr, value in source.items():
            name = _METADATA_BY_ATTRIBUTE.get(attr)
            if name is not None:
                metadata[name] = str(value)
    context = span.get_span_context()
    session_id = metadata.get("SESSION_ID") or format(_span_id(span), "016x")
    # As AgentSession does: without `gen_ai.agent.id` the session stands for the agent, so
    # that X-Scion-Hook-ID and ${AGENT_ID} are never empty.
    metadata.setdefault("AGENT_ID", session_id)
    return SessionInfo(session_id=session_id, metadata=metadata, span_context=context)


def fields_from_attributes(attributes: Mapping[str, Any] | None) -> dict[str, str]:
    """Event context variables (PHASE, TOOL_NAME, ...) from span event attributes."""
    fields: dict[str, str] = {}
    for attr, value in (attributes or {}).items():
        name = _FIELD_BY_ATTRIBUTE.get(attr)
        if name is not None:
            fields[name] = str(value)
    return fields


class LifecycleHookProcessor(SpanProcessor):
    """Runs a template's hooks for the lifecycle events recorded on agent session spans.

    Add it to any SDK TracerProvider, one the package built or an application's own::

        provider.add_span_processor(LifecycleHookProcessor.from_template("scion-agent.yaml"))
    """

    def __init__(self, engine: HookEngine) -> None:
        self.engine = engine
        self._sessions: dict[int, SessionInfo] = {}
        self._observed: set[int] = set()  # session span ids whose _add_event is wrapped
        self._seen = seen_event_ids(engine)
        self._lock = threading.Lock()

    @classmethod
    def from_template(cls, *paths: Any, **options: Any) -> LifecycleHookProcessor:
        """Load template files (parent first) and build a processor; options go to HookEngine
        (`tracer_provider=` for the hook spans when the provider is not the global one)."""
        return cls(HookEngine.from_template(*paths, **options))

    # -- SpanProcessor --

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if not _is_session(span):
            return
        session = session_from_span(span)
        span_id = _span_id(span)
        with self._lock:
            self._sessions[span_id] = session
        LIVE_SESSIONS.add(span_id, session)
        original = getattr(span, "_add_event", None)
        if not callable(original):
            return  # SDK without it: events are read in on_end instead
        processor = self

        def add_event_and_observe(event: Any) -> None:
            original(event)
            processor._observe(session, event.name, event.attributes, event.timestamp)

        try:
            span._add_event = add_event_and_observe
        except (AttributeError, TypeError):
            return
        with self._lock:
            self._observed.add(span_id)

    def on_end(self, span: ReadableSpan) -> None:
        # No lock for the common case, a host's span that is no session: a session's id was
        # added by its own on_start, which happened before this call, and only this call
        # removes it. With no session live at all, the span's id is not even read.
        if not self._sessions:
            return
        span_id = _span_id(span)
        if span_id not in self._sessions:
            return
        with self._lock:
            session = self._sessions.pop(span_id, None)
            observed = span_id in self._observed
            self._observed.discard(span_id)
        LIVE_SESSIONS.remove(span_id)
        if session is None or observed:
            return
        for event in span.events:
            self._observe(session, event.name, event.attributes, event.timestamp)

    def shutdown(self) -> None:
        self.engine.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.engine.force_flush(timeout_millis / 1000.0)

    # -- events --

    def session_for(self, span: Any) -> SessionInfo | None:
        with self._lock:
            return self._sessions.get(_span_id(span))

    def expect_event_id(self, event_id: str) -> None:
        """The API dispatched this event itself; the observer must not fire it again."""
        self._seen.first_sight(event_id)

    def _observe(
        self,
        session: SessionInfo,
        name: str,
        attributes: Mapping[str, Any] | None,
        timestamp: int | None,
    ) -> None:
        event_name = ev.event_from_span_event_name(name)
        if event_name is None:
            return
        event_id = (attributes or {}).get(ev.ATTR_EVENT_ID)
        if isinstance(event_id, str) and not self._seen.first_sight(event_id):
            return  # already fired, by the API or by the log-record route
        event = LifecycleEvent(
            name=event_name,
            fields=fields_from_attributes(attributes),
            timestamp=session.next_moment(
                timestamp / 1e9 if timestamp else self.engine.clock.wall()
            ),
            event_id=event_id if isinstance(event_id, str) else new_event_id(),
        )
        try:
            result = self.engine.fire(event, session)
        except Exception:  # never raise into the code that added the event
            log.exception("dispatching %s failed", event_name)
            return
        if result.failed is not None:
            log.error(
                "hook %s failed with on_error: fail for %s (recorded with span.add_event: "
                "use AgentSession.record to act on it)",
                result.failed.hook.name,
                event_name,
            )
