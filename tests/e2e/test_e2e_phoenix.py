"""A real `run` session, exported through a real collector hop into a real trace store.

    otel-lifecycle-hooks run --(OTLP http/protobuf or gRPC)--> rotel --(OTLP gRPC)--> Phoenix

and read back from Phoenix's REST API: the session span, its lifecycle span events, and each
hook's `agent.lifecycle_hook {hook name}` span as its child with status and attributes, one of
them failing.

Phoenix is installed into its own virtual environment on first use (a few minutes, once) and
started once per test session; without it the test fails in CI and is skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.phoenix import PhoenixServer, RotelForwarder, poll
from tests.support.target_server import Reply, TargetServer

AGENT_NAME = "e2e-agent"
EXPECTED_HOOKS = {"register-agent", "announce-done", "audit-end"}

TEMPLATE = """
lifecycle_hooks:
  - name: register-agent
    on: [post-start]
    action:
      type: http
      method: POST
      url: "{base}/register"
      body: '{{"agent": "${{AGENT_NAME}}"}}'
    on_error: retry
    blocking: true
    timeout: 5s

  - name: announce-done
    on: [task-completed]
    action:
      type: webhook
      url: "{base}/done"
      body: '{{"summary": "${{TASK_SUMMARY}}"}}'
    timeout: 5s

  - name: audit-end
    on: [session-end]
    action:
      type: script
      command: ["{python}", "-c", "import sys; sys.exit(3)"]
    blocking: true
    timeout: 10s
"""

# The agent: keeps the trace context it was given, reports its task done, exits.
AGENT = """
import os, subprocess, sys
with open(sys.argv[1], "w") as handle:
    handle.write(os.environ["TRACEPARENT"])
