"""One meaning of loopback: template validation, the credential guard and the HTTP client's
direct route agree on every host, and URL userinfo counts as a credential everywhere."""

from __future__ import annotations

import os

import pytest

from otel_lifecycle_hooks import loopback
from otel_lifecycle_hooks.actions import http
from otel_lifecycle_hooks.auth import AuthError, check_transport
from otel_lifecycle_hooks.engine.clock import FakeClock
from otel_lifecycle_hooks.template import validate
from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.model import AuthSpec
from otel_lifecycle_hooks.template.problems import TemplateError
from tests.support.target_server import Reply

HOSTS = [
    ("127.0.0.1", True),
    ("127.3.2.1", True),
    ("::1", True),
    ("[::1]", True),
    ("::ffff:127.0.0.1", True),
    ("[::ffff:127.0.0.1]", True),
    ("localhost", True),
    ("LocalHost", True),
    ("localhost.", False),  # the root-qualified name may go to DNS: not loopback
    ("127.hooks.example", False),  # a name that starts with 127 is a name
    ("localhost.example", False),
    ("127.1", False),  # not an address literal ipaddress accepts: never trusted as loopback
    ("::ffff:10.0.0.1", False),
    ("169.254.169.254", False),
    ("0.0.0.0", False),
    ("", False),
]


@pytest.mark.parametrize(("host", "expected"), HOSTS)
def test_validation_guard_and_client_share_one_definition(host: str, expected: bool) -> None:
    assert loopback.is_loopback_host(host) is expected
    assert validate._is_loopback(host) is expected
    assert http.is_loopback_host is loopback.is_loopback_host  # the client's direct route
    bracketed = f"[{host.strip('[]')}]" if ":" in host else host
    if not host:
        return
    url = f"http://{bracketed}:8080/hook"
    try:
        check_transport(url, AuthSpec(type="bearer", token_env="T"))
        allowed = True
    except AuthError:
        allowed = False
    assert allowed is expected


def template(url: str) -> str:
    return (
        "lifecycle_hooks:\n"
        "  - name: notify\n"
        "    on: [post-start]\n"
        f"    action: {{type: http, url: '{url}'}}\n"
    )


def test_validate_refuses_a_url_password_over_plain_http_off_loopback() -> None:
    with pytest.raises(TemplateError) as refused:
        load_template_text(template("http://hook:pw-9d1@registry.example/v1"))

    text = str(refused.value)
    assert "user name and password in the URL" in text
    assert "pw-9d1" not in text


@pytest.mark.parametrize(
    "url", ["https://hook:pw@registry.example/v1", "http://hook:pw@127.0.0.1:8080/v1"]
)
def test_a_url_password_is_allowed_over_https_or_to_loopback(url: str) -> None:
    load_template_text(template(url))


def test_the_guard_counts_userinfo_as_a_credential() -> None:
    with pytest.raises(AuthError) as refused:
        check_transport("http://hook:pw-9d1@registry.example/v1", AuthSpec(type="none"))

    assert "user name and password" in str(refused.value)
    assert "pw-9d1" not in str(refused.value)
    check_transport("http://hook:pw@[::1]:8080/v1", AuthSpec(type="none"))


def test_a_url_password_is_sent_as_basic_auth_and_redacted_from_journal_log_and_spans(
    tmp_path, target_server
) -> None:
    import json
    import sqlite3

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_lifecycle_hooks.engine import AgentSession, HookEngine

    password = "pw-5e0c2b"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    target_server.on("/hook", Reply(503), Reply(204))
    url = target_server.url("/hook").replace("http://", f"http://hook:{password}@")
    engine = HookEngine(
        load_template_text(template(url) + "    on_error: retry\n"),
        tracer_provider=provider,
        journal=tmp_path / "journal.db",
        hook_log=tmp_path / "agent.log",
        clock=FakeClock(),
    )
    session = AgentSession(engine, agent_name="agent-1", tracer_provider=provider)
    session.record("post-start", {})
    session.end()
    engine.shutdown(5)

    assert [r.headers["authorization"][:6] for r in target_server.requests] == ["Basic "] * 2
    journal = sqlite3.connect(tmp_path / "journal.db")
    rows = [json.dumps(row) for row in journal.execute("select * from executions")]
    journal.close()
    assert rows and all(password not in row for row in rows)
    assert any("/hook" in row for row in rows)  # the rows do hold the request's URL
    assert password not in (tmp_path / "agent.log").read_text()
    spans = [
        json.dumps(dict(s.attributes)) + json.dumps([dict(e.attributes) for e in s.events])
        for s in exporter.get_finished_spans()
    ]
    assert spans and all(password not in text for text in spans)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_bearer_token_for_a_loopback_hook_never_reaches_an_http_proxy(
    tmp_path, target_server, monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    from otel_lifecycle_hooks.engine import AgentSession, HookEngine
    from tests.actions.test_http_client import RawServer, keep_alive

    token = "tok-77aa10"
    proxy = RawServer(keep_alive)
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
    target_server.always("/hook", Reply(204))
    text = (template(target_server.url("/hook", host=host)) + "    blocking: true\n").replace(
        "action: {type: http, ",
        "action: {type: http, auth: {type: bearer-token, token_env: HUB_TOKEN}, ",
    )
    engine = HookEngine(
        load_template_text(text),
        environ={**os.environ, "HUB_TOKEN": token},
        journal=False,
        hook_log=False,
    )
    try:
        session = AgentSession(engine, agent_name="agent-1")
        result = session.record("post-start", {})
        session.end()
        engine.shutdown(5)
    finally:
        proxy.close()

    assert result.executions[0].outcome == "success", result.executions[0].message
    assert target_server.requests[0].headers["authorization"] == f"Bearer {token}"
    assert proxy.received == []
