"""Secrets never reach the delivery history: every attempt's stored request and response,
through the real engine to a real loopback endpoint that echoes what it received, and the
response an endpoint sends is bounded and stored as text whatever it holds."""

from __future__ import annotations

import json
import sqlite3
import textwrap
import threading
from collections.abc import Iterator
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from otel_lifecycle_hooks.engine import HookEngine, SessionInfo
from otel_lifecycle_hooks.engine.attempt_log import BODY_LIMIT
from otel_lifecycle_hooks.journal import Journal
from otel_lifecycle_hooks.journal.retention import Retention
from otel_lifecycle_hooks.journal.views import get_execution
from otel_lifecycle_hooks.template.loader import load_template_text

BEARER = "bearer-7f3a9c1e5d"
API_KEY = "apikey-5b8e2d7c4a"
SERVICE_SECRET = "svc-secret-9d4c7b2a1e"
URL_PASSWORD = "pw-literal-6e1f8a3c"
ISSUED_TOKEN = "issued-by-endpoint-3c9e7a"
SECRETS = (BEARER, API_KEY, SERVICE_SECRET, URL_PASSWORD)


class EchoServer:
    """A loopback endpoint that answers 503 twice, then 200, and each time echoes everything
    it was sent (path and query, every header, the body) in its response headers and body,
    with a token of its own in the JSON: an endpoint that repeats the request's secrets."""

    def __init__(self) -> None:
        self.calls = 0
        echo = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                echo.calls += 1
                payload = json.dumps(
                    {
                        "path": self.path,
                        "headers": dict(self.headers.items()),
                        "body": body.decode("utf-8", "replace"),
                        "session": {"token": ISSUED_TOKEN},
                    }
                ).encode()
                self.send_response(503 if echo.calls <= 2 else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Echo-Authorization", self.headers.get("Authorization", ""))
                self.send_header("X-Echo-Path", self.path)
                self.send_header("Set-Cookie", f"session={ISSUED_TOKEN}")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def echo_server() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.stop()


def fire(template_yaml: str, journal_path: Path, environ: dict[str, str]) -> None:
    engine = HookEngine(
        load_template_text(textwrap.dedent(template_yaml)),
        journal=journal_path,
        hook_log=False,
        environ=environ,
    )
    try:
        engine.fire("post-start", SessionInfo("session-1", {"AGENT_ID": "agent-1"}))
    finally:
        engine.shutdown(10)


def stored_text(journal_path: Path) -> str:
    """Every value of every row of every table, as one text."""
    with closing(sqlite3.connect(journal_path)) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return "\n".join(
            str(value)
            for table in tables
            for row in db.execute(f"SELECT * FROM {table}")
            for value in row
        )


def test_a_secret_in_a_header_userinfo_query_and_body_and_echoed_back_is_never_stored(
    echo_server: EchoServer, tmp_path: Path
) -> None:
    journal_path = tmp_path / "journal.sqlite3"
    host = echo_server.base.removeprefix("http://")
    fire(
        f"""
        lifecycle_hooks:
          - name: report
            on: [post-start]
            blocking: true
            on_error: retry
            action:
              type: http
              method: POST
              url: "http://deploy:{URL_PASSWORD}@{host}/hook?token=${{API_KEY}}&q=${{SERVICE_SECRET}}"
              headers:
                Content-Type: application/json
                X-Service: "${{SERVICE_SECRET}}"
                X-Api-Key: "${{API_KEY}}"
              body: '{{"secret": "${{SERVICE_SECRET}}", "agent": "${{AGENT_ID}}"}}'
              auth: {{type: bearer-token, token_env: HOOK_BEARER}}
        """,
        journal_path,
        {"HOOK_BEARER": BEARER, "API_KEY": API_KEY, "SERVICE_SECRET": SERVICE_SECRET},
    )
    assert echo_server.calls == 3  # two 503s, then a success: each echoed every secret

    text = stored_text(journal_path)
    for secret in (*SECRETS, ISSUED_TOKEN):
        for form in (secret, quote(secret, safe=""), json.dumps(secret)[1:-1]):
            assert form not in text, f"{form!r} reached the journal"

    journal = Journal(journal_path)
    try:
        (row,) = journal.executions()
        shown = get_execution(journal, row.id or 0, retention=Retention())
    finally:
        journal.close()
    assert shown is not None and shown["outcome"] == "success"
    attempts = shown["attempts"]
    assert [a["response_status"] for a in attempts] == [503, 503, 200]
    first = attempts[0]
    # Still readable: what was sent and what came back, secrets replaced where they stood.
    assert first["request"]["url"].startswith("http://[REDACTED]@127.0.0.1:")
    assert "token=[REDACTED]" in first["request"]["url"]
    sent = {name.lower(): value for name, value in first["request"]["headers"]}
    assert sent["authorization"] == sent["x-api-key"] == sent["x-service"] == "[REDACTED]"
    assert sent["x-scion-hook-id"].startswith("agent-1:report:post-start:")
    assert json.loads(first["request"]["body"]) == {"secret": "[REDACTED]", "agent": "agent-1"}
    answered = {name.lower(): value for name, value in first["response_headers"]}
    assert answered["x-echo-authorization"] == "[REDACTED]"  # a credential's name: whole
    assert answered["x-echo-path"] == "/hook?token=[REDACTED]&q=[REDACTED]"  # known values
    assert answered["set-cookie"] == "[REDACTED]"
    echoed = json.loads(first["response_body"])
    assert echoed["session"]["token"] == "[REDACTED]"
    assert echoed["headers"]["Authorization"] == "[REDACTED]"
    assert attempts[1]["started_at"] >= attempts[0]["started_at"] + 0.5  # the 1s retry wait


class HostileServer:
    """Answers one crafted response: `body` with `headers`, as raw bytes."""

    def __init__(self, body: bytes, headers: list[tuple[str, str]]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(500)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def one_attempt(url: str, tmp_path: Path) -> dict[str, Any]:
    journal_path = tmp_path / "journal.sqlite3"
    fire(
        f"""
        lifecycle_hooks:
          - name: report
            on: [post-start]
            blocking: true
            action: {{type: webhook, url: "{url}", body: '{{"a": 1}}'}}
        """,
        journal_path,
        {},
    )
    journal = Journal(journal_path)
    try:
        (row,) = journal.executions()
        shown = get_execution(journal, row.id or 0, retention=Retention())
    finally:
        journal.close()
    assert shown is not None
    (attempt,) = shown["attempts"]
    return attempt


def test_a_huge_response_with_nul_bytes_and_escapes_is_bounded_and_stored_as_text(
    tmp_path: Path,
) -> None:
    body = b"\x00\x1b[31mred\x1b[0m" + b"x" * 200_000
    server = HostileServer(body, [("Content-Type", "text/plain"), ("X-Many", "y" * 4000)] * 4)
    try:
        attempt = one_attempt(server.url, tmp_path)
    finally:
        server.stop()
    assert attempt["response_status"] == 500
    stored = attempt["response_body"]
    assert "\x00" not in stored and stored.startswith("\ufffd\x1b[31mred")
    assert stored.endswith(f"[truncated: the first {BODY_LIMIT} of more than 65536 bytes are kept]")
    assert len(stored.encode()) < BODY_LIMIT + 100
    headers = attempt["response_headers"]
    assert sum(len(n) + len(v) for n, v in headers) < 8 * 1024 + 100
    assert headers[-1][1].startswith("[truncated: headers past")


def test_json_nested_past_the_parsers_depth_is_still_journaled(tmp_path: Path) -> None:
    deep = b'{"a": ' * 8_000 + b"1" + b"}" * 8_000  # under the 64 KiB read: parsed
    server = HostileServer(deep, [("Content-Type", "application/json")])
    try:
        attempt = one_attempt(server.url, tmp_path)
    finally:
        server.stop()
    assert attempt["response_status"] == 500
    assert attempt["response_body"].startswith('{"a": {"a": ')
    assert "[truncated: the first" in attempt["response_body"]


def test_a_binary_response_is_described_not_stored(tmp_path: Path) -> None:
    server = HostileServer(bytes(range(256)) * 4, [("Content-Type", "application/octet-stream")])
    try:
        attempt = one_attempt(server.url, tmp_path)
    finally:
        server.stop()
    assert attempt["response_body"] == "[1024 bytes of application/octet-stream, not shown]"


def test_each_script_attempt_keeps_its_exit_code_and_the_tail_of_its_output(
    tmp_path: Path,
) -> None:
    journal_path = tmp_path / "journal.sqlite3"
    script = tmp_path / "flaky.sh"
    script.write_text(
        "#!/bin/sh\n"
        'n=$(cat "$0.count" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$0.count"\n'
        'i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done\n'
        'echo "token is $DEPLOY_TOKEN" >&2\n'
        '[ "$n" -ge 2 ]\n'
    )
    script.chmod(0o755)
    fire(
        f"""
        lifecycle_hooks:
          - name: deploy
            on: [post-start]
            blocking: true
            on_error: retry
            action:
              type: script
              command: ["{script}"]
              env: {{DEPLOY_TOKEN: "${{DEPLOY_TOKEN}}"}}
        """,
        journal_path,
        {"DEPLOY_TOKEN": "deploy-token-8c2f1a", "PATH": "/usr/bin:/bin"},
    )
    assert "deploy-token-8c2f1a" not in stored_text(journal_path)
    journal = Journal(journal_path)
    try:
        (row,) = journal.executions()
        shown = get_execution(journal, row.id or 0, retention=Retention())
    finally:
        journal.close()
    assert shown is not None
    first, second = shown["attempts"]
    assert (first["outcome"], first["exit_code"], first["error_type"]) == ("failed", 1, "exit.1")
    assert (second["outcome"], second["exit_code"]) == ("success", 0)
    assert first["request"] == {"argv": [str(script)]}
    assert first["stdout"].startswith("[...]") and first["stdout"].endswith("line 1999\n")
    assert len(first["stdout"].encode()) <= 4 * 1024 + 5
    assert first["stderr"] == "token is [REDACTED]\n"