subprocess.run(
    [sys.executable, "-m", "otel_lifecycle_hooks", "status", "task_completed", "wrote the report"],
    check=True,
)
"""


def _value(any_value: dict[str, Any]) -> Any:
    """The one set member of an OTLP AnyValue as Phoenix returns it."""
    return next((v for v in any_value.values() if v is not None), None)


def _attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {item["key"]: _value(item["value"]) for item in items or []}


def _run_session(tmp_path: Path, target: TargetServer, env_extra: dict[str, str]) -> str:
    """Run the supervisor on the small agent; returns the session's trace id."""
    template = tmp_path / "scion-agent.yaml"
    template.write_text(
        TEMPLATE.format(base=target.url("").rstrip("/"), python=sys.executable), encoding="utf-8"
    )
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT, encoding="utf-8")
    traceparent_file = tmp_path / "traceparent"
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update(
        HOME=str(tmp_path),
        OTEL_LIFECYCLE_HOOKS_JOURNAL=str(tmp_path / "journal.sqlite3"),
        OTEL_LIFECYCLE_HOOKS_LOG=str(tmp_path / "agent.log"),
        OTEL_METRICS_EXPORTER="none",  # Phoenix stores traces only
        **env_extra,
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_lifecycle_hooks",
            "run",
            "--template",
            str(template),
            "--agent-name",
            AGENT_NAME,
            "--grace-period",
            "5s",
            "--",
            sys.executable,
            str(agent),
            str(traceparent_file),
        ],
        env=env,
        cwd=tmp_path,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard
    )
    assert result.returncode == 0, result.stderr
    return traceparent_file.read_text(encoding="utf-8").split("-")[1]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_run_session_reaches_phoenix_through_rotel(
    tmp_path: Path,
    target_server: TargetServer,
    phoenix_server: PhoenixServer,
    rotel_to_phoenix: RotelForwarder,
    protocol: str,
) -> None:
    target_server.on("/register", Reply(503), Reply(201))
    # A project of its own: nothing another test exported can satisfy this one.
    project = f"e2e-{protocol.replace('/', '-')}-{uuid.uuid4().hex[:8]}"
    endpoint = (
        rotel_to_phoenix.grpc_endpoint if protocol == "grpc" else rotel_to_phoenix.http_endpoint
    )
    trace_id = _run_session(
        tmp_path,
        target_server,
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
        },
    )

    def whole_session() -> list[dict[str, Any]] | None:
        spans = phoenix_server.spans(project, trace_id=trace_id)
        names = [span["name"] for span in spans]
        complete = (
            f"invoke_agent {AGENT_NAME}" in names
            and sum(n.startswith("agent.lifecycle_hook ") for n in names) >= 3
        )
        return spans if complete else None

    spans = poll(whole_session, timeout=120.0)  # a hang guard: Phoenix ingests in batches
    assert spans is not None, (
        f"the session never reached Phoenix (project {project}, trace {trace_id}); "
        f"got {[s['name'] for s in phoenix_server.spans(project)]}\nrotel:\n"
        f"{rotel_to_phoenix.output()}"
    )

    (session,) = [s for s in spans if s["name"] == f"invoke_agent {AGENT_NAME}"]
    assert not session["parent_span_id"]
    session_attributes = _attributes(session["attributes"])
    assert session_attributes["gen_ai.operation.name"] == "invoke_agent"
    assert session_attributes["gen_ai.agent.name"] == AGENT_NAME

    events = sorted(session["events"] or [], key=lambda event: event["time_unix_nano"])
    lifecycle = [
        (event["name"], _attributes(event["attributes"]).get("agent.lifecycle.event"))
        for event in events
        if event["name"] != "agent.lifecycle.phase_change"
    ]
    assert lifecycle == [
        ("agent.lifecycle.pre_start", "pre-start"),
        ("agent.lifecycle.post_start", "post-start"),
        ("agent.lifecycle.activity_change", "activity-change"),
        ("agent.lifecycle.task_completed", "task-completed"),
        ("agent.lifecycle.session_end", "session-end"),
    ]
    by_name = {event["name"]: _attributes(event["attributes"]) for event in events}
    assert by_name["agent.lifecycle.task_completed"]["agent.task.summary"] == "wrote the report"
    assert by_name["agent.lifecycle.session_end"]["process.exit.code"] == 0
    phases = [
        _attributes(event["attributes"])["agent.phase"]
        for event in events
        if event["name"] == "agent.lifecycle.phase_change"
    ]
    assert phases == ["provisioning", "starting", "running", "stopping", "stopped"]

    hooks = {
        _attributes(span["attributes"])["agent.lifecycle_hook.name"]: span
        for span in spans
        if span["name"].startswith("agent.lifecycle_hook ")
    }
    assert set(hooks) == EXPECTED_HOOKS
    assert {span["name"] for span in hooks.values()} == {
        f"agent.lifecycle_hook {name}" for name in EXPECTED_HOOKS
    }
    for span in hooks.values():
        assert span["parent_span_id"] == session["span_id"]
        assert span["trace_id"] == trace_id

    register = hooks["register-agent"]
    register_attributes = _attributes(register["attributes"])
    assert register["status"]["code"] == 1  # OK
    assert register_attributes["agent.lifecycle_hook.outcome"] == "success"
    assert register_attributes["agent.lifecycle_hook.attempts"] == 2
    assert register_attributes["agent.lifecycle_hook.event"] == "post-start"
    assert [event["name"] for event in register["events"] or []] == ["agent.lifecycle_hook.retry"]
    # The HTTP attempts are child spans of their hook span.
    attempts = [s for s in spans if s["parent_span_id"] == register["span_id"]]
    assert len(attempts) == 2

    announce_attributes = _attributes(hooks["announce-done"]["attributes"])
    assert hooks["announce-done"]["status"]["code"] == 1
    assert announce_attributes["agent.lifecycle_hook.outcome"] == "success"
    assert announce_attributes["agent.lifecycle_hook.attempts"] == 1

    audit = hooks["audit-end"]
    audit_attributes = _attributes(audit["attributes"])
    assert audit["status"]["code"] == 2  # ERROR
    assert audit["status"]["message"] == "exited with code 3"
    assert audit_attributes["agent.lifecycle_hook.outcome"] == "failed"
    assert audit_attributes["error.type"] == "exit.3"
    assert audit_attributes["process.exit.code"] == 3

    received = [(request.method, request.path) for request in target_server.requests]
    assert received == [("POST", "/register"), ("POST", "/register"), ("POST", "/done")]
    assert json.loads(target_server.requests[2].body) == {"summary": "wrote the report"}
