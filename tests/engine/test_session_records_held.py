"""AgentSession.hold_event_records(): the log records of the events recorded meanwhile are
emitted when released (or when the session ends), in order, each with the timestamp of its
event and in the session span's context; the events' hooks and span events are not held.
`run` holds the records of its first phases until its agent has started. The SDK's own
providers; a real loopback target."""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.telemetry.logs_api import sdk_logs
from tests.support.target_server import Reply, TargetServer

logs = sdk_logs()
logs_export = importlib.import_module(f"{logs.__name__}.export")


def engine_and_providers(
    tmp_path: Path, url: str
) -> tuple[HookEngine, TracerProvider, InMemorySpanExporter, object, object]:
    template = tmp_path / "agent.yaml"
    template.write_text(
        textwrap.dedent(
            f"""
            lifecycle_hooks:
              - name: prepare
                on: [pre-start]
                blocking: true
                action:
                  type: http
                  method: POST
                  url: "{url}"
                  body: '{{"event": "${{EVENT}}"}}'
            """
        )
    )
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    engine = HookEngine.from_template(
        template, tracer_provider=tracer_provider, journal=False, hook_log=False
    )
    records = logs_export.InMemoryLogRecordExporter()
    logger_provider = logs.LoggerProvider()
    logger_provider.add_log_record_processor(logs_export.SimpleLogRecordProcessor(records))
    return engine, tracer_provider, spans, logger_provider, records


def test_held_records_are_emitted_on_release_in_order_with_their_own_timestamps(
    tmp_path: Path, target_server: TargetServer
) -> None:
    target_server.always("/hook", Reply(204))
    engine, tracer_provider, spans, logger_provider, records = engine_and_providers(
        tmp_path, target_server.url("/hook")
    )
    session = AgentSession(
        engine, agent_name="held", tracer_provider=tracer_provider, logger_provider=logger_provider
    )
    session.hold_event_records()
    session.record("phase-change", {"PHASE": "provisioning"}, timestamp=1_000.0)
    result = session.record("pre-start", {"PHASE": "provisioning"}, timestamp=1_001.0)

    # The hook ran, blocking, while its record waited.
    assert result.ok
    assert [r.path for r in target_server.requests] == ["/hook"]
    assert records.get_finished_logs() == ()

    session.release_event_records()
    session.record("phase-change", {"PHASE": "running"}, timestamp=1_002.0)
    session.end()
    engine.shutdown()

    emitted = [r.log_record for r in records.get_finished_logs()]
    assert [(r.event_name, r.timestamp) for r in emitted] == [
        ("agent.lifecycle.phase_change", 1_000 * 10**9),
        ("agent.lifecycle.pre_start", 1_001 * 10**9),
        ("agent.lifecycle.phase_change", 1_002 * 10**9),
    ]
    (session_span,) = [s for s in spans.get_finished_spans() if s.name == "invoke_agent held"]
    assert {r.span_id for r in emitted} == {session_span.context.span_id}
    span_events = [dict(event.attributes) for event in session_span.events]
    assert [dict(r.attributes) for r in emitted] == span_events


def test_a_session_that_ends_while_holding_still_emits_its_records(
    tmp_path: Path, target_server: TargetServer
) -> None:
    target_server.always("/hook", Reply(204))
    engine, tracer_provider, _, logger_provider, records = engine_and_providers(
        tmp_path, target_server.url("/hook")
    )
    session = AgentSession(
        engine, agent_name="ended", tracer_provider=tracer_provider, logger_provider=logger_provider
    )
    session.hold_event_records()
    session.record("phase-change", {"PHASE": "provisioning"})
    session.record("session-end", {"PHASE": "error"})
    session.end()
    engine.shutdown()

    emitted = [r.log_record.event_name for r in records.get_finished_logs()]
    assert emitted == ["agent.lifecycle.phase_change", "agent.lifecycle.session_end"]
