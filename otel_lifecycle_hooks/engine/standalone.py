"""Firing hooks from `hook --dialect` when no supervisor is running: one short-lived engine per
harness event, the session carried between invocations by the harness state file."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("otel_lifecycle_hooks.engine")

# How long a standalone `hook` invocation waits for its non-blocking hooks before exiting.
DRAIN_TIMEOUT = 15.0


def fire(template_paths: Sequence[str], derived: Sequence[Any], state: dict[str, Any]) -> None:
    """Fire each derived event (`.event`, `.fields`) through the template's hooks."""
    from ..spec.loader import load_templates
    from ..telemetry.setup import configure_telemetry
    from .engine import HookEngine
    from .session import AgentSession

    template = load_templates(list(template_paths))
    telemetry = configure_telemetry(template.env, dict(os.environ))
    engine = HookEngine(
        template, tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    session_id = state.get("session_id") or None
    session = AgentSession(
        engine,
        agent_name=os.environ.get("SCION_AGENT_NAME")
        or template.metadata.get("AGENT_NAME")
        or "agent",
        session_id=session_id,
        tracer_provider=telemetry.tracer_provider,
    )
    state["session_id"] = session.session_id
    try:
        for item in derived:
            session.record(item.event, dict(item.fields))
    finally:
        session.end()
        engine.shutdown(DRAIN_TIMEOUT)
        telemetry.shutdown()
