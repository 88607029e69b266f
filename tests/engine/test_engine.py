"""The engine end to end: real loopback targets, real scripts, spans in an InMemorySpanExporter.

Retry delays run on a fake clock (the attempts themselves are real); timeouts are real and short.
"""

from __future__ import annotations

import sys
import textwrap
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.engine.clock import FakeClock
from otel_lifecycle_hooks.template.loader import load_template_text
from tests.support.target_server import Reply


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def template(text: str, **values: str):
    return load_template_text(textwrap.dedent(text).format(**values))


def http_hook(
    url: str, on_error: str = "log", timeout: str = "2s", blocking: bool = True, event="post-start"
):
    return template(
        """
        lifecycle_hooks:
          - name: target
            on: [{event}]
            action:
              type: http
              method: POST
              url: "{url}"
              body: '{{"agent": "${{AGENT_NAME}}"}}'
            on_error: {on_error}
            timeout: {timeout}
            blocking: {blocking}
        """,
        url=url,
        on_error=on_error,
        timeout=timeout,
        blocking="true" if blocking else "false",
        event=event,
    )


def run_once(tmpl, provider, clock=None, event="post-start", fields=None):
    engine = HookEngine(
        tmpl, tracer_provider=provider, clock=clock or FakeClock(), journal=False, hook_log=False
    )
    session = AgentSession(engine, agent_name="agent-1", tracer_provider=provider)
    result = session.record(event, fields or {})
    session.end()
    engine.shutdown(5)
    return engine, result


def hook_span(exporter):
    found = [s for s in exporter.get_finished_spans() if s.name.startswith("agent.lifecycle_hook ")]
    assert len(found) == 1, [s.name for s in exporter.get_finished_spans()]
    # Named after its hook, which is also an attribute: `agent.lifecycle_hook register-agent`.
    assert (
        found[0].name == "agent.lifecycle_hook " + found[0].attributes["agent.lifecycle_hook.name"]
    )
    return found[0]


def test_a_2xx_succeeds_in_one_attempt_and_its_span_is_a_child_of_the_session(spans, target_server):
    provider, exporter = spans
    target_server.on("/hook", Reply(201))
    _, result = run_once(http_hook(target_server.url("/hook")), provider)
    execution = result.executions[0]
    assert (execution.outcome, execution.attempts, execution.status_code) == ("success", 1, 201)
    span = hook_span(exporter)
    session = next(s for s in exporter.get_finished_spans() if s.name == "invoke_agent agent-1")
    assert span.parent.span_id == session.context.span_id
    assert span.attributes["agent.lifecycle_hook.name"] == "target"
    assert span.attributes["agent.lifecycle_hook.event"] == "post-start"
    assert span.attributes["agent.lifecycle_hook.action"] == "http"
    assert span.attributes["agent.lifecycle_hook.blocking"] is True
    assert span.attributes["agent.lifecycle_hook.on_error"] == "log"
    assert span.attributes["agent.lifecycle_hook.attempts"] == 1
    assert span.attributes["agent.lifecycle_hook.outcome"] == "success"
    request = target_server.requests[0]
    assert request.body == b'{"agent": "agent-1"}'
    agent_id, hook_name, event, timestamp = request.headers["x-scion-hook-id"].split(":", 3)
    assert (agent_id, hook_name, event) == (execution.session_id, "target", "post-start")
    assert timestamp.endswith("Z")
    assert "traceparent" in request.headers


def test_a_4xx_is_not_retried_even_under_on_error_retry(spans, target_server):
    provider, exporter = spans
    target_server.on("/hook", Reply(404))
    clock = FakeClock()
    _, result = run_once(http_hook(target_server.url("/hook"), on_error="retry"), provider, clock)
    execution = result.executions[0]
    assert (execution.outcome, execution.attempts, execution.error_type) == (
        "failed",
        1,
        "http.404",
    )
    assert clock.sleeps == []
    span = hook_span(exporter)
    assert span.attributes["error.type"] == "http.404"
    assert span.status.status_code.name == "ERROR"


