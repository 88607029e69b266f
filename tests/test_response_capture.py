"""Response capture (seed 000, open question 4): a hook's HTTP response becomes
`${HOOK_<NAME>_RESPONSE}` / `${HOOK_<NAME>_STATUS}` for the later hooks of the session, with a
JSON-path form to pick one field. Register, capture the service id, use it in status updates
and in the deregistration - from YAML alone, under the real supervisor."""

from __future__ import annotations

import json
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.cli.main import main as cli_main
from otel_lifecycle_hooks.engine import HookEngine, SessionInfo
from otel_lifecycle_hooks.engine.capture import CAPTURE_LIMIT
from otel_lifecycle_hooks.template.loader import load_template_text, load_templates
from otel_lifecycle_hooks.template.validate import capture_warnings
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.target_server import Reply, TargetServer

REGISTRY_TEMPLATE = """\
lifecycle_hooks:
  - name: register-agent
    on: [post-start]
    blocking: true
    action:
      type: http
      method: POST
      url: "{base}/services"
      body: '{{"agent": "${{AGENT_NAME}}"}}'
  - name: update-activity
    on: [activity-change]
    action:
      type: http
      method: PATCH
      url: "{base}/v1/${{HOOK_REGISTER_AGENT_RESPONSE.name}}/activity"
      body: '{{"activity": "${{ACTIVITY}}", "registered": ${{HOOK_REGISTER_AGENT_STATUS}}}}'
  - name: deregister-agent
    on: [pre-stop]
    blocking: true
    action:
      type: http
      method: DELETE
      url: "{base}/v1/${{HOOK_REGISTER_AGENT_RESPONSE.name}}"
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    space = Workspace(tmp_path)
    yield space
    space.cleanup()


def test_register_capture_and_reuse_the_service_name_end_to_end_under_run(
    workspace: Workspace, target_server: TargetServer
) -> None:
    target_server.on("/services", Reply.json(201, '{"name": "services/abc", "ttl": 30}'))
    template = workspace.root / "scion-agent.yaml"
    template.write_text(REGISTRY_TEMPLATE.format(base=target_server.url("")))
    assert capture_warnings(load_templates([template])) == []
    ready = workspace.root / "ready"
    command = workspace.agent_command(
        claude=[{"hook_event_name": "UserPromptSubmit", "prompt": "hello"}],
        ready_file=str(ready),
        on_term=0,
    )
    run = workspace.start(template, command, "--grace-period", "10s")

    wait_until(ready.exists, what="the agent to report its prompt")
    wait_until(
        lambda: any(r.method == "PATCH" for r in target_server.requests),
        what="the activity update",
    )
    run.signal(signal.SIGTERM)
    assert run.wait(timeout=120) == 0, run.stderr

    calls = [(r.method, r.path) for r in target_server.requests]
    # The name holds a "/": it is encoded as one path segment, never a path of its own.
    assert calls == [
        ("POST", "/services"),
        ("PATCH", "/v1/services%2Fabc/activity"),
        ("DELETE", "/v1/services%2Fabc"),
    ]
    update = json.loads(target_server.requests[1].body)
    assert update == {"activity": "thinking", "registered": 201}


# -- the engine, one session at a time ----------------------------------------------------------


def _fire_all(yaml_text: str, *events: str) -> tuple[SessionInfo, list[str]]:
    """Fire `events` in order through blocking hooks; the session and each outcome."""
    engine = HookEngine(
        load_template_text(textwrap.dedent(yaml_text)), journal=False, hook_log=False
    )
    session = SessionInfo("session-1", {"AGENT_ID": "agent-1"})
    outcomes = []
    try:
        for event in events:
            outcomes += [e.outcome for e in engine.fire(event, session).executions]
    finally:
        engine.shutdown(5)
    return session, outcomes


def test_a_captured_value_is_rendered_safely_wherever_it_stands(
    target_server: TargetServer,
) -> None:
    hostile = 'a"b/../c?d#e'
    name = "${HOOK_REGISTER_RESPONSE.name}"
    target_server.on("/register", Reply.json(200, json.dumps({"name": hostile})))
    _, outcomes = _fire_all(
        f"""
        lifecycle_hooks:
          - name: register
            on: [post-start]
            blocking: true
            action: {{type: http, url: "{target_server.url("/register")}"}}
          - name: use
            on: [post-start]
            blocking: true
            action:
              type: http
              url: "{target_server.url("/items")}/{name}?q={name}"
              body: '{{"name": "{name}", "whole": ${{HOOK_REGISTER_RESPONSE}}}}'
        """,
        "post-start",
    )
    assert outcomes == ["success", "success"]
    used = target_server.requests[1]
    assert used.path == "/items/a%22b%2F..%2Fc%3Fd%23e?q=a%22b%2F..%2Fc%3Fd%23e"
    assert json.loads(used.body) == {"name": hostile, "whole": json.dumps({"name": hostile})}


def test_a_captured_line_break_can_never_add_a_header(target_server: TargetServer) -> None:
    target_server.on("/register", Reply.json(200, '{"id": "x\\r\\nX-Injected: 1"}'))
    _, outcomes = _fire_all(
        f"""
        lifecycle_hooks:
          - name: register
            on: [post-start]
            blocking: true
            action: {{type: http, url: "{target_server.url("/register")}"}}
          - name: use
            on: [pre-stop]
            blocking: true
            action:
              type: http
              url: "{target_server.url("/use")}"
              headers: {{X-Service: "${{HOOK_REGISTER_RESPONSE.id}}"}}
        """,
        "post-start",
        "pre-stop",
    )
    assert outcomes == ["success", "refused"]
    assert [r.path for r in target_server.requests] == ["/register"]


def test_only_json_and_text_bodies_are_captured_and_the_status_always_is(
    target_server: TargetServer,
) -> None:
    target_server.on(
        "/binary", Reply(200, {"Content-Type": "application/octet-stream"}, b"\x00\x01")
    )
    target_server.on("/text", Reply(202, {"Content-Type": "text/plain; charset=utf-8"}, b"queued"))
    session, _ = _fire_all(
        f"""
        lifecycle_hooks:
          - name: binary
            on: [post-start]
            blocking: true
            action: {{type: http, url: "{target_server.url("/binary")}"}}
          - name: text
            on: [post-start]
            blocking: true
            action: {{type: http, url: "{target_server.url("/text")}"}}
        """,
        "post-start",
    )
    assert session.captured == {
        "HOOK_BINARY_STATUS": "200",
        "HOOK_TEXT_STATUS": "202",
        "HOOK_TEXT_RESPONSE": "queued",
    }


def test_a_captured_body_is_bounded(target_server: TargetServer) -> None:
    target_server.on("/big", Reply.huge(CAPTURE_LIMIT * 4, content_type="application/json"))
    session, outcomes = _fire_all(
        f"""
        lifecycle_hooks:
          - name: big
            on: [post-start]
            blocking: true
            action: {{type: http, url: "{target_server.url("/big")}"}}
        """,
        "post-start",
    )
    assert outcomes == ["success"]
    assert 0 < len(session.captured["HOOK_BIG_RESPONSE"]) <= CAPTURE_LIMIT


def test_a_failed_response_keeps_the_last_good_capture(target_server: TargetServer) -> None:
    target_server.on(
        "/lease", Reply.json(200, '{"lease": "one"}'), Reply.json(409, '{"lease": "x"}')
    )
    release = target_server.url("/release")
    _, outcomes = _fire_all(
        f"""
        lifecycle_hooks:
          - name: lease
            on: [activity-change]
            blocking: true
            action: {{type: http, url: "{target_server.url("/lease")}"}}
          - name: release
            on: [pre-stop]
            blocking: true
            action:
              type: http
              url: "{release}/${{HOOK_LEASE_RESPONSE.lease}}/${{HOOK_LEASE_STATUS}}"
        """,
        "activity-change",
        "activity-change",
        "pre-stop",
    )
    assert outcomes == ["success", "failed", "success"]
    assert target_server.requests[-1].path == "/release/one/200"


# -- validation warns about captures that will be empty --------------------------------------


WARNED = """\
lifecycle_hooks:
  - name: early
    on: [pre-start]
    action: {type: http, url: "http://127.0.0.1:9/${HOOK_REGISTER_AGENT_RESPONSE.name}"}
  - name: register-agent
    on: [post-start]
    action: {type: http, url: "http://127.0.0.1:9/register"}
  - name: same-time
    on: [post-start]
    blocking: true
    action: {type: http, url: "http://127.0.0.1:9/x", body: "${HOOK_REGISTER_AGENT_STATUS}"}
  - name: typo
    on: [activity-change]
    condition: HOOK_REGISTR_AGENT_STATUS == 200
    action: {type: script, command: ["true"], env: {AUDIT: "${HOOK_AUDIT_RESPONSE}"}}
  - name: audit
    on: [task-completed]
    action: {type: script, command: ["true"]}
  - name: fine
    on: [activity-change, pre-stop]
    action: {type: http, url: "http://127.0.0.1:9/${HOOK_REGISTER_AGENT_RESPONSE.name}"}
