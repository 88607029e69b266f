"""`LifecycleHookLogProcessor`: the OpenTelemetry LogRecordProcessor that turns log-based
lifecycle events (OTEP 4430) into hook executions, as they are emitted.

A record is a lifecycle event when it carries `agent.lifecycle.event` (or its `event_name` is
`agent.lifecycle.<event>`). Its session is, in this order: the live session whose span the
record is correlated with (its span context, or the span current when it was emitted); the
live session of the agent its `gen_ai.agent.name` names; or, for a record that names an agent
no live session has, a session made of the record's own agent attributes. A record that names
no session fires nothing.

Records carrying `agent.lifecycle.event_id` fire each hook once however many routes see the
event: `AgentSession.record`, a `LifecycleHookProcessor` on the same engine (span events) and
this processor share the engine's record of the ids already dispatched.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

from opentelemetry import trace
from opentelemetry.trace import SpanContext
from opentelemetry.util.types import Attributes

from .. import events as ev
from ..telemetry.logs_api import sdk_logs
from .engine import HookEngine
from .model import LifecycleEvent, SessionInfo, new_event_id
from .processor import (
    LIVE_SESSIONS,
    LifecycleHookProcessor,
    fields_from_attributes,
    seen_event_ids,
    session_from_span,
)

log = logging.getLogger("otel_lifecycle_hooks.engine")

if TYPE_CHECKING:
    from opentelemetry._logs import LogRecord
    from opentelemetry.sdk._logs import LogRecordProcessor, ReadWriteLogRecord
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
else:
    # At run time the SDK's base is looked up wherever this release keeps its logs module.
    LogRecordProcessor = sdk_logs().LogRecordProcessor

_METADATA_BY_ATTRIBUTE = {attr: name for name, attr in ev.METADATA_ATTRIBUTES.items()}
_NAMED_SESSIONS_LIMIT = 256


class LifecycleHookLogProcessor(LogRecordProcessor):
    """Runs a template's hooks for the log-based lifecycle events of any LoggerProvider::

        provider.add_log_record_processor(
            LifecycleHookLogProcessor.from_template("scion-agent.yaml")
        )

    Give it the `LifecycleHookProcessor` (or the engine) that a tracer provider already has
    to share one engine: each event then fires each hook once, seen by both.
    """

    def __init__(self, hooks: HookEngine | LifecycleHookProcessor) -> None:
        self.engine = hooks.engine if isinstance(hooks, LifecycleHookProcessor) else hooks
        self._seen = seen_event_ids(self.engine)
        # Sessions known only from records, by agent and conversation, so that one agent's
        # events share a session (its id, captured responses) across records.
        self._named: OrderedDict[tuple[str, str], SessionInfo] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_template(
        cls, *paths: str | os.PathLike[str], **options: Any
    ) -> LifecycleHookLogProcessor:
        """Load template files (parent first) and build a processor; options go to HookEngine."""
        return cls(HookEngine.from_template(*paths, **options))

    # -- LogRecordProcessor --

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        try:
            self._on_emit(log_record)
        except Exception:  # never raise into the code that emitted the record
            log.exception("dispatching a lifecycle log record failed")

    def shutdown(self) -> None:
        self.engine.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.engine.force_flush(timeout_millis / 1000.0)

    # -- records --

    def _on_emit(self, log_record: ReadWriteLogRecord) -> None:
        # The SDK hands a ReadWriteLogRecord holding the API record (the package needs 1.45+).
        record = log_record.log_record
        attributes: Mapping[str, Any] = record.attributes or {}
        event_name = _lifecycle_event(attributes, getattr(record, "event_name", None))
        if event_name is None:
            return
        session = self._session_for(record, attributes, getattr(log_record, "resource", None))
        if session is None:
            log.debug("lifecycle record %s names no session: ignored", event_name)
            return
        event_id = attributes.get(ev.ATTR_EVENT_ID)
        if isinstance(event_id, str) and not self._seen.first_sight(event_id):
            return  # already fired, by the API or by the span-event route
        timestamp = record.timestamp or record.observed_timestamp
        event = LifecycleEvent(
            name=event_name,
            fields=fields_from_attributes(attributes),
            timestamp=session.next_moment(
                timestamp / 1e9 if timestamp else self.engine.clock.wall()
            ),
            event_id=event_id if isinstance(event_id, str) else new_event_id(),
        )
        result = self.engine.fire(event, session)
        if result.failed is not None:
            log.error(
                "hook %s failed with on_error: fail for %s (recorded as a log record: "
                "use AgentSession.record to act on it)",
                result.failed.hook.name,
                event_name,
            )

    def _session_for(
        self, record: LogRecord, attributes: Mapping[str, Any], resource: Resource | None
    ) -> SessionInfo | None:
        span_id = getattr(record, "span_id", 0) or 0
        if span_id:
            known = LIVE_SESSIONS.by_span_id(span_id)
            if known is not None:
                return known
        context = getattr(record, "context", None)
        current = trace.get_current_span(context)
        if _is_session_span(current):
            return session_from_span(current)
        agent_name = attributes.get(ev.ATTR_AGENT_NAME)
        if not isinstance(agent_name, str) or not agent_name:
            return None
        live = LIVE_SESSIONS.by_agent_name(agent_name)
        if live is not None:
            return live
        key = (agent_name, str(attributes.get(ev.ATTR_CONVERSATION_ID, "")))
        with self._lock:
            session = self._named.get(key)
            if session is None:
                parent = current.get_span_context()
                session = _session_from_attributes(
                    attributes, resource, parent if parent.is_valid else None
                )
                self._named[key] = session
                while len(self._named) > _NAMED_SESSIONS_LIMIT:
                    self._named.popitem(last=False)
            return session


def _lifecycle_event(attributes: Mapping[str, Any], event_name: str | None) -> str | None:
    named = attributes.get(ev.ATTR_EVENT)
    if isinstance(named, str) and named in ev.ALL_EVENTS:
        return named
    return ev.event_from_span_event_name(event_name) if event_name else None


def _is_session_span(span: trace.Span) -> TypeGuard[ReadableSpan]:
    # Only an SDK span has readable attributes; the API's NonRecordingSpan has none.
    attributes: Attributes = getattr(span, "attributes", None)
    if not attributes:
        return False
    operation: object = attributes.get(ev.ATTR_OPERATION_NAME)
    return operation == ev.OPERATION_INVOKE_AGENT


def _session_from_attributes(
    attributes: Mapping[str, Any], resource: Resource | None, span_context: SpanContext | None
) -> SessionInfo:
    """A session named only by a record: its agent metadata, from the resource then the record."""
    metadata: dict[str, str] = {}
    resource_attributes = getattr(resource, "attributes", None) or {}
    for source in (resource_attributes, attributes):
        for attr, value in source.items():
            name = _METADATA_BY_ATTRIBUTE.get(attr)
            if name is not None:
                metadata[name] = str(value)
    session_id = metadata.get("SESSION_ID") or uuid.uuid4().hex
    metadata.setdefault("SESSION_ID", session_id)
    metadata.setdefault("AGENT_ID", session_id)
    return SessionInfo(session_id=session_id, metadata=metadata, span_context=span_context)
