"""`otel-lifecycle-hooks test`: the dry run shows the exact requests the seed's examples make."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.cli import dry_run as dry_run_command
from otel_lifecycle_hooks.cli.dry_run import EXAMPLE_METADATA, dry_run

EXAMPLES = Path(__file__).parent / "fixtures" / "seed_examples"
HOOK_DEFINITION = str(EXAMPLES / "scion-agent.yaml")
AGENT_REGISTRY = str(EXAMPLES / "agent-registry.yaml")
REGISTRY = "https://agentregistry.googleapis.com/v1alpha"
SLACK_URL = "https://hooks.slack.com/services/T0001/B0001/sEcReTpArT"
ENVIRON = {"GCP_PROJECT": "my-project", "GCP_REGION": "us-central1"}


def _run(
    *paths: str,
    event: str,
    sets: tuple[str, ...] = (),
    as_json: bool = True,
    environ: dict[str, str] | None = None,
) -> tuple[int, Any, str]:
    out, err = io.StringIO(), io.StringIO()
    code = dry_run(
        list(paths),
        event,
        list(sets),
        as_json=as_json,
        environ=ENVIRON if environ is None else environ,
        out=out,
        err=err,
    )
    text = out.getvalue()
    return code, (json.loads(text) if as_json and code in (0, 1) and text else text), err.getvalue()


def _write(tmp_path: Path, text: str, name: str = "scion-agent.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- the seed's examples -----------------------------------------------------------------


def test_post_start_registers_the_agent_with_its_metadata() -> None:
    code, hooks, _ = _run(HOOK_DEFINITION, event="post-start")
    assert code == 0
    assert [h["hook"] for h in hooks] == ["register-agent"]
    request = hooks[0]["request"]
    assert request["method"] == "POST"
    assert request["url"] == f"{REGISTRY}/projects/my-project/locations/us-central1/services"
    assert request["body"] == {
        "displayName": "example-agent",
        "description": "Scion agent: example-template",
        "labels": {"scion-grove": "example-grove", "scion-template": "example-template"},
    }
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["Authorization"] == (
        "[REDACTED] (gcp-default token, fetched at send time)"
    )


def test_every_request_shows_the_hook_id_header() -> None:
    code, hooks, _ = _run(
        HOOK_DEFINITION, event="post-start", sets=("TIMESTAMP=2026-05-01T12:00:00Z",)
    )
    assert code == 0
    assert hooks[0]["request"]["headers"]["X-Scion-Hook-ID"] == (
        f"{EXAMPLE_METADATA['AGENT_ID']}:register-agent:post-start:2026-05-01T12:00:00Z"
    )


def test_activity_change_patches_the_registry_with_the_new_activity() -> None:
    code, hooks, _ = _run(
        HOOK_DEFINITION,
        event="activity-change",
        sets=("ACTIVITY=waiting_for_input", "AGENT_SLUG=agent-7"),
    )
    assert code == 0
    assert [h["hook"] for h in hooks] == ["update-registry-status"]
    assert hooks[0]["debounce"] == 10.0
    request = hooks[0]["request"]
    assert request["method"] == "PATCH"
    assert request["url"] == (
        f"{REGISTRY}/projects/my-project/locations/us-central1/services/agent-7"
    )
    assert request["body"] == {
        "annotations": {"scion-activity": "waiting_for_input", "scion-phase": "running"}
    }


def test_pre_stop_deregisters_and_runs_the_cleanup_script_in_order() -> None:
    code, hooks, _ = _run(
        HOOK_DEFINITION,
        event="pre-stop",
        sets=("GCP_SERVICE_ACCOUNT=hooks@my-project.iam.gserviceaccount.com",),
    )
    # The seed's cleanup script lives in the agent's image, not here: rendered, and an error.
    assert code == 1
    assert [h["hook"] for h in hooks] == ["deregister-agent", "cleanup-credentials"]
    deregister, cleanup = hooks
    assert deregister["request"]["method"] == "DELETE"
    assert deregister["request"]["url"] == (
        f"{REGISTRY}/projects/my-project/locations/us-central1/services/example-agent"
    )
    assert deregister["request"]["body"] is None
    assert cleanup["command"] == {
        "argv": ["/usr/local/bin/revoke-sa-keys.sh"],
        "env": {"SERVICE_ACCOUNT": "hooks@my-project.iam.gserviceaccount.com"},
    }
    assert cleanup["blocking"] is True and cleanup["timeout"] == 30.0
    assert cleanup["status"] == "error"
    assert cleanup["reason"] == "the script /usr/local/bin/revoke-sa-keys.sh does not exist"


def test_session_end_posts_to_slack_without_showing_the_webhook_secret() -> None:
    code, hooks, _ = _run(
        HOOK_DEFINITION,
        event="session-end",
        sets=(f"SLACK_WEBHOOK_URL={SLACK_URL}", "EXIT_CODE=137"),
    )
    assert code == 0
    request = hooks[0]["request"]
    assert (hooks[0]["hook"], request["method"]) == ("notify-slack", "POST")
    assert request["url"] == "https://hooks.slack.com/[REDACTED]"
    assert request["body"] == {"text": "Agent example-agent session ended (exit: 137)"}
    assert "Authorization" not in request["headers"]  # webhooks carry no auth


def test_the_agent_registry_example_keeps_the_parent_path_and_the_metadata() -> None:
    code, hooks, _ = _run(
        AGENT_REGISTRY,
        event="post-start",
        environ={},
        sets=("AGENT_SLUG=my-agent", "GROVE_NAME=my-grove"),
    )
    assert code == 0
    (hook,) = hooks
    assert (hook["hook"], hook["on_error"], hook["blocking"]) == (
        "register-with-agent-registry",
        "retry",
        True,
    )
    request = hook["request"]
    assert request["url"] == (f"{REGISTRY}/projects/my-project/locations/us-central1/services")
    body = request["body"]
    assert body["serviceId"] == "my-agent"
    assert body["service"]["serviceEndpoint"] == {"uri": "scion://my-grove/my-agent"}
    assert body["service"]["labels"]["harness"] == "claude"  # from the template's harness:
    assert body["service"]["annotations"]["scion.dev/image"] == "scion-claude:latest"


def test_the_text_output_shows_method_url_headers_and_pretty_body() -> None:
    code, text, _ = _run(HOOK_DEFINITION, event="activity-change", as_json=False)
    assert code == 0
    assert (
        "  PATCH https://agentregistry.googleapis.com/v1alpha/projects/my-project/locations/"
        "us-central1/services/example-agent\n" in text
    )
    assert "  Authorization: [REDACTED] (gcp-default token, fetched at send time)\n" in text
    assert '        "scion-activity": "thinking",\n' in text
    assert "debounce 10s" in text


# --- secrets, warnings, conditions -------------------------------------------------------


SECRET_TEMPLATE = """\
secrets:
  - key: PARTNER_SECRET