def test_503_then_200_is_retried_once_after_1s(spans, target_server):
    provider, exporter = spans
    target_server.on("/hook", Reply(503), Reply(200))
    clock = FakeClock()
    _, result = run_once(http_hook(target_server.url("/hook"), on_error="retry"), provider, clock)
    assert (result.executions[0].outcome, result.executions[0].attempts) == ("success", 2)
    assert clock.sleeps == [1.0]
    retries = [e for e in hook_span(exporter).events if e.name == "agent.lifecycle_hook.retry"]
    assert [(e.attributes["attempt"], e.attributes["delay"]) for e in retries] == [(2, 1.0)]
    assert len(target_server.requests) == 2
    # The idempotency key is the same on every attempt.
    assert (
        target_server.requests[0].headers["x-scion-hook-id"]
        == target_server.requests[1].headers["x-scion-hook-id"]
    )


def test_an_always_503_target_is_retried_after_1s_2s_4s_then_logged(spans, target_server):
    provider, exporter = spans
    target_server.always("/hook", Reply(503))
    clock = FakeClock()
    _, result = run_once(http_hook(target_server.url("/hook"), on_error="retry"), provider, clock)
    execution = result.executions[0]
    assert (execution.outcome, execution.attempts) == ("failed", 4)
    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert result.ok  # retry then behaves as log: the transition goes on
    assert hook_span(exporter).attributes["agent.lifecycle_hook.attempts"] == 4


def test_a_503_under_on_error_log_is_one_attempt(spans, target_server):
    provider, _ = spans
    target_server.always("/hook", Reply(503))
    clock = FakeClock()
    _, result = run_once(http_hook(target_server.url("/hook"), on_error="log"), provider, clock)
    assert (result.executions[0].outcome, result.executions[0].attempts) == ("failed", 1)
    assert result.ok


def test_429_with_retry_after_waits_what_the_server_asked(spans, target_server):
    provider, _ = spans
    target_server.on("/hook", Reply(429, headers={"Retry-After": "3"}), Reply(200))
    clock = FakeClock()
    _, result = run_once(http_hook(target_server.url("/hook"), on_error="retry"), provider, clock)
    assert (result.executions[0].outcome, result.executions[0].attempts) == ("success", 2)
    assert clock.sleeps == [3.0]


def test_a_target_hanging_past_the_timeout_ends_in_timeout(spans, target_server):
    provider, exporter = spans
    target_server.always("/hook", Reply.hang())
    started = time.monotonic()
    _, result = run_once(http_hook(target_server.url("/hook"), timeout="500ms"), provider)
    assert time.monotonic() - started < 20  # a hang guard: the 0.5s timeout, not the hang
    assert result.executions[0].outcome == "timeout"
    assert hook_span(exporter).attributes["agent.lifecycle_hook.outcome"] == "timeout"


def test_a_fail_hook_that_times_out_fails_the_transition(spans, target_server):
    provider, _ = spans
    target_server.always("/hook", Reply.hang())
    _, result = run_once(
        http_hook(target_server.url("/hook"), on_error="fail", timeout="300ms"), provider
    )
    assert not result.ok
    assert result.failed.hook.name == "target"
    assert result.failed.outcome == "timeout"


def test_connection_refused_is_retried_then_failed(spans, free_port):
    provider, _ = spans
    clock = FakeClock()
    _, result = run_once(
        http_hook(f"http://127.0.0.1:{free_port}/hook", on_error="retry"), provider, clock
    )
    execution = result.executions[0]
    assert (execution.outcome, execution.attempts) == ("failed", 4)
    assert execution.error_type == "ConnectError"
    assert clock.sleeps == [1.0, 2.0, 4.0]


