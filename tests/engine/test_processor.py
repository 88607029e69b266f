"""The span processor and dispatch: span events fire hooks exactly once, sampling and a disabled
SDK never stop a hook, debounce keeps the last state, shutdown loses nothing pending."""

from __future__ import annotations

import json
import textwrap
import threading

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, TraceIdRatioBased

from otel_lifecycle_hooks.engine import AgentSession, HookEngine, LifecycleHookProcessor
from otel_lifecycle_hooks.telemetry.sampling import SessionRecordingSampler
from otel_lifecycle_hooks.template.loader import load_template_text
from tests.support.target_server import TargetServer


def activity_template(url: str, debounce: str | None = None, blocking: bool = False) -> str:
    extra = f"    debounce: {debounce}\n" if debounce else ""
    extra += "    blocking: true\n" if blocking else ""
    return (
        textwrap.dedent(
            f"""
        lifecycle_hooks:
          - name: activity
            on: [activity-change]
            action:
              type: http
              method: PATCH
              url: "{url}"
              body: '{{"activity": "${{ACTIVITY}}", "previous": "${{PREVIOUS_ACTIVITY}}"}}'
            timeout: 2s
        """
        )
        + extra
    )


def engine_for(text: str, provider=None) -> HookEngine:
    return HookEngine(
        load_template_text(text), tracer_provider=provider, journal=False, hook_log=False
    )


def session_attributes(name: str = "agent-1") -> dict:
    return {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}


def test_a_plain_span_add_event_fires_the_hook_exactly_once(target_server: TargetServer):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    processor = LifecycleHookProcessor(
        engine_for(activity_template(target_server.url("/a")), provider)
    )
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("an-app-that-knows-nothing-of-the-package")
    with tracer.start_as_current_span(
        "invoke_agent agent-1", attributes=session_attributes()
    ) as span:
        span.add_event(
            "agent.lifecycle.activity_change",
            {"agent.activity": "thinking", "agent.activity.previous": "idle"},
        )
    processor.force_flush()
    provider.shutdown()
    assert len(target_server.requests) == 1
    assert json.loads(target_server.requests[0].body) == {
        "activity": "thinking",
        "previous": "idle",
    }
    hook_spans = [
        s for s in exporter.get_finished_spans() if s.name.startswith("agent.lifecycle_hook ")
    ]
    assert len(hook_spans) == 1


def test_an_event_recorded_through_the_api_on_an_observed_span_fires_once(
    target_server: TargetServer,
):
    provider = TracerProvider()
    processor = LifecycleHookProcessor(
        engine_for(activity_template(target_server.url("/a")), provider)
    )
    provider.add_span_processor(processor)
    session = AgentSession(processor, agent_name="agent-1", tracer_provider=provider)
    session.record("activity-change", {"ACTIVITY": "executing", "PREVIOUS_ACTIVITY": "thinking"})
    session.end()
    processor.force_flush()
    provider.shutdown()
    assert len(target_server.requests) == 1
    # The span event is on the session span all the same, for the trace.
    assert json.loads(target_server.requests[0].body)["activity"] == "executing"


def test_spans_that_are_not_sessions_never_fire_hooks(target_server: TargetServer):
    provider = TracerProvider()
    processor = LifecycleHookProcessor(
        engine_for(activity_template(target_server.url("/a")), provider)
    )
    provider.add_span_processor(processor)
    with provider.get_tracer("app").start_as_current_span("GET /index") as span:
        span.add_event("agent.lifecycle.activity_change", {"agent.activity": "thinking"})
    processor.force_flush()
    provider.shutdown()
    assert target_server.requests == []


def test_hooks_run_when_the_session_is_sampled_out(target_server: TargetServer):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    processor = LifecycleHookProcessor(
        engine_for(activity_template(target_server.url("/a")), provider)
    )
    provider.add_span_processor(processor)
    session = AgentSession(processor, agent_name="agent-1", tracer_provider=provider)
    assert not session.span.is_recording()
    session.record("activity-change", {"ACTIVITY": "thinking"})
    session.end()
    processor.force_flush()
    provider.shutdown()
    assert len(target_server.requests) == 1
    assert exporter.get_finished_spans() == ()  # nothing exported, yet the hook ran