lifecycle_hooks:
  - name: notify-monitoring
    on: [task-completed]
    action:
      type: http
      url: "https://monitoring.example.com/api/events?sig=${PARTNER_SECRET}"
      auth: bearer-token
      headers:
        Authorization: "Bearer ${MONITORING_BEARER_TOKEN}"
        X-Partner: "${PARTNER_SECRET}"
      body: '{"summary": "${TASK_SUMMARY}", "proof": "${PARTNER_SECRET}"}'
  - name: run-script
    on: [task-completed]
    action:
      type: script
      command: ["sh", "--key", "${PARTNER_SECRET}"]
      env:
        PARTNER: "${PARTNER_SECRET}"
"""


@pytest.mark.parametrize("as_json", [True, False])
def test_secrets_never_reach_the_output(tmp_path: Path, as_json: bool) -> None:
    path = _write(tmp_path, SECRET_TEMPLATE)
    secrets = ("MONITORING_BEARER_TOKEN=bearer-value-1234", "PARTNER_SECRET=partner-value-5678")
    code, output, err = _run(path, event="task-completed", sets=secrets, as_json=as_json)
    assert code == 0
    text = output if isinstance(output, str) else json.dumps(output)
    for secret in ("bearer-value-1234", "partner-value-5678"):
        assert secret not in text and secret not in err
    assert "[REDACTED]" in text
    assert "Example task summary" in text


def test_secret_headers_and_values_are_redacted_in_place(tmp_path: Path) -> None:
    path = _write(tmp_path, SECRET_TEMPLATE)
    _, hooks, _ = _run(
        path,
        event="task-completed",
        sets=("PARTNER_SECRET=partner-value-5678", "MONITORING_BEARER_TOKEN=tok-tok-tok"),
    )
    http, script = hooks
    assert http["request"]["headers"]["Authorization"] == "[REDACTED]"
    assert http["request"]["headers"]["X-Partner"] == "[REDACTED]"
    assert http["request"]["url"] == "https://monitoring.example.com/api/events?sig=[REDACTED]"
    assert http["request"]["body"] == {"summary": "Example task summary", "proof": "[REDACTED]"}
    assert script["command"] == {
        "argv": ["sh", "--key", "[REDACTED]"],
        "env": {"PARTNER": "[REDACTED]"},
    }


def test_an_api_key_header_is_announced_and_a_missing_key_warned_about(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
lifecycle_hooks:
  - name: audit
    on: [error]
    action:
      type: http
      url: "https://audit.example.com/events"
      auth: {type: api-key-header, token_env: AUDIT_KEY, header: X-Audit-Key}
      body: '{"error": "${ERROR_MESSAGE}"}'
""",
    )
    code, hooks, err = _run(path, event="error", environ={})
    assert code == 0
    assert hooks[0]["request"]["headers"]["X-Audit-Key"] == "[REDACTED] (API key from $AUDIT_KEY)"
    assert "$AUDIT_KEY is not set" in err


