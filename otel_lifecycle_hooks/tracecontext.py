"""W3C trace context (`traceparent`, `tracestate`) written straight from a span context.

What the SDK's trace-context propagator writes, without building a Context per call or
importing the propagator machinery at start-up: for script hooks (`TRACEPARENT`), the
supervised agent, and HTTP hooks when no other propagator is configured.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class SpanIds(NamedTuple):
    """The ids of a span chosen before the span is made: `run` hands its session's to the
    agent (`TRACEPARENT`) before it loads the SDK, whose provider then gives them to the
    session span (telemetry/setup.py)."""

    trace_id: int
    span_id: int

    @classmethod
    def new(cls) -> SpanIds:
        """Random ids, as the SDK's default id generator makes them (never zero)."""
        return cls(random.getrandbits(128) or 1, random.getrandbits(64) or 1)

    def traceparent(self) -> str:
        """`00-<trace id>-<span id>-03`: a sampled span of these ids, whose trace id is random
        (W3C Trace Context level 2's flag, which the SDK sets for its random ids)."""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-03"


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
