"""The canary: every action type with every auth strategy that applies, through success,
failure and retry, with secrets that all carry one recognisable canary. The targets must
receive them (so they were really used), and the canary must appear nowhere else: not in
exported spans, metrics, the hook log, the journal's raw bytes, CLI output, execution messages
or log records."""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import standardwebhooks
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_lifecycle_hooks.cli.main import main as cli_main
from otel_lifecycle_hooks.engine import AgentSession, Execution, HookEngine
from otel_lifecycle_hooks.engine.clock import FakeClock
from otel_lifecycle_hooks.template.loader import load_templates
from tests.auth.conftest import KeyPair, write_service_account_key
from tests.auth.fake_token_endpoint import FakeTokenEndpoint
from tests.support.target_server import Reply, TargetServer

CANARY = "canary-7f3a9c-SECRET"
WEBHOOK_KEY = f"{CANARY}-whsec".encode()

# Where each hook sends, and how a careless server answers a failure: echoing what it got.
HTTP_PATHS = ("/plain", "/bearer", "/api-key", "/written-header", "/gcp", "/signed")
URL_PATH = f"/hooks/{CANARY}-url"

SCRIPT = """\
import os, sys
token = os.environ["API_TOKEN"]
open(sys.argv[2], "a").write(token + "\\n")
print("using token", token)
print("token on stderr:", token, file=sys.stderr)
sys.exit(1 if sys.argv[1] == "fail" else 0)
"""

TEMPLATE = """\
secrets:
  - key: SECRET_VALUE
  - key: SCRIPT_SECRET
lifecycle_hooks:
  - name: plain
    on: [post-start]
    blocking: true
    on_error: retry
    action:
      type: http
      url: "{base}/plain"
      body: '{{"key": "${{SECRET_VALUE}}", "event": "${{EVENT}}"}}'
  - name: bearer
    on: [post-start]
    blocking: true
    on_error: retry
    action:
      type: http
      url: "{base}/bearer"
      auth: {{type: bearer-token, token_env: HOOK_TOKEN}}
  - name: api-key
    on: [post-start]
    blocking: true
    on_error: retry
    action:
      type: http
      method: PUT
      url: "{base}/api-key"
      auth: {{type: api-key-header, token_env: HOOK_API_KEY}}
  - name: written-header
    on: [post-start]
    blocking: true
    on_error: retry
    action:
      type: http
      url: "{base}/written-header"
      headers: {{Authorization: "Bearer ${{HEADER_TOKEN}}"}}
  - name: gcp
    on: [post-start]
    blocking: true
    on_error: retry
    action:
      type: http
      url: "{base}/gcp"
      auth: {{type: gcp-service-account, credentials_file: "{key_file}"}}
  - name: signed
    on: [post-start]
    blocking: true
    on_error: retry
    action:
      type: webhook
      url: "{base}/signed"
      signing_secret_env: WEBHOOK_SECRET
      body: '{{"event": "${{EVENT}}"}}'
  - name: webhook-url
    on: [post-start]
    blocking: true
    on_error: retry
    action:
      type: webhook
      url: "${{NOTIFY_WEBHOOK_URL}}"
      body: '{{"text": "agent started"}}'
  - name: script
    on: [post-start]
    blocking: true
    on_error: retry
    action:
      type: script
      command: {command}
      env: {{API_TOKEN: "${{SCRIPT_SECRET}}"}}
"""