def test_unresolved_variables_are_warned_about_once_each(tmp_path: Path) -> None:
    code, _, err = _run(HOOK_DEFINITION, event="pre-stop", environ={})
    assert code == 1  # the seed's cleanup script is not on this machine
    assert "warning: ${GCP_PROJECT} is not set (used by deregister-agent)" in err
    assert "warning: ${GCP_SERVICE_ACCOUNT} is not set (used by cleanup-credentials)" in err
    assert err.count("${GCP_PROJECT}") == 1


def test_a_false_condition_shows_the_hook_as_skipped(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
lifecycle_hooks:
  - name: on-completion
    on: [activity-change]
    condition: "ACTIVITY == completed"
    action: {type: webhook, url: "https://hooks.example.com/x"}
""",
    )
    _, hooks, _ = _run(path, event="activity-change")
    assert hooks[0]["status"] == "skipped" and "ACTIVITY == completed" in hooks[0]["reason"]
    _, hooks, _ = _run(path, event="activity-change", sets=("ACTIVITY=completed",))
    assert hooks[0]["status"] == "would-run"


def test_agent_values_given_with_set_are_encoded_like_real_ones(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
lifecycle_hooks:
  - name: tool
    on: [tool-start]
    action: {type: http, method: GET, url: "https://api.example.com/tools/${TOOL_NAME}"}
""",
    )
    _, hooks, _ = _run(path, event="tool-start", sets=("TOOL_NAME=../a?b#c",))
    assert hooks[0]["request"]["url"] == "https://api.example.com/tools/..%2Fa%3Fb%23c"


# --- exit codes --------------------------------------------------------------------------


def test_a_hook_that_cannot_render_fails_the_dry_run() -> None:
    code, hooks, _ = _run(HOOK_DEFINITION, event="session-end", environ={})
    assert code == 1
    assert hooks[0]["status"] == "error"
    assert "absolute http(s) URL" in hooks[0]["reason"]


def test_an_unknown_event_exits_2_listing_the_valid_ones() -> None:
    code, _, err = _run(HOOK_DEFINITION, event="post-stat")
    assert code == 2
    assert "unknown event 'post-stat' (did you mean \"post-start\"?)" in err
    assert "post-start" in err and "tool-start" in err


def test_a_malformed_set_exits_2() -> None:
    code, _, err = _run(HOOK_DEFINITION, event="post-start", sets=("NO_EQUALS_SIGN",))
    assert code == 2 and "VAR=value" in err


