"""A host's own spans beside agent sessions: ending them, with or without a session live,
never ends, hides or fires a session; a session that starts after others ended is seen as the
first was."""

from __future__ import annotations

import json
import threading

from opentelemetry.sdk.trace import TracerProvider

from otel_lifecycle_hooks.engine import HookEngine, LifecycleHookProcessor
from otel_lifecycle_hooks.engine.processor import LIVE_SESSIONS
from otel_lifecycle_hooks.template.loader import load_template_text
from tests.support.target_server import TargetServer

SESSION = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "reviewer"}
HOST_SPAN = {"http.request.method": "GET", "http.route": "/api/orders"}
EVENT = "agent.lifecycle.activity_change"


def processor_for(url: str, provider: TracerProvider) -> LifecycleHookProcessor:
    template = load_template_text(
        "lifecycle_hooks:\n"
        "  - name: activity\n"
        "    on: [activity-change]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{url}"\n'
        '      body: \'{"activity": "${ACTIVITY}"}\'\n'
        "    timeout: 2s\n"
    )
    processor = LifecycleHookProcessor(
        HookEngine(template, tracer_provider=provider, journal=False, hook_log=False)
    )
    provider.add_span_processor(processor)
    return processor


def host_spans(provider: TracerProvider, count: int) -> None:
    tracer = provider.get_tracer("host.app")
    for _ in range(count):
        with (
            tracer.start_as_current_span("GET /api/orders", attributes=HOST_SPAN),
            tracer.start_as_current_span("SELECT orders"),
        ):
            pass


def test_host_spans_ending_while_a_session_is_live_leave_the_session_as_it_was(
    target_server: TargetServer,
) -> None:
    provider = TracerProvider()
    processor = processor_for(target_server.url("/a"), provider)
    session = provider.get_tracer("host.agent").start_span(
        "invoke_agent reviewer", attributes=SESSION
    )
    span_id = session.get_span_context().span_id
    threads = [threading.Thread(target=host_spans, args=(provider, 200)) for _ in range(4)]
    for thread in threads:
        thread.start()
    host_spans(provider, 200)
    for thread in threads:
        thread.join()
    assert processor.session_for(session) is not None
    assert LIVE_SESSIONS.by_span_id(span_id) is not None
    session.add_event(EVENT, {"agent.activity": "thinking"})
    session.end()
    assert processor.session_for(session) is None
    assert LIVE_SESSIONS.by_span_id(span_id) is None
    processor.force_flush()
    provider.shutdown()
    assert [json.loads(r.body) for r in target_server.requests] == [{"activity": "thinking"}]


def test_a_session_after_host_spans_with_none_live_is_seen_as_the_first_was(
    target_server: TargetServer,
) -> None:
    provider = TracerProvider()
    processor = processor_for(target_server.url("/a"), provider)
    tracer = provider.get_tracer("host.agent")
    for activity in ("thinking", "executing"):
        host_spans(provider, 50)  # no session live: nothing for the processor to look up
        with tracer.start_as_current_span("invoke_agent reviewer", attributes=SESSION) as span:
            host_spans(provider, 5)
            span.add_event(EVENT, {"agent.activity": activity})
        assert processor.session_for(span) is None
    host_spans(provider, 5)
    processor.force_flush()
    provider.shutdown()
    assert [json.loads(r.body)["activity"] for r in target_server.requests] == [
        "thinking",
        "executing",
    ]


def test_a_session_is_a_span_named_invoke_agent_that_says_so_in_its_operation_name(
    target_server: TargetServer,
) -> None:
    """The GenAI conventions' session span: `invoke_agent` or `invoke_agent {agent name}`, with
    `gen_ai.operation.name: invoke_agent`. Either alone is a host's span: its events fire
    nothing."""
    provider = TracerProvider()
    processor = processor_for(target_server.url("/a"), provider)
    tracer = provider.get_tracer("host.agent")
    for name, attributes, activity in (
        ("plan the release", SESSION, "named otherwise"),
        ("invoke_agent reviewer", HOST_SPAN, "no operation name"),
        ("invoke_agentic", SESSION, "another name"),
        ("invoke_agent", SESSION, "unnamed agent"),
        ("invoke_agent reviewer", SESSION, "named agent"),
    ):
        with tracer.start_as_current_span(name, attributes=attributes) as span:
            span.add_event(EVENT, {"agent.activity": activity})
    processor.force_flush()
    provider.shutdown()
    assert [json.loads(r.body)["activity"] for r in target_server.requests] == [
        "unnamed agent",
        "named agent",
    ]