@dataclass
class Canary:
    """Everything that was run, and every place a secret could have ended up."""

    root: Path
    template: Path
    server: TargetServer
    token_endpoint: FakeTokenEndpoint
    secrets: dict[str, str]
    script_saw: Path
    spans: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    metrics: InMemoryMetricReader = field(default_factory=InMemoryMetricReader)
    executions: list[Execution] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    @property
    def journal(self) -> Path:
        return self.root / "journal.sqlite3"

    @property
    def hook_log(self) -> Path:
        return self.root / "agent.log"

    def forbidden(self) -> list[str]:
        """The canary, and secrets that cannot carry it (GCP tokens, the whsec_ string)."""
        return [CANARY, self.secrets["WEBHOOK_SECRET"], *self.token_endpoint.issued]

    def run(self, scenario: str) -> None:
        """One engine, one session, every hook once on post-start."""
        engine = HookEngine(
            load_templates([self.template]),
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            environ={**os.environ, **self.secrets},
            clock=FakeClock(wall_start=time.time()),  # retry delays pass at once; attempts are real
            journal=self.journal,
            hook_log=self.hook_log,
        )
        session = AgentSession(
            engine, agent_name="canary-agent", tracer_provider=self.tracer_provider
        )
        result = session.record("post-start", {"MODE": "fail" if scenario == "failure" else "ok"})
        self.executions += result.executions
        session.end()
        engine.shutdown(10)


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Canary]:
    for name in (
        "GOOGLE_APPLICATION_CREDENTIALS",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    key_pair = KeyPair()
    with (
        TargetServer() as server,
        FakeTokenEndpoint(public_key_pem=key_pair.public_pem) as endpoint,
    ):
        key_file = write_service_account_key(tmp_path / "sa.json", key_pair, endpoint.url)
        script_saw = tmp_path / "script-saw.txt"
        command = [sys.executable, "-c", SCRIPT, "${MODE}", str(script_saw)]
        template = tmp_path / "scion-agent.yaml"
        template.write_text(
            TEMPLATE.format(base=server.url(""), key_file=key_file, command=json.dumps(command))
        )
        secrets = {
            "SECRET_VALUE": f"{CANARY}-body",
            "HOOK_TOKEN": f"{CANARY}-bearer",
            "HOOK_API_KEY": f"{CANARY}-apikey",
            "HEADER_TOKEN": f"{CANARY}-header",
            "NOTIFY_WEBHOOK_URL": server.url(URL_PATH),
            "WEBHOOK_SECRET": "whsec_" + base64.b64encode(WEBHOOK_KEY).decode(),
            "SCRIPT_SECRET": f"{CANARY}-script",
        }
        canary = Canary(tmp_path, template, server, endpoint, secrets, script_saw)
        yield canary
        canary.tracer_provider.shutdown()
        canary.meter_provider.shutdown()


def _queue_replies(server: TargetServer, *replies: Reply) -> None:
    for path in (*HTTP_PATHS, URL_PATH):
        server.on(path, *replies)


def _log_text(records: list[logging.LogRecord]) -> str:
    parts = []
    for record in records:
        parts.append(record.getMessage())
        if record.exc_info:
            parts.extend(traceback.format_exception(*record.exc_info))
        if record.exc_text:
            parts.append(record.exc_text)
    return "\n".join(parts)


def _journal_bytes(journal: Path) -> bytes:
    files = [
        journal,
        journal.with_name(journal.name + "-wal"),
        journal.with_name(journal.name + "-shm"),
    ]
    return b"".join(path.read_bytes() for path in files if path.exists())


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    cli_main(argv)  # exit codes vary (a failing hook under --execute); the output is what counts
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_no_secret_leaves_through_spans_metrics_logs_journal_or_cli(
    canary: Canary,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    server = canary.server

    _queue_replies(server, Reply(200))
    canary.run("success")
    _queue_replies(server, Reply.json(403, json.dumps({"error": "denied", "echo": canary.secrets})))
    canary.run("failure")
    _queue_replies(server, Reply(503, {"Retry-After": "1"}), Reply(204))
    canary.run("retry")

    # -- it was all real: every secret reached its target --------------------------------------
    outcomes = [(e.hook.name, e.outcome, e.attempts) for e in canary.executions]
    hooks = [
        "plain",
        "bearer",
        "api-key",
        "written-header",
        "gcp",
        "signed",
        "webhook-url",
        "script",
    ]
    assert (
        outcomes
        == (
            [(name, "success", 1) for name in hooks]
            + [(name, "failed", 1) for name in hooks[:-1]]
            + [("script", "failed", 4)]  # a failing script is retried under on_error: retry
            + [(name, "success", 2) for name in hooks[:-1]]
            + [("script", "success", 1)]
        )
    )
    by_path: dict[str, list] = {}
    for request in server.requests:
        by_path.setdefault(request.path, []).append(request)
    assert all(len(by_path[path]) == 4 for path in (*HTTP_PATHS, URL_PATH))  # 1 + 1 + 2
    secrets = canary.secrets
    for request in by_path["/plain"]:
        assert json.loads(request.body)["key"] == secrets["SECRET_VALUE"]
    assert {r.headers["authorization"] for r in by_path["/bearer"]} == {
        f"Bearer {secrets['HOOK_TOKEN']}"
    }
    assert {r.headers["x-api-key"] for r in by_path["/api-key"]} == {secrets["HOOK_API_KEY"]}
    assert {r.headers["authorization"] for r in by_path["/written-header"]} == {
        f"Bearer {secrets['HEADER_TOKEN']}"
    }
    issued = canary.token_endpoint.issued
    assert issued and {r.headers["authorization"] for r in by_path["/gcp"]} <= {
        f"Bearer {t}" for t in issued
    }
    verifier = standardwebhooks.Webhook(secrets["WEBHOOK_SECRET"])
    for request in by_path["/signed"]:
        assert "authorization" not in request.headers
        verifier.verify(request.body, dict(request.headers))  # raises on a bad signature
    # success once, failure 4 times (retried), retry once
    assert canary.script_saw.read_text().splitlines() == [secrets["SCRIPT_SECRET"]] * 6

    # -- and went nowhere else ------------------------------------------------------------------
    places: dict[str, str] = {}
    spans = canary.spans.get_finished_spans()
    assert "invoke_agent canary-agent" in {s.name for s in spans}
    assert any(s.name.startswith("agent.lifecycle_hook ") for s in spans)
    places["spans"] = "\n".join(span.to_json() for span in spans)
    metrics = canary.metrics.get_metrics_data()
    assert metrics is not None
    places["metrics"] = metrics.to_json()
    places["hook log"] = canary.hook_log.read_text(errors="replace")
    places["journal"] = _journal_bytes(canary.journal).decode("latin-1")
    places["executions"] = "\n".join(
        f"{e.message} {e.error_type} {json.dumps(e.request, default=str)}"
        for e in canary.executions
    )
    places["log records"] = _log_text(caplog.records)

    for name, value in secrets.items():
        monkeypatch.setenv(name, value)  # the CLI reads them as the supervisor would
    monkeypatch.setenv("OTEL_LIFECYCLE_HOOKS_JOURNAL", str(canary.journal))
    template = str(canary.template)
    places["cli test"] = _cli(
        ["test", template, "--event", "post-start", "--set", "MODE=ok"], capsys
    )
    places["cli test --json"] = _cli(["test", template, "--event", "post-start", "--json"], capsys)
    places["cli list"] = _cli(["list", template, "--journal", str(canary.journal)], capsys)
    places["cli list --json"] = _cli(
        ["list", template, "--json", "--journal", str(canary.journal)], capsys
    )
    places["cli history"] = _cli(["history", "--journal", str(canary.journal)], capsys)
    places["cli history --json"] = _cli(
        ["history", "--json", "--journal", str(canary.journal)], capsys
    )
    _queue_replies(server, Reply.json(401, json.dumps({"echo": secrets})))
    places["cli test --execute"] = _cli(
        ["test", template, "--event", "post-start", "--set", "MODE=fail", "--execute"], capsys
    )
    places["log records"] += _log_text(caplog.records)

    # The places were really written: an empty sink would pass vacuously.
    assert all(text.strip() for text in places.values()), [
        k for k, v in places.items() if not v.strip()
    ]
    assert "plain" in places["cli history"] and "written-header" in places["cli list"]
    assert "token_env" in places["cli test"] or "bearer" in places["cli test"]

    leaks = [
        (place, text[max(0, at - 60) : at + 40])
        for place, text in places.items()
        for secret in canary.forbidden()
        if (at := text.find(secret)) >= 0
    ]
    assert leaks == [], "\n".join(f"{place}: ...{context}..." for place, context in leaks)


# -- what the agent echoes, in every encoding rendering gives it -------------------------------

# A secret with what URL, form and header encodings change: a space, reserved and non-ASCII.
ECHOED = f"{CANARY} é/+&=x"
# A webhook URL whose path is its credential (Mattermost's shape; Slack's is unit-tested in
# test_redact.py, since no test sends anywhere but loopback).
WEBHOOK_PATH = f"/hooks/{CANARY}-webhook-key"

ECHO_TEMPLATE = """\
secrets:
  - key: ECHOED_SECRET
lifecycle_hooks:
  - name: form
    on: [tool-end]
    blocking: true
    action:
      type: http
      url: "{base}/form?tool=${{TOOL_NAME}}"
      headers:
        Content-Type: application/x-www-form-urlencoded
        X-Note: "${{ASSISTANT_TEXT}}"
      body: "text=${{ASSISTANT_TEXT}}&error=${{ERROR_MESSAGE}}&key=${{ECHOED_SECRET}}"
  - name: webhook
    on: [tool-end]
    blocking: true
    action:
      type: webhook
      url: "{base}{webhook_path}"
      body: '{{"text": "${{TOOL_NAME}}"}}'
"""


def test_secrets_the_agent_echoes_in_every_encoding_and_webhook_paths_stay_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent reports a secret it saw, as the tool name, the error and its text: it reaches
    the target (the hook forwards what the agent said) and nothing else: not the session span's
    event attributes, the hook span, the hook log or the journal; in none of its forms (as is,
    form-encoded, percent-encoded with its non-ASCII characters, in a header). A webhook
    URL's path is its credential, and is redacted the same way."""
    caplog.set_level(logging.DEBUG)
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    with TargetServer() as server:
        template = tmp_path / "scion-agent.yaml"
        template.write_text(ECHO_TEMPLATE.format(base=server.url(""), webhook_path=WEBHOOK_PATH))
        engine = HookEngine(
            load_templates([template]),
            tracer_provider=tracer_provider,
            environ={**os.environ, "ECHOED_SECRET": ECHOED},
            journal=tmp_path / "journal.sqlite3",
            hook_log=tmp_path / "agent.log",
        )
        session = AgentSession(engine, agent_name="echo-agent", tracer_provider=tracer_provider)
        session.record(
            "tool-end",
            {
                "TOOL_NAME": ECHOED,
                "ERROR_MESSAGE": f"request failed with token {ECHOED}",
                "ASSISTANT_TEXT": f"I used {ECHOED} to log in",
            },
        )
        session.end()
        engine.shutdown(10)
        request, webhook = server.requests
    # It was real: the target got the agent's words, the secret in its form encoding.
    from urllib.parse import quote, quote_plus

    assert quote_plus(ECHOED) in request.body.decode()
    assert request.path == "/form?tool=" + quote(ECHOED, safe="")
    assert quote(ECHOED, safe="").lower() != request.headers["x-note"].lower()  # header form
    assert CANARY in request.headers["x-note"]

    places = {
        "spans": "\n".join(span.to_json() for span in spans.get_finished_spans()),
        "hook log": (tmp_path / "agent.log").read_text(errors="replace"),
        "journal": _journal_bytes(tmp_path / "journal.sqlite3").decode("latin-1"),
        "log records": _log_text(caplog.records),
    }
    session_span = next(s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent"))
    [event] = [e for e in session_span.events if e.name == "agent.lifecycle.tool_end"]
    assert event.attributes is not None
    assert event.attributes["gen_ai.tool.name"] == "[REDACTED]"
    assert event.attributes["agent.error.message"] == "request failed with token [REDACTED]"
    assert webhook.path == WEBHOOK_PATH
    assert f"{server.url('')}/hooks/[REDACTED]" in places["journal"]  # where it went is seen
    for place, text in places.items():
        assert CANARY not in text, f"the echoed secret or the webhook path leaked into {place}"
    tracer_provider.shutdown()
