"""W3C trace context (`traceparent`, `tracestate`) written straight from a span context.

What the SDK's trace-context propagator writes, without building a Context per call or
importing the propagator machinery at start-up: for script hooks (`TRACEPARENT`), the
supervised agent, and HTTP hooks when no other propagator is configured.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext


def traceparent(context: SpanContext | None) -> str | None:
    """`00-<trace id>-<span id>-<flags>`, or None for no valid context."""
    if context is None or not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def trace_headers(context: SpanContext | None) -> dict[str, str]:
    """The `traceparent` header, and `tracestate` when the context carries one."""
    parent = traceparent(context)
    if parent is None:
        return {}
    headers = {"traceparent": parent}
    state = context.trace_state.to_header() if context and context.trace_state else ""
    if state:
        headers["tracestate"] = state
    return headers
