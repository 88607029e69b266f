"""Log-based lifecycle events (OTEP 4430): AgentSession emits each event as a log record, and
LifecycleHookLogProcessor fires hooks from such records, once per event however many routes
see it. Real loopback targets; the SDK's own providers."""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_lifecycle_hooks import LifecycleHookLogProcessor, LifecycleHookProcessor
from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.telemetry.logs_api import LogRecord, sdk_logs
from tests.support.target_server import Reply, TargetServer

logs = sdk_logs()
logs_export = importlib.import_module(f"{logs.__name__}.export")


def write_template(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            lifecycle_hooks:
              - name: notify
                on: [post-start, tool-start]
                blocking: true
                action:
                  type: http
                  method: POST
                  url: "{url}"
                  body: '{{"agent": "${{AGENT_NAME}}", "event": "${{EVENT}}",
                    "tool": "${{TOOL_NAME}}"}}'
            """
        )
    )
    return path


def test_an_application_with_only_a_logger_provider_fires_a_hook_from_a_lifecycle_record(
    tmp_path: Path, target_server: TargetServer
) -> None:
    target_server.always("/hook", Reply(204))
    processor = LifecycleHookLogProcessor.from_template(
        write_template(tmp_path, target_server.url("/hook")), journal=False, hook_log=False
    )
    provider = logs.LoggerProvider()
    provider.add_log_record_processor(processor)

    provider.get_logger("my.agent").emit(
        LogRecord(
            event_name="agent.lifecycle.tool_start",
            attributes={
                "agent.lifecycle.event": "tool-start",
                "gen_ai.agent.name": "reviewer",
                "gen_ai.tool.name": "grep",
            },
        )
    )
    provider.shutdown()

    (request,) = target_server.requests
    assert request.body == b'{"agent": "reviewer", "event": "tool-start", "tool": "grep"}'


def test_a_record_that_names_no_session_fires_nothing(
    tmp_path: Path, target_server: TargetServer
) -> None:
    processor = LifecycleHookLogProcessor.from_template(
        write_template(tmp_path, target_server.url("/hook")), journal=False, hook_log=False
    )
    provider = logs.LoggerProvider()
    provider.add_log_record_processor(processor)

    logger = provider.get_logger("my.agent")
    logger.emit(LogRecord(attributes={"agent.lifecycle.event": "tool-start"}))
    logger.emit(LogRecord(event_name="app.started", attributes={"gen_ai.agent.name": "x"}))
    provider.shutdown()

    assert target_server.requests == []


def test_an_event_seen_as_span_event_and_log_record_fires_each_hook_once(
    tmp_path: Path, target_server: TargetServer
) -> None:
    target_server.always("/hook", Reply(204))
    span_processor = LifecycleHookProcessor.from_template(
        write_template(tmp_path, target_server.url("/hook")), journal=False, hook_log=False
    )
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(span_processor)
    logger_provider = logs.LoggerProvider()
    logger_provider.add_log_record_processor(LifecycleHookLogProcessor(span_processor))
    logger = logger_provider.get_logger("my.agent")
    attributes = {
        "agent.lifecycle.event": "tool-start",
        "agent.lifecycle.event_id": "evt-1",
        "gen_ai.tool.name": "grep",
    }

    # Plain application code, no AgentSession: a session span, the event on it, and the same
    # event as a log record while the span is current.
    tracer = tracer_provider.get_tracer("my.agent")
    with tracer.start_as_current_span(
        "invoke_agent reviewer",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "reviewer"},
    ) as span:
        span.add_event("agent.lifecycle.tool_start", attributes)
        logger.emit(LogRecord(event_name="agent.lifecycle.tool_start", attributes=attributes))
    tracer_provider.shutdown()
    logger_provider.shutdown()

    (request,) = target_server.requests
    assert request.body == b'{"agent": "reviewer", "event": "tool-start", "tool": "grep"}'


def test_agent_session_emits_each_event_as_a_correlated_record_that_fires_nothing_twice(
    tmp_path: Path, target_server: TargetServer
) -> None:
    target_server.always("/hook", Reply(204))
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    span_processor = LifecycleHookProcessor.from_template(
        write_template(tmp_path, target_server.url("/hook")),
        tracer_provider=tracer_provider,
        journal=False,
        hook_log=False,
    )
    tracer_provider.add_span_processor(span_processor)
    records = logs_export.InMemoryLogRecordExporter()
    logger_provider = logs.LoggerProvider()
    logger_provider.add_log_record_processor(logs_export.SimpleLogRecordProcessor(records))
    logger_provider.add_log_record_processor(LifecycleHookLogProcessor(span_processor))

    session = AgentSession(
        span_processor,
        agent_name="reviewer",
        tracer_provider=tracer_provider,
        logger_provider=logger_provider,
    )
    session.record("tool-start", {"TOOL_NAME": "grep"})
    session.end()
    span_processor.shutdown()

    assert len(target_server.requests) == 1  # three routes saw it: the API, span, record
    (emitted,) = [r.log_record for r in records.get_finished_logs()]
    (session_span,) = [s for s in spans.get_finished_spans() if s.name == "invoke_agent reviewer"]
    (span_event,) = session_span.events
    assert emitted.event_name == "agent.lifecycle.tool_start" == span_event.name
    assert dict(emitted.attributes) == dict(span_event.attributes)
    assert emitted.span_id == session_span.context.span_id
    assert emitted.trace_id == session_span.context.trace_id


def test_a_record_emitted_while_a_session_of_this_process_is_current_uses_that_session(
    tmp_path: Path, target_server: TargetServer
) -> None:
    target_server.always("/hook", Reply(204))
    engine = HookEngine.from_template(
        write_template(tmp_path, target_server.url("/hook")), journal=False, hook_log=False
    )
    other_engine_processor = LifecycleHookLogProcessor(engine)
    logger_provider = logs.LoggerProvider()
    logger_provider.add_log_record_processor(other_engine_processor)
    tracer_provider = TracerProvider()
    session = AgentSession(
        HookEngine(engine.template, journal=False, hook_log=False),  # hooks of its own
        agent_name="planner",
        tracer_provider=tracer_provider,
    )
    from opentelemetry import trace

    with trace.use_span(session.span, end_on_exit=False):
        logger_provider.get_logger("tool").emit(
            LogRecord(attributes={"agent.lifecycle.event": "tool-start", "gen_ai.tool.name": "ls"})
        )
    session.end()
    logger_provider.shutdown()

    (request,) = target_server.requests
    assert request.body == b'{"agent": "planner", "event": "tool-start", "tool": "ls"}'


@pytest.mark.parametrize("name", ["opentelemetry.sdk._logs", "opentelemetry.sdk.logs"])
def test_the_sdk_logs_module_is_found_under_either_name(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from otel_lifecycle_hooks.telemetry import logs_api

    real = sdk_logs()
    other = (
        "opentelemetry.sdk.logs" if name == "opentelemetry.sdk._logs" else "opentelemetry.sdk._logs"
    )
    monkeypatch.setitem(sys.modules, name, real)
    monkeypatch.setitem(sys.modules, other, None)  # this release lacks the other name

    assert logs_api.sdk_logs() is real
