"""`SessionRecordingSampler`: keeps sampled-out agent sessions visible to the processor.

A session span that the sampler drops is never seen by any SpanProcessor, so span events
added to it with plain `span.add_event` could not fire hooks. The SDK's `AlwaysRecordSampler`
would record every span of the application, and the SDK's own samplers clear a dropped span's
attributes, which hides that it was a session at all. This wrapper turns DROP into
RECORD_ONLY for session spans only, keeping their attributes; they are still not exported.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from .. import events as ev


class SessionRecordingSampler(Sampler):
    def __init__(self, root: Sampler) -> None:
        self._root = root

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        result = self._root.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )
        if (
            result.decision is Decision.DROP
            and attributes is not None
            and attributes.get(ev.ATTR_OPERATION_NAME) == ev.OPERATION_INVOKE_AGENT
            and ev.names_a_session(name)
        ):
            return SamplingResult(Decision.RECORD_ONLY, attributes, result.trace_state)
        return result

    def get_description(self) -> str:
        return f"SessionRecordingSampler{{{self._root.get_description()}}}"