def test_connection_refused_under_fail_aborts_the_transition(spans, free_port):
    provider, _ = spans
    _, result = run_once(http_hook(f"http://127.0.0.1:{free_port}/hook", on_error="fail"), provider)
    assert result.failed is not None and result.failed.outcome == "failed"


def script_hook(code: str, on_error: str = "log", timeout: str = "5s"):
    return template(
        """
        lifecycle_hooks:
          - name: script
            on: [pre-stop]
            action:
              type: script
              command: ["{python}", "-c", "{code}"]
            on_error: {on_error}
            timeout: {timeout}
            blocking: true
        """,
        python=sys.executable,
        code=code,
        on_error=on_error,
        timeout=timeout,
    )


def test_a_script_exiting_1_is_retried_after_1s_2s_4s_under_retry_then_logged(spans):
    provider, exporter = spans
    clock = FakeClock()
    _, result = run_once(
        script_hook("import sys; sys.exit(1)", on_error="retry"), provider, clock, "pre-stop"
    )
    execution = result.executions[0]
    assert (execution.outcome, execution.attempts, execution.exit_code) == ("failed", 4, 1)
    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert result.ok  # retry then behaves as log
    span = hook_span(exporter)
    assert span.attributes["process.exit.code"] == 1
    assert span.attributes["error.type"] == "exit.1"


def test_a_script_exiting_1_under_log_is_one_attempt(spans):
    provider, _ = spans
    clock = FakeClock()
    _, result = run_once(
        script_hook("import sys; sys.exit(1)", on_error="log"), provider, clock, "pre-stop"
    )
    assert (result.executions[0].outcome, result.executions[0].attempts) == ("failed", 1)
    assert clock.sleeps == []


def test_a_missing_script_is_never_retried(spans, tmp_path):
    provider, _ = spans
    clock = FakeClock()
    tmpl = template(
        """
        lifecycle_hooks:
          - name: script
            on: [pre-stop]
            action:
              type: script
              command: ["{missing}"]
            on_error: retry
            blocking: true
        """,
        missing=str(tmp_path / "no-such-script"),
    )
    _, result = run_once(tmpl, provider, clock, "pre-stop")
    execution = result.executions[0]
    assert (execution.outcome, execution.attempts, execution.error_type) == (
        "failed",
        1,
        "FileNotFoundError",
    )


def test_a_script_exiting_1_under_fail_aborts_the_transition(spans):
    provider, _ = spans
    _, result = run_once(
        script_hook("import sys; sys.exit(1)", on_error="fail"), provider, event="pre-stop"
    )
    assert result.failed is not None and result.failed.exit_code == 1


def test_a_hanging_script_is_ended_at_its_timeout(spans):
    provider, exporter = spans
    started = time.monotonic()
    _, result = run_once(
        script_hook("import time; time.sleep(60)", timeout="500ms"), provider, event="pre-stop"
    )
    assert time.monotonic() - started < 30  # a hang guard: the 500ms timeout, not the 60 s
    assert result.executions[0].outcome == "timeout"
    assert hook_span(exporter).attributes["agent.lifecycle_hook.outcome"] == "timeout"


def test_a_script_reads_the_event_on_stdin_and_gets_traceparent(spans, tmp_path):
    provider, exporter = spans
    out = tmp_path / "seen.json"
    code = (
        "import json, os, sys; e = json.load(sys.stdin); "
        f"open({str(out)!r}, 'w').write(json.dumps([e, os.environ.get('TRACEPARENT')]))"
    )
    _, result = run_once(
        script_hook(code.replace('"', '\\"')),
        provider,
        event="pre-stop",
        fields={"ACTIVITY": "idle"},
    )
    assert result.executions[0].outcome == "success"
    import json

    payload, traceparent = json.loads(out.read_text())
    assert payload["hook_event_name"] == "pre-stop"
    assert payload["context"]["ACTIVITY"] == "idle"
    span = hook_span(exporter)
    assert traceparent.startswith(f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-")


@pytest.fixture
def free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
