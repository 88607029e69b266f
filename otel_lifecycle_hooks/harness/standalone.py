"""Firing hooks from `hook --dialect` when no supervisor is running: one short-lived engine per
harness event, the session carried between invocations by the harness state file.

One harness session stays one session: `entry` (the session's part of the state file) keeps
the SESSION_ID every call's hooks see, the agent's name, and the trace id and span id of the
session's first `invoke_agent` span. Each later call records its events on an `invoke_agent`
span of its own whose parent is that first span (a remote parent), so the whole session is one
trace, written to one trace file named after SESSION_ID.
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.trace import SpanContext, TraceFlags

from ..engine.engine import HookEngine
from ..engine.session import AgentSession
from ..events import ATTR_HARNESS_SESSION_ID
from ..systems import host_protocol, load_templates
from ..telemetry.setup import configure_telemetry

log = logging.getLogger("otel_lifecycle_hooks.engine")

# How long a standalone `hook` invocation waits for its non-blocking hooks before exiting.
DRAIN_TIMEOUT = 15.0


@functools.lru_cache(maxsize=4)
def _template(paths: tuple[str, ...]) -> Any:
    return load_templates(list(paths))


def template_env(template_paths: Sequence[str]) -> Mapping[str, str]:
    """The templates' `env:` (read once per process; `fire` reuses the loaded templates)."""
    env: Mapping[str, str] = _template(tuple(template_paths)).env
    return env


def agent_name(template: Any, entry: Mapping[str, Any], environ: Mapping[str, str]) -> str:
    """`SCION_AGENT_NAME`, else the template's agent or harness name, else the harness the
    events came from (`claude`, `gemini`, ...), else "agent"."""
    return (
        environ.get("SCION_AGENT_NAME")
        or template.metadata.get("AGENT_NAME")
        or template.metadata.get("HARNESS_NAME")
        or str(entry.get("dialect") or "")
        or "agent"
    )


def fire(template_paths: Sequence[str], derived: Sequence[Any], entry: dict[str, Any]) -> None:
    """Fire each derived event (`.event`, `.fields`) through the template's hooks, on the
    session that `entry` holds (made on the first call)."""
    environ = dict(os.environ)
    template = _template(tuple(template_paths))
    session_id = entry.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        session_id = uuid.uuid4().hex
    name = entry.get("agent_name")
    if not isinstance(name, str) or not name:
        name = agent_name(template, entry, environ)
    metadata = {"AGENT_NAME": name}
    if entry.get("dialect"):
        metadata["HARNESS_NAME"] = str(entry["dialect"])
    telemetry = configure_telemetry(template.env, environ, session_id=session_id)
    engine = HookEngine(
        template, tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    parent = _parent_context(entry)
    session = AgentSession(
        engine,
        agent_name=name,
        metadata=metadata,
        session_id=session_id,
        tracer_provider=telemetry.tracer_provider,
        parent=parent,
    )
    harness_session_id = entry.get("harness_session_id")
    if isinstance(harness_session_id, str) and harness_session_id:
        session.set_attribute(ATTR_HARNESS_SESSION_ID, harness_session_id)
    entry["session_id"] = session.session_id
    entry["agent_name"] = name
    if parent is None:
        context = session.span.get_span_context()
        if context.is_valid:
            entry["trace_id"] = format(context.trace_id, "032x")
            entry["span_id"] = format(context.span_id, "016x")
            entry["trace_flags"] = int(context.trace_flags)
    # `discover` answers of host-protocol scripts, kept for the session across `hook` calls.
    identities = host_protocol.restore_registrations(
        template.hooks, entry.get(host_protocol.DISCOVERY_CACHE_KEY), session.info
    )
    try:
        for item in derived:
            session.record(item.event, dict(item.fields))
        kept = host_protocol.keep_registrations(template.hooks, session.info, identities)
        if kept:
            entry[host_protocol.DISCOVERY_CACHE_KEY] = kept
        else:
            entry.pop(host_protocol.DISCOVERY_CACHE_KEY, None)
    finally:
        session.end()
        engine.shutdown(DRAIN_TIMEOUT)
        telemetry.shutdown()


def _parent_context(entry: Mapping[str, Any]) -> SpanContext | None:
    """The session's first span, as a remote parent; None on the first call (or a bad entry)."""
    try:
        trace_id = int(str(entry.get("trace_id")), 16)
        span_id = int(str(entry.get("span_id")), 16)
    except ValueError:
        return None
    flags = entry.get("trace_flags")
    # The first span's sampling decision holds for the whole session.
    sampled = flags if isinstance(flags, int) and 0 <= flags <= 0xFF else TraceFlags.SAMPLED
    context = SpanContext(
        trace_id=trace_id, span_id=span_id, is_remote=True, trace_flags=TraceFlags(sampled)
    )
    return context if context.is_valid else None
