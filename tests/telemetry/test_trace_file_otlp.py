"""A real `run` session's trace file is OTLP JSON that a real receiver accepts, that protobuf's
OTLP JSON mapping parses, and that `trace` still draws.

The session: `otel-lifecycle-hooks run` as the console script runs it, with no exporter
configured (so the embedded default, the local trace file), a webhook that succeeds against a
real loopback server, one that fails (503), and a script hook. Each line of its file is posted
to rotel (a real OpenTelemetry collector) as OTLP/HTTP JSON, and rotel's debug output must
show every span, by name and id.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_lifecycle_hooks.telemetry.tracefile import read_trace_file
from tests.support.rotel import RotelReceiver, debug_spans
from tests.support.target_server import Reply, TargetServer

HOOKS = ("register-agent", "report-failure", "say-goodbye")


@pytest.fixture
def recorded_session(tmp_path: Path, target_server: TargetServer) -> Path:
    """The trace file of a real `run` session (the embedded default exporter)."""
    target_server.on("/failing", Reply(503))
    template = tmp_path / "scion-agent.yaml"
    template.write_text(
        "lifecycle_hooks:\n"
        "  - name: register-agent\n"
        "    on: [post-start]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{target_server.url("/agents")}"\n'
        '      body: \'{"name": "${AGENT_NAME}"}\'\n'
        "    blocking: true\n"
        "  - name: report-failure\n"
        "    on: [post-start]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{target_server.url("/failing")}"\n'
        "    blocking: true\n"
        "  - name: say-goodbye\n"
        "    on: [session-end]\n"
        "    action:\n"
        "      type: script\n"
        f"      command: {json.dumps([sys.executable, '-c', 'pass'])}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))}
    env.update(HOME=str(tmp_path), OTEL_LIFECYCLE_HOOKS_JOURNAL=str(tmp_path / "journal.db"))
    done = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "run", "--quiet", "--template",
         str(template), "--agent-name", "reviewer", "--", "sh", "-c", "echo working"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [trace_file] = (tmp_path / ".local/state/otel-lifecycle-hooks/traces").glob("*.jsonl")
    return trace_file


def _protobuf_json(line: str) -> str:
    """A line with its hex ids in base64: protobuf's JSON mapping, which OTLP's departs from
    only there (the check of each id's hex form is part of it)."""
    request = json.loads(line)
    for resource_spans in request["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key, size in (("traceId", 16), ("spanId", 8), ("parentSpanId", 8)):
                    if key in span:
                        raw = bytes.fromhex(span[key])
                        assert len(raw) == size and span[key] == raw.hex(), span[key]
                        span[key] = base64.b64encode(raw).decode("ascii")
    return json.dumps(request)


def test_each_line_parses_as_an_export_trace_service_request_with_its_ids(
    recorded_session: Path,
) -> None:
    lines = recorded_session.read_text().splitlines()
    parsed = [
        json_format.Parse(_protobuf_json(line), ExportTraceServiceRequest()) for line in lines
    ]
    spans = [
        span
        for request in parsed
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]
    records = read_trace_file(recorded_session)
    assert [(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex() or None, s.name)
            for s in spans] == [
        (r["trace_id"], r["span_id"], r["parent_span_id"], r["name"]) for r in records
    ]  # fmt: skip
    [session] = [s for s in spans if s.name == "invoke_agent reviewer"]
    hooks = {s.name: s for s in spans if s.name.startswith("agent.lifecycle_hook ")}
    assert set(hooks) == {f"agent.lifecycle_hook {name}" for name in HOOKS}
    for name, span in hooks.items():
        assert span.parent_span_id == session.span_id and span.trace_id == session.trace_id
        attributes = {a.key: a.value for a in span.attributes}
        assert (
            name == "agent.lifecycle_hook " + attributes["agent.lifecycle_hook.name"].string_value
        )
    failed = hooks["agent.lifecycle_hook report-failure"]
    assert failed.status.code == failed.status.STATUS_CODE_ERROR
    assert hooks["agent.lifecycle_hook register-agent"].status.code == failed.status.STATUS_CODE_OK


def test_a_real_collector_accepts_each_line_as_otlp_http_json(
    recorded_session: Path, tmp_path: Path
) -> None:
    records = read_trace_file(recorded_session)
    workdir = tmp_path / "rotel"
    workdir.mkdir()
    with RotelReceiver(workdir) as rotel:
        for line in recorded_session.read_text().splitlines():
            answer = httpx.post(
                rotel.http_endpoint + "/v1/traces",
                content=line.encode("utf-8"),
                headers={"Content-Type": "application/json"},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
        output = rotel.stop_and_read()
    received = debug_spans(output)
    shown = {(span.name, span.span_id, span.parent_id) for span in received}
    expected = {(r["name"], r["span_id"], r["parent_span_id"] or "") for r in records}
    assert shown == expected, output[-3000:]
    hook_names = {span.name for span in received if span.name.startswith("agent.lifecycle_hook")}
    assert hook_names == {f"agent.lifecycle_hook {name}" for name in HOOKS}
    for span in received:
        if span.name in hook_names:
            hook = span.name.removeprefix("agent.lifecycle_hook ")
            assert span.attributes["agent.lifecycle_hook.name"] == f"Str({hook})"


def test_trace_still_draws_the_session(recorded_session: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "trace", "--width", "100",
         str(recorded_session)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("invoke_agent reviewer  ")
    rows: dict[str, Any] = {name: [ln for ln in lines if f" {name}  " in ln] for name in HOOKS}
    assert rows["register-agent"][0].startswith("✓ register-agent  post-start  ×1")
    assert rows["report-failure"][0].startswith("✗ report-failure  post-start  ×1  failed")
    assert rows["say-goodbye"][0].startswith("✓ say-goodbye  session-end  ×1")
    assert any("503" in line for line in lines)
