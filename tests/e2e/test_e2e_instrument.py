"""Zero-code use: an app run under `opentelemetry-instrument` with OTEL_LIFECYCLE_HOOKS_TEMPLATE.

The app records a lifecycle event with plain `span.add_event`; the processor, added by the
`opentelemetry_post_instrument` entry point to the provider the auto-instrumentation built,
fires the template's hook against a loopback server, and the hook span is exported by that
same provider (its console exporter, its resource).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.target_server import RecordedRequest, TargetServer

APP = """
import json, sys
from opentelemetry import trace

provider = trace.get_tracer_provider()
tracer = trace.get_tracer("instrumented-app")
session = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "app-agent"}
with tracer.start_as_current_span("invoke_agent app-agent", attributes=session) as span:
    span.add_event(
        "agent.lifecycle.activity_change",
        {"agent.lifecycle.event": "activity-change", "agent.activity": "thinking",
         "agent.activity.previous": "idle"},
    )
    trace_id = format(span.get_span_context().trace_id, "032x")
provider.force_flush()
report = {
    "provider": type(provider).__module__ + "." + type(provider).__name__,
    "processors": [type(p).__name__ for p in provider._active_span_processor._span_processors],
    "trace_id": trace_id,
}
with open(sys.argv[1], "w") as handle:
    json.dump(report, handle)
"""

TEMPLATE = """
lifecycle_hooks:
  - name: report-activity
    on: [activity-change]
    action:
      type: http
      method: POST
      url: "{url}"
      headers:
        Content-Type: application/json
      body: '{{"agent": "${{AGENT_NAME}}", "activity": "${{ACTIVITY}}",
        "previous": "${{PREVIOUS_ACTIVITY}}"}}'
    timeout: 5s
"""


def _console_spans(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects the console span exporter printed, one per span."""
    decoder = json.JSONDecoder()
    spans: list[dict[str, Any]] = []
    index = 0
    while (start := stdout.find("{", index)) >= 0:
        span, index = decoder.raw_decode(stdout, start)
        spans.append(span)
    return spans


@dataclass(frozen=True)
class InstrumentedRun:
    """What one run of the app under `opentelemetry-instrument` produced."""

    report: dict[str, Any]  # what the app saw of its provider
    spans: list[dict[str, Any]]  # what its console exporter printed
    requests: list[RecordedRequest]  # what the hook sent


@pytest.fixture(scope="module")
def instrumented_run(tmp_path_factory: pytest.TempPathFactory) -> InstrumentedRun:
    """The app, run once for this module's tests."""
    workdir = tmp_path_factory.mktemp("instrumented")
    with TargetServer() as target:
        template = workdir / "scion-agent.yaml"
        template.write_text(TEMPLATE.format(url=target.url("/activity")), encoding="utf-8")
        app = workdir / "app.py"
        app.write_text(APP, encoding="utf-8")
        report_path = workdir / "report.json"
        env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
        env.update(
            HOME=str(workdir),
            OTEL_LIFECYCLE_HOOKS_TEMPLATE=str(template),
            OTEL_SERVICE_NAME="instrumented-app",
            OTEL_TRACES_EXPORTER="console",
            OTEL_METRICS_EXPORTER="none",
            OTEL_LOGS_EXPORTER="none",
        )
        instrument = Path(sys.executable).parent / "opentelemetry-instrument"
        result = subprocess.run(
            [str(instrument), sys.executable, str(app), str(report_path)],
            env=env,
            cwd=workdir,
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        requests = target.wait_for(1)
    return InstrumentedRun(
        report=json.loads(report_path.read_text(encoding="utf-8")),
        spans=_console_spans(result.stdout),
        requests=requests,
    )


def test_the_processor_is_added_to_the_provider_opentelemetry_instrument_configured(
    instrumented_run: InstrumentedRun,
) -> None:
    report = instrumented_run.report
    # One provider, the SDK's, holding both the exporter opentelemetry-instrument set up and
    # the hook processor: added to, never replaced.
    assert report["provider"] == "opentelemetry.sdk.trace.TracerProvider"
    assert "BatchSpanProcessor" in report["processors"]
    assert "LifecycleHookProcessor" in report["processors"]


def test_a_plain_span_event_fires_the_hook(instrumented_run: InstrumentedRun) -> None:
    (request,) = instrumented_run.requests
    assert request.method == "POST"
    assert json.loads(request.body) == {
        "agent": "app-agent",
        "activity": "thinking",
        "previous": "idle",
    }
    trace_id = instrumented_run.report["trace_id"]
    assert request.headers["traceparent"].split("-")[1] == trace_id


def test_the_hook_span_is_exported_by_the_instrumented_provider(
    instrumented_run: InstrumentedRun,
) -> None:
    spans = instrumented_run.spans
    session = next(s for s in spans if s["name"] == "invoke_agent app-agent")
    hook = next(s for s in spans if s["name"].startswith("agent.lifecycle_hook "))
    assert hook["parent_id"] == session["context"]["span_id"]
    assert hook["attributes"]["agent.lifecycle_hook.name"] == "report-activity"
    assert hook["attributes"]["agent.lifecycle_hook.outcome"] == "success"
    assert hook["status"]["status_code"] == "OK"
    # Its resource is the instrumented app's, not the package's default service name.
    assert hook["resource"]["attributes"]["service.name"] == "instrumented-app"


def test_each_http_attempt_is_one_client_span(instrumented_run: InstrumentedRun) -> None:
    spans = instrumented_run.spans
    hook = next(s for s in spans if s["name"].startswith("agent.lifecycle_hook "))
    clients = [s for s in spans if s["kind"] == "SpanKind.CLIENT"]
    assert [c["parent_id"] for c in clients] == [hook["context"]["span_id"]]