"""


def test_validation_warns_about_captures_of_later_or_missing_hooks() -> None:
    warnings = [str(w) for w in capture_warnings(load_template_text(WARNED))]
    assert warnings == [
        (
            'scion-agent.yaml:4:31: hook "early": field "action.url": uses '
            '${HOOK_REGISTER_AGENT_RESPONSE}, which will be empty: hook "register-agent" runs '
            "only later (on post-start) than this hook (on pre-start)"
        ),
        (
            'scion-agent.yaml:11:61: hook "same-time": field "action.body": uses '
            '${HOOK_REGISTER_AGENT_STATUS}, which will be empty: hook "register-agent" runs on '
            "the same event without blocking: make it blocking: true so that its response is there"
        ),
        (
            'scion-agent.yaml:15:60: hook "typo": field "action.env.AUDIT": uses '
            '${HOOK_AUDIT_RESPONSE}, which will be empty: hook "audit" is a script; only HTTP '
            "hooks capture their response"
        ),
        (
            'scion-agent.yaml:14:16: hook "typo": field "condition": uses '
            "${HOOK_REGISTR_AGENT_STATUS}, which will be empty: no hook of this template captures "
            "it (a hook's captures are HOOK_<NAME>_RESPONSE and HOOK_<NAME>_STATUS, its name "
            "upper-cased, - as _)"
        ),
    ]


def test_validate_prints_the_warnings_and_still_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "scion-agent.yaml"
    template.write_text(WARNED)
    assert cli_main(["validate", str(template)]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()  # diagnostics on stderr, the result on stdout
    assert [line.split(": ")[0] for line in lines] == ["warning"] * 4
    assert captured.out.startswith("ok: 6 hooks")

    assert cli_main(["validate", "--json", str(template)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is True
    assert [w["hook"] for w in result["warnings"]] == ["early", "same-time", "typo", "typo"]
