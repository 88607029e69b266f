"""Loading templates: the seed's examples, defaults, `on:`, the other keys of scion-agent.yaml."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from otel_lifecycle_hooks.template.loader import load_template_text, load_templates
from otel_lifecycle_hooks.template.model import AuthSpec, Template
from otel_lifecycle_hooks.template.problems import TemplateError

FIXTURES = Path(__file__).parent / "fixtures"


def load(text: str) -> Template:
    return load_template_text(textwrap.dedent(text), "t.yaml")


def problems(text: str) -> list[str]:
    with pytest.raises(TemplateError) as caught:
        load_template_text(textwrap.dedent(text), "t.yaml")
    return [str(p) for p in caught.value.problems]


def test_seed_first_example_loads_with_its_bare_on_keys() -> None:
    path = FIXTURES / "scion-agent.yaml"
    assert "\n    on: [post-start]\n" in path.read_text()  # bare, as the seed writes it
    template = load_templates([path])
    assert [h.name for h in template.hooks] == [
        "register-agent",
        "deregister-agent",
        "update-registry-status",
        "notify-slack",
        "cleanup-credentials",
    ]
    register, deregister, status, slack, cleanup = template.hooks
    assert register.on == ("post-start",)
    assert register.action.method == "POST"
    assert register.action.headers == {"Content-Type": "application/json"}
    assert '"displayName": "${AGENT_NAME}"' in (register.action.body or "")
    assert register.action.auth == AuthSpec(type="gcp-default")
    assert (register.on_error, register.timeout, register.blocking) == ("log", 10.0, False)
    assert (deregister.action.method, deregister.timeout) == ("DELETE", 5.0)
    assert (status.on, status.debounce) == (("activity-change",), 10.0)
    assert (slack.action.type, slack.action.method, slack.action.url) == (
        "webhook",
        "POST",
        "${SLACK_WEBHOOK_URL}",
    )
    assert cleanup.action.command == ("/usr/local/bin/revoke-sa-keys.sh",)
    assert cleanup.action.env == {"SERVICE_ACCOUNT": "${GCP_SERVICE_ACCOUNT}"}
    assert (cleanup.timeout, cleanup.blocking) == (30.0, True)
    assert template.metadata == {"HARNESS_NAME": "claude", "IMAGE": "scion-claude:latest"}


def test_seed_agent_registry_example_loads_with_env_secrets_and_metadata() -> None:
    template = load_templates([FIXTURES / "agent-registry.yaml"])
    assert [h.name for h in template.hooks] == [
        "register-with-agent-registry",
        "update-registry-activity",
        "deregister-from-agent-registry",
    ]
    register = template.hooks[0]
    assert (register.on_error, register.timeout, register.blocking) == ("retry", 15.0, True)
    assert template.hooks[1].debounce == 15.0
    assert template.env == {
        "GCP_PROJECT": "my-project",
        "GCP_REGION": "us-central1",
        "AGENT_REGISTRY_PARENT": "projects/my-project/locations/us-central1",
    }
    assert template.secrets == {"GOOGLE_APPLICATION_CREDENTIALS"}
    assert template.metadata["HARNESS_CONFIG"] == "claude-web"
    assert template.files == (str(FIXTURES / "agent-registry.yaml"),)


def test_a_template_directory_reads_its_scion_agent_yaml(tmp_path: Path) -> None:
    (tmp_path / "scion-agent.yaml").write_text((FIXTURES / "scion-agent.yaml").read_text())
    template = load_templates([tmp_path])
    assert len(template.hooks) == 5
    assert template.files == (str(tmp_path / "scion-agent.yaml"),)


def test_the_seed_text_with_its_indentation_lost_is_refused_with_a_position_not_a_crash() -> None:
    flattened = "\n".join(
        line.strip() for line in (FIXTURES / "scion-agent.yaml").read_text().splitlines()
    )
    found = problems(flattened)
    assert len(found) == 1
    assert found[0].startswith("t.yaml:") and "invalid YAML" in found[0]


def test_quoted_on_reads_like_bare_on() -> None:
    template = load(
        """
        lifecycle_hooks:
          - name: quoted
            "on": post-start
            action: {type: webhook, url: "https://example.com/a"}
        """
    )
    assert template.hooks[0].on == ("post-start",)


def test_defaults_follow_the_seed() -> None:
    template = load(
        """
        lifecycle_hooks:
          - name: http-hook
            on: post-start
            action: {type: http, url: "https://example.com/a"}
          - name: script-hook
            on: [pre-stop, pre-stop]
            action: {type: script, command: [/bin/true]}
        """
    )
    http, script = template.hooks
    assert (http.action.method, http.timeout, http.on_error, http.blocking) == (
        "POST",
        10.0,
        "log",
        False,
    )
    assert (http.debounce, http.condition, http.enabled) == (None, None, True)
    assert http.action.auth.type == "none"
    assert script.timeout == 30.0
    assert script.on == ("pre-stop",)


def test_every_field_is_read() -> None:
    template = load(
        """
        lifecycle_hooks:
          - name: full
            on: [activity-change, phase-change]
            action:
              type: http
              method: patch
              url: "https://example.com/${AGENT_ID}"
              headers: {X-Count: 3, X-Flag: true}
              body: '{"a": "${ACTIVITY}"}'
              auth: {type: api-key-header, token_env: API_KEY, header: X-Key}
            on_error: fail
            timeout: 1m30s
            blocking: true
            debounce: 500ms
            condition: ACTIVITY == completed
            enabled: false
          - name: signed
            on: task-completed
            action:
              type: webhook
              url: "https://hooks.example.com/x"
              signing_secret_env: WEBHOOK_SECRET
        """
    )
    full, signed = template.hooks
    assert full.action.method == "PATCH"
    assert full.action.headers == {"X-Count": "3", "X-Flag": "true"}
    assert full.action.auth == AuthSpec(type="api-key-header", token_env="API_KEY", header="X-Key")
    assert (full.on_error, full.timeout, full.blocking, full.debounce) == ("fail", 90.0, True, 0.5)
    assert full.condition is not None and full.condition.source == "ACTIVITY == completed"
    assert full.enabled is False
    assert template.hooks_for("activity-change") == ()
    assert signed.action.signing_secret_env == "WEBHOOK_SECRET"


def test_auth_string_forms_and_header_written_token() -> None:
    template = load(
        """
        lifecycle_hooks:
          - name: monitoring
            on: [session-end]
            action:
              type: http
              url: "https://monitoring.internal/api/events"
              auth: bearer-token
              headers:
                Authorization: "Bearer ${MONITORING_BEARER_TOKEN}"
          - name: service-account
            on: [post-start]
            action:
              type: http
              url: "https://example.com"
              auth: {type: gcp-service-account, credentials_file: /secrets/sa.json}
        """
    )
    monitoring, service_account = template.hooks
    assert monitoring.action.auth.type == "bearer-token"
    assert monitoring.action.auth.token_env is None
    assert service_account.action.auth.credentials_file == "/secrets/sa.json"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://127.3.2.1/hook",
        "http://localhost/hook",
        "http://[::1]:9000/hook",
        "${REGISTRY_URL}/services",
        "http://${REGISTRY_HOST}/services",
    ],
)
def test_credentials_may_go_over_http_to_loopback_or_to_a_url_known_only_at_send_time(
    url: str,
) -> None:
    template = load(
        f"""
        lifecycle_hooks:
          - name: local
            on: [post-start]
            action:
              type: http
              url: "{url}"
              auth: {{type: bearer-token, token_env: TOKEN}}
        """
    )
    assert template.hooks[0].action.url == url


def test_http_without_credentials_may_use_plain_http() -> None:
    template = load(
        """
        lifecycle_hooks:
          - name: plain
            on: [post-start]
            action: {type: http, url: "http://example.com/a"}
        """
    )
    assert template.hooks[0].action.url == "http://example.com/a"


def test_other_keys_of_scion_agent_yaml_are_read_or_ignored_never_refused() -> None:
    template = load(
        """
        name: researcher
        harness: gemini
        image: scion-gemini:1
        default_harness_config: gemini-pro
        services:
          - name: mcp
            command: ["mcp-server"]
        mcp_servers: {anything: [goes, here]}
        env:
          PORT: 8080
          DEBUG: true
          EMPTY:
        secrets:
          - API_TOKEN
          - key: DB_PASSWORD
            type: env
        limits: {max_turns: 50, max_duration: 2h}
        user: scion
        """
    )
    assert template.hooks == ()
    assert template.env == {"PORT": "8080", "DEBUG": "true", "EMPTY": ""}
    assert template.secrets == {"API_TOKEN", "DB_PASSWORD"}
    assert template.metadata == {
        "TEMPLATE_NAME": "researcher",
        "HARNESS_NAME": "gemini",
        "IMAGE": "scion-gemini:1",
        "HARNESS_CONFIG": "gemini-pro",
    }
    assert template.limits == {"max_turns": "50", "max_duration": "2h"}
    assert template.user == "scion"


def test_a_file_holding_only_lifecycle_hooks_loads_and_an_empty_file_has_no_hooks() -> None:
    assert load("").hooks == ()
    assert load("lifecycle_hooks:\n").hooks == ()


def test_anchors_and_merge_keys_share_settings_between_hooks() -> None:
    template = load(
        """
        x-defaults: &defaults
          on_error: retry
          timeout: 5s
        lifecycle_hooks:
          - name: a
            <<: *defaults
            on: [post-start]
            action: &ping {type: webhook, url: "https://example.com/a"}
          - name: b
            <<: *defaults
            timeout: 7s
            on: [pre-stop]
            action: *ping
        """
    )
    a, b = template.hooks
    assert (a.on_error, a.timeout) == ("retry", 5.0)
    assert (b.on_error, b.timeout) == ("retry", 7.0)
    assert a.action == b.action


def test_a_missing_file_is_a_problem_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(TemplateError) as caught:
        load_templates([missing])
    assert str(caught.value) == f"{missing}: cannot read the file: No such file or directory"


def test_a_file_that_is_not_utf8_is_a_problem_at_the_bad_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"lifecycle_hooks: []\nname: caf\xe9\n")
    with pytest.raises(TemplateError) as caught:
        load_templates([path])
    assert str(caught.value) == f"{path}:2:10: is not UTF-8 text; save the template as UTF-8"


def test_a_byte_order_mark_is_dropped_and_bad_bytes_after_it_are_placed_in_the_file(
    tmp_path: Path,
) -> None:
    text = (
        "lifecycle_hooks:\n  - name: a\n    on: [post-start]\n"
        '    action: {type: script, command: ["true"]}\n'
    )
    plain, marked = tmp_path / "plain.yaml", tmp_path / "marked.yaml"
    plain.write_text(text, encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode())
    (from_marked,), (from_plain,) = load_templates([marked]).hooks, load_templates([plain]).hooks
    assert from_marked.action == from_plain.action
    assert from_marked.position == from_plain.position._replace(file=str(marked))
    bad = tmp_path / "marked-latin1.yaml"
    bad.write_bytes(b"\xef\xbb\xbflifecycle_hooks: []\nname: caf\xe9\n")
    with pytest.raises(TemplateError) as caught:
        load_templates([bad])
    assert str(caught.value) == f"{bad}:2:10: is not UTF-8 text; save the template as UTF-8"


def test_a_condition_error_points_inside_the_condition_string() -> None:
    found = problems(
        """
        lifecycle_hooks:
          - name: c
            on: [activity-change]
            action: {type: webhook, url: "https://example.com/a"}
            condition: ACTIVITY = completed
        """
    )
    assert len(found) == 1
    # `condition: ` starts at column 5; the value at 16; the bad "=" is 9 characters in.
    assert found[0].startswith('t.yaml:6:25: hook "c": field "condition": does not parse: ')


def test_nothing_half_loads_from_a_template_with_one_bad_hook() -> None:
    with pytest.raises(TemplateError):
        load(
            """
            lifecycle_hooks:
              - name: good
                on: [post-start]
                action: {type: webhook, url: "https://example.com/a"}
              - name: bad
                on: [post-start]
                action: {type: webhook}
            """
        )


def test_a_hook_repeated_through_an_alias_is_a_duplicate_name() -> None:
    found = problems(
        """
        lifecycle_hooks:
          - &hook {name: a, on: [post-start], action: {type: webhook, url: "https://x.example"}}
          - *hook
        """
    )
    (only,) = found
    assert only == (
        't.yaml:3:18: hook "a": field "name": duplicate: line 3, column 18 already names a hook '
        '"a"; names must be unique'
    )


def test_limits_values_are_checked_with_their_place_in_the_file() -> None:
    found = problems(
        """
        limits:
          max_duration: 3
          max_turns: abc
          max_model_calls: 0
          max_turn: 1
        """
    )
    assert found == [
        't.yaml:3:17: field "limits.max_duration": got 3 with no unit; write "3s" or "3ms"',
        't.yaml:4:14: field "limits.max_turns": got "abc"; write a whole number above 0, '
        "e.g. max_turns: 50",
        't.yaml:5:20: field "limits.max_model_calls": got the number 0; '
        "write a whole number above 0, e.g. max_model_calls: 50",
        't.yaml:6:3: field "limits.max_turn": unknown limit (did you mean "max_turns"?); '
        "the limits are max_turns, max_model_calls and max_duration",
    ]


def test_good_limits_load_as_written() -> None:
    template = load("limits: {max_turns: 5, max_model_calls: 20, max_duration: 1m30s}\n")
    assert template.limits == {"max_turns": "5", "max_model_calls": "20", "max_duration": "1m30s"}


def test_max_model_calls_is_refused_for_claude_code_which_reports_no_model_call() -> None:
    found = problems("harness: claude\nlimits:\n  max_model_calls: 10\n")
    assert found == [
        't.yaml:3:20: field "limits.max_model_calls": Claude Code reports no model call to '
        "its hooks, so this limit could never be reached; use max_turns or max_duration",
    ]
