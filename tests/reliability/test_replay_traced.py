"""A replay is traced as a delivery is: a hook span (`agent.lifecycle_hook`) carrying the
replayed execution's id and a link to the original delivery's span, its `traceparent` on the
request, and the delivery metrics. Against a real loopback target and a real SQLite journal;
`replay` runs as the command line, with the telemetry it configures from OTEL_* (the local
trace file by default)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.engine.clock import FakeClock
from otel_lifecycle_hooks.journal import Journal
from otel_lifecycle_hooks.replay import Replayer
from otel_lifecycle_hooks.telemetry.tracefile import read_trace_file
from otel_lifecycle_hooks.template.loader import load_templates
from tests.reliability.test_reliability_replay import (
    AGENT_ID,
    PLAIN_HOOK,
    cli,
    rows,
    write_template,
)
from tests.support.target_server import Reply, TargetServer

REPLAYED_FROM = "agent.lifecycle_hook.replayed_from"


def traced_delivery(template: Path, journal: Path) -> None:
    """One delivery through a real engine whose spans are recorded, so the journal row holds
    the original trace and span ids a replay links to."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    engine = HookEngine(
        load_templates([template]), clock=FakeClock(), journal=journal, hook_log=False,
        environ={}, tracer_provider=provider,
    )  # fmt: skip
    session = AgentSession(engine, agent_name="replay-agent", metadata={"AGENT_ID": AGENT_ID})
    session.record("task-completed", {"TASK_SUMMARY": "wrote the report"})
    session.end()
    engine.shutdown(5)


def check_traced(spans: list[dict[str, Any]], original: Any, traceparent: str) -> dict[str, Any]:
    """The replay's hook span among `spans` (trace-file records): it names the replayed row,
    links to the original delivery's span, and the request carried its trace context."""
    [hook] = [s for s in spans if s["attributes"].get(REPLAYED_FROM) == original.id]
    assert hook["name"] == "agent.lifecycle_hook report"
    assert hook["attributes"]["agent.lifecycle_hook.name"] == "report"
    assert hook["attributes"]["agent.lifecycle_hook.event"] in ("task-completed", "post-start")
    assert hook["attributes"]["agent.lifecycle_hook.action"] == "http"
    assert hook["attributes"]["agent.lifecycle_hook.attempts"] == 1
    assert original.trace_id and hook["trace_id"] != original.trace_id
    assert hook["links"] == [
        {"trace_id": original.trace_id, "span_id": original.span_id, "attributes": {}}
    ]
    version, trace_id, parent_id, _flags = traceparent.split("-")
    assert (version, trace_id) == ("00", hook["trace_id"])
    # The request's parent is the hook span or its CLIENT span, as for a live delivery.
    children = {s["span_id"] for s in spans if s["parent_span_id"] == hook["span_id"]}
    assert parent_id in children | {hook["span_id"]}
    return hook


def test_replay_sends_a_traceparent_and_writes_its_hook_span_to_the_trace_file(
    tmp_path: Path,
    target_server: TargetServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    traces = tmp_path / "traces"
    monkeypatch.setenv("LIFECYCLE_HOOKS_TRACE_DIR", str(traces))
    journal = tmp_path / "journal.sqlite3"
    template = write_template(tmp_path, PLAIN_HOOK.format(url=target_server.url("/report")))
    target_server.on("/report", Reply(503), Reply(200))
    traced_delivery(template, journal)
    [failed] = rows(journal)

    code, out, _ = cli(
        capsys, "replay", "--template", str(template), str(failed.id), "--journal", str(journal)
    )

    assert code == 0, out
    _, again = target_server.wait_for(2)
    spans = [span for path in sorted(traces.glob("*.jsonl")) for span in read_trace_file(path)]
    hook = check_traced(spans, failed, again.headers["traceparent"])
    assert hook["attributes"]["agent.lifecycle_hook.outcome"] == "success"
    assert hook["status"]["code"] == "OK"
    # The new journal row names the replay's span, as a delivery's row names its own.
    _, replayed = rows(journal)
    assert (replayed.trace_id, replayed.span_id) == (hook["trace_id"], hook["span_id"])


def test_a_replay_records_the_delivery_metrics_and_its_span_on_the_providers_given(
    tmp_path: Path, target_server: TargetServer
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(tmp_path, PLAIN_HOOK.format(url=target_server.url("/report")))
    target_server.on("/report", Reply(503), Reply(502))
    traced_delivery(template, journal)
    [failed] = rows(journal)
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    records = Journal(journal)
    replayer = Replayer(
        records, templates=[str(template)], environ={}, tracer_provider=tracer_provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
    )  # fmt: skip
    try:
        outcome = replayer.replay(failed)
    finally:
        replayer.close()
        records.close()

    assert outcome.outcome == "failed"
    [hook] = [
        s for s in exporter.get_finished_spans() if s.name.startswith("agent.lifecycle_hook ")
    ]
    assert hook.attributes is not None
    assert hook.attributes[REPLAYED_FROM] == failed.id
    assert hook.attributes["error.type"] == "http.502"
    assert hook.attributes["http.response.status_code"] == 502
    assert format(hook.links[0].context.trace_id, "032x") == failed.trace_id
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        metric.name: [dict(p.attributes or {}) for p in metric.data.data_points]
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    expected = {
        "agent.lifecycle_hook.name": "report",
        "agent.lifecycle_hook.event": "task-completed",
        "agent.lifecycle_hook.outcome": "failed",
        "agent.lifecycle_hook.action": "http",
    }
    assert points["agent.lifecycle_hook.executions"] == [expected]
    assert points["agent.lifecycle_hook.duration"] == [expected]