def test_plain_add_event_on_a_sampled_out_session_fires_under_the_session_recording_sampler(
    target_server: TargetServer,
):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=SessionRecordingSampler(TraceIdRatioBased(0.0)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    processor = LifecycleHookProcessor(
        engine_for(activity_template(target_server.url("/a")), provider)
    )
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("invoke_agent a", attributes=session_attributes()) as span:
        assert not span.get_span_context().trace_flags.sampled
        span.add_event("agent.lifecycle.activity_change", {"agent.activity": "thinking"})
        with tracer.start_as_current_span("some app work") as other:
            assert not other.is_recording()  # only sessions are kept recording
        with tracer.start_as_current_span("plan", attributes=session_attributes()) as other:
            assert not other.is_recording()  # marked as a session, but not named as one
    processor.force_flush()
    provider.shutdown()
    assert len(target_server.requests) == 1
    assert exporter.get_finished_spans() == ()


def test_hooks_run_with_the_sdk_disabled(target_server: TargetServer, monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    provider = TracerProvider()  # reads OTEL_SDK_DISABLED: every span is a no-op
    engine = engine_for(activity_template(target_server.url("/a")), provider)
    session = AgentSession(engine, agent_name="agent-1", tracer_provider=provider)
    assert not session.span.is_recording()
    session.record("activity-change", {"ACTIVITY": "thinking"})
    session.end()
    engine.shutdown(5)
    assert len(target_server.requests) == 1


def test_a_burst_of_1000_activity_changes_debounced_for_1s_sends_one_request_with_the_last(
    target_server: TargetServer,
):
    engine = engine_for(activity_template(target_server.url("/a"), debounce="1s"))
    session = AgentSession(engine, agent_name="agent-1", tracer_provider=trace.NoOpTracerProvider())
    for i in range(1000):
        session.record("activity-change", {"ACTIVITY": f"state-{i}"})
    requests = target_server.wait_for(1)
    # Give a wrongly-split window the chance to show a second request before looking.
    threading.Event().wait(1.5)
    engine.shutdown(5)
    assert len(target_server.requests) == 1
    assert json.loads(requests[0].body)["activity"] == "state-999"


def test_a_pending_debounced_event_is_delivered_at_shutdown(target_server: TargetServer):
    engine = engine_for(activity_template(target_server.url("/a"), debounce="1m"))
    session = AgentSession(engine, agent_name="agent-1", tracer_provider=trace.NoOpTracerProvider())
    session.record("activity-change", {"ACTIVITY": "thinking"})
    session.record("activity-change", {"ACTIVITY": "completed"})
    assert target_server.requests == []  # the window is a minute long
    engine.shutdown(5)
    assert len(target_server.requests) == 1
    assert json.loads(target_server.requests[0].body)["activity"] == "completed"


def test_one_hooks_executions_never_overlap_or_reorder(target_server: TargetServer):
    from tests.support.target_server import Reply

    target_server.always("/a", Reply(200, delay=0.02))
    engine = engine_for(activity_template(target_server.url("/a")))
    session = AgentSession(engine, agent_name="agent-1", tracer_provider=trace.NoOpTracerProvider())
    for i in range(20):
        session.record("activity-change", {"ACTIVITY": f"s{i}"})
    engine.shutdown(10)
    bodies = [json.loads(r.body)["activity"] for r in target_server.requests]
    assert bodies == [f"s{i}" for i in range(20)]


def test_a_blocking_hook_delays_the_recording_call_until_it_is_done(target_server: TargetServer):
    from tests.support.target_server import Reply

    target_server.always("/a", Reply(200, delay=0.3))
    engine = engine_for(activity_template(target_server.url("/a"), blocking=True))
    session = AgentSession(engine, agent_name="agent-1", tracer_provider=trace.NoOpTracerProvider())
    result = session.record("activity-change", {"ACTIVITY": "thinking"})
    # Returned only after the request was answered: it is recorded already.
    assert len(target_server.requests) == 1
    assert result.executions[0].outcome == "success"
    engine.shutdown(5)


def test_a_non_blocking_hook_never_delays_the_recording_call(target_server: TargetServer):
    from tests.support.target_server import Reply

    target_server.always("/a", Reply.hang())
    engine = engine_for(activity_template(target_server.url("/a")))
    session = AgentSession(engine, agent_name="agent-1", tracer_provider=trace.NoOpTracerProvider())
    result = session.record("activity-change", {"ACTIVITY": "thinking"})
    assert result.executions == []  # returned before the hook finished
    engine.shutdown(5)


def test_hooks_of_one_event_start_in_declaration_order(target_server: TargetServer):
    text = textwrap.dedent(
        f"""
        lifecycle_hooks:
          - name: first
            on: [pre-stop]
            action: {{type: http, method: POST, url: "{target_server.url("/1")}"}}
            blocking: true
          - name: second
            on: [pre-stop]
            action: {{type: http, method: POST, url: "{target_server.url("/2")}"}}
            blocking: true
          - name: third
            on: [pre-stop]
            action: {{type: http, method: POST, url: "{target_server.url("/3")}"}}
            blocking: true
        """
    )
    engine = engine_for(text)
    session = AgentSession(engine, agent_name="agent-1", tracer_provider=trace.NoOpTracerProvider())
    result = session.record("pre-stop")
    engine.shutdown(5)
    assert [r.path for r in target_server.requests] == ["/1", "/2", "/3"]
    assert [e.hook.name for e in result.executions] == ["first", "second", "third"]


def test_a_false_condition_skips_the_hook(target_server: TargetServer):
    text = activity_template(target_server.url("/a")) + "    condition: ACTIVITY == completed\n"
    engine = engine_for(text)
    session = AgentSession(engine, agent_name="agent-1", tracer_provider=trace.NoOpTracerProvider())
    session.record("activity-change", {"ACTIVITY": "thinking"})
    session.record("activity-change", {"ACTIVITY": "completed"})
    engine.shutdown(5)
    assert [json.loads(r.body)["activity"] for r in target_server.requests] == ["completed"]


def test_a_plain_session_span_without_an_agent_id_uses_its_session_id(target_server: TargetServer):
    provider = TracerProvider()
    processor = LifecycleHookProcessor(
        engine_for(activity_template(target_server.url("/a")), provider)
    )
    provider.add_span_processor(processor)
    attributes = {**session_attributes(), "gen_ai.conversation.id": "conv-42"}
    with provider.get_tracer("app").start_as_current_span(
        "invoke_agent a", attributes=attributes
    ) as span:
        span.add_event("agent.lifecycle.activity_change", {"agent.activity": "thinking"})
    processor.force_flush()
    provider.shutdown()
    hook_id = target_server.requests[0].headers["x-scion-hook-id"]
    assert hook_id.startswith("conv-42:activity:activity-change:")