def test_a_template_that_does_not_load_exits_1_with_its_errors(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
lifecycle_hooks:
  - name: x
    on: [post-start]
    action:
      type: carrier-pigeon
""",
    )
    code, _, err = _run(path, event="post-start")
    assert code == 1
    assert f"{path}:5:" in err and "carrier-pigeon" in err


def test_execute_exits_2_when_the_engine_cannot_be_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "otel_lifecycle_hooks.engine", None)
    out, err = io.StringIO(), io.StringIO()
    code = dry_run(
        [HOOK_DEFINITION], "post-start", [], execute=True, environ=ENVIRON, out=out, err=err
    )
    assert code == 2 and "--execute needs the hook engine" in err.getvalue()
    assert out.getvalue() == ""  # nothing claimed about requests


def test_the_parser_accepts_the_documented_options() -> None:
    parser = argparse.ArgumentParser()
    dry_run_command.add_parser(parser.add_subparsers())
    args = parser.parse_args(
        [
            "test",
            "a.yaml",
            "b.yaml",
            "--event",
            "pre-stop",
            "--set",
            "A=1",
            "--set",
            "B=x=y",
            "--json",
            "--execute",
        ]
    )
    assert (args.templates, args.event, args.assignments, args.json, args.execute) == (
        ["a.yaml", "b.yaml"],
        "pre-stop",
        ["A=1", "B=x=y"],
        True,
        True,
    )


def test_the_console_command_runs_end_to_end(tmp_path: Path) -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_lifecycle_hooks",
            "test",
            HOOK_DEFINITION,
            "--event",
            "pre-stop",
            "--set",
            "GCP_PROJECT=p1",
            "--set",
            "GCP_REGION=r1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    # 1: the seed's cleanup script is not on this machine (the preview is still printed).
    assert completed.returncode == 1, completed.stderr
    hooks = json.loads(completed.stdout)
    assert (
        hooks[0]["request"]["url"] == f"{REGISTRY}/projects/p1/locations/r1/services/example-agent"
    )


def test_execute_sends_for_real_and_reports_each_outcome(
    tmp_path: Path, target_server: Any
) -> None:
    from tests.support.target_server import Reply

    target_server.on("/ok/example-agent", Reply(201))
    target_server.on("/broken", Reply(500))
    template = tmp_path / "scion-agent.yaml"
    template.write_text(
        "lifecycle_hooks:\n"
        "  - name: register\n    on: [post-start]\n"
        "    action: {type: http, method: POST, "
        f'url: "{target_server.url("/ok")}/${{AGENT_SLUG}}"}}\n'
        "  - name: notify\n    on: [post-start]\n"
        f'    action: {{type: webhook, url: "{target_server.url("/broken")}"}}\n'
    )
    environ = {"HOME": str(tmp_path), "OTEL_LIFECYCLE_HOOKS_JOURNAL": str(tmp_path / "j.sqlite3")}
    out, err = io.StringIO(), io.StringIO()
    code = dry_run(
        [str(template)], "post-start", [], execute=True, environ=environ, out=out, err=err
    )
    # Both are non-blocking: they run side by side, in no fixed order.
    assert sorted((r.method, r.path) for r in target_server.requests) == [
        ("POST", "/broken"),
        ("POST", "/ok/example-agent"),
    ]
    assert "executed register: success" in err.getvalue()
    assert "executed notify: failed" in err.getvalue() and "http.500" in err.getvalue()
    assert code == 3


def test_an_event_variable_this_sample_lacks_is_a_note_not_a_warning(tmp_path: Path) -> None:
    # TOOL_NAME is documented for activity-change but set only while executing: the sample
    # change (not executing) leaves it empty, which is how the real event renders too.
    path = _write(
        tmp_path,
        """\
lifecycle_hooks:
  - name: activity
    on: [activity-change]
    action: {type: http, method: POST, url: "https://api.example.com/a", body: "${TOOL_NAME}"}
""",
    )
    code, _, err = _run(path, event="activity-change", sets=("ACTIVITY=idle",))
    assert code == 0
    assert "warning" not in err
    assert "note: ${TOOL_NAME} is empty in this sample of activity-change" in err
    assert "--set TOOL_NAME=" in err


def test_a_name_no_event_defines_still_warns(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
lifecycle_hooks:
  - name: activity
    on: [activity-change]
    action: {type: http, method: POST, url: "https://api.example.com/${UNSET_BASE_PATH}"}
""",
    )
    _, _, err = _run(path, event="activity-change", environ={})
    assert "warning: ${UNSET_BASE_PATH} is not set (used by activity)" in err
