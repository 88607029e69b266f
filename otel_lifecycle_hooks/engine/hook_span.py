"""The span of one hook execution: started under the session's span, ended with its outcome.

Telemetry never stops a hook: a span that cannot be started or ended is logged at debug
level and the execution goes on.
"""

from __future__ import annotations

import logging

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from .. import events as ev
from ..template.model import HookSpec
from .gates import ATTR_DECISION, ATTR_DECISION_REASON
from .model import Execution, LifecycleEvent, SessionInfo
from .policies import INTERRUPTED

log = logging.getLogger("otel_lifecycle_hooks.engine")

_STATUS_OK = Status(StatusCode.OK)  # immutable: one for every successful execution


class HookSpans:
    """Starts and ends the hook spans of one executor."""

    def __init__(self, tracer_provider: trace.TracerProvider | None) -> None:
        self._tracer_provider = tracer_provider
        self._tracer: trace.Tracer | None = None
        # The hook span's parent, made once per session span (not once per execution).
        self._last_parent: tuple[trace.SpanContext, otel_context.Context] | None = None

    @property
    def tracer(self) -> trace.Tracer:
        """The package's tracer, from the provider given or the global one at first use."""
        if self._tracer is None:
            provider = self._tracer_provider or trace.get_tracer_provider()
            self._tracer = provider.get_tracer("otel_lifecycle_hooks")
        return self._tracer

    def start(self, hook: HookSpec, event: LifecycleEvent, session: SessionInfo) -> Span:
        """The span of `hook`'s execution for `event`, a child of the session's span."""
        parent = self._parent_context(session.span_context)
        try:
            return self.tracer.start_span(
                ev.hook_span_name(hook.name),
                context=parent,
                kind=SpanKind.INTERNAL,
                attributes={
                    ev.HOOK_ATTR_NAME: hook.name,
                    ev.HOOK_ATTR_EVENT: event.name,
                    ev.ATTR_EVENT: event.name,
                    ev.HOOK_ATTR_ACTION: hook.action.type,
                    ev.HOOK_ATTR_BLOCKING: hook.blocking,
                    ev.HOOK_ATTR_ON_ERROR: hook.on_error,
                    ev.HOOK_ATTR_INTERNAL: True,
                },
            )
        except Exception:  # telemetry never stops a hook
            log.debug("could not start hook span", exc_info=True)
            return NonRecordingSpan(session.span_context or trace.INVALID_SPAN_CONTEXT)

    def _parent_context(
        self, span_context: trace.SpanContext | None
    ) -> otel_context.Context | None:
        """The context whose span is the session's: the same for every execution of a
        session, so made once (a context is immutable)."""
        if span_context is None or not span_context.is_valid:
            return None
        last = self._last_parent
        if last is not None and last[0] is span_context:
            return last[1]
        parent = trace.set_span_in_context(NonRecordingSpan(span_context))
        self._last_parent = (span_context, parent)
        return parent


def end_span(span: Span, execution: Execution) -> None:
    """Set the execution's outcome on its span and end it."""
    try:
        # Set together: one call (and one lock of the span's) instead of one for each.
        # The span keeps the contract's five outcomes: a run cut short is `failed` there,
        # its error.type `interrupted` (the journal, metrics and hook log say `interrupted`).
        outcome = "failed" if execution.outcome == INTERRUPTED else execution.outcome
        attributes: dict[str, AttributeValue] = {
            ev.HOOK_ATTR_ATTEMPTS: execution.attempts,
            ev.HOOK_ATTR_OUTCOME: outcome,
        }
        if execution.status_code is not None:
            attributes["http.response.status_code"] = execution.status_code
        if execution.exit_code is not None:
            attributes["process.exit.code"] = execution.exit_code
        if execution.hook.action.type == "script":
            attributes["process.command"] = execution.hook.action.command[0]
        if execution.decision is not None:  # a gate: what it decided, and why
            attributes[ATTR_DECISION] = execution.decision.verdict
            if execution.decision.reason:
                attributes[ATTR_DECISION_REASON] = execution.decision.reason
        failed = outcome in ("failed", "timeout", "refused")
        if failed:
            attributes["error.type"] = execution.error_type or execution.outcome
        span.set_attributes(attributes)
        if failed:
            span.set_status(Status(StatusCode.ERROR, execution.message[:256]))
        elif execution.outcome == "success":
            span.set_status(_STATUS_OK)
        span.end()
    except Exception:
        log.debug("could not end hook span", exc_info=True)


def hex_id(value: int, width: int) -> str | None:
    """A trace or span id as W3C hex, None for an invalid (zero) one."""
    return format(value, f"0{width}x") if value else None
