"""The delivery history of a real `otel-lifecycle-hooks run`: a hook whose loopback endpoint
fails twice and then succeeds leaves one execution with three attempt rows, each with the
request as sent and the response, readable with `history` and `history show`."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.journal import AttemptRow, ExecutionRow, Journal
from tests.supervisor.supervised import Workspace
from tests.support.target_server import Reply, TargetServer

FLAKY_HOOK = """\
  - name: notify
    on: [post-start]
    blocking: true
    on_error: retry
    action:
      type: http
      method: POST
      url: "{url}"
      headers: {{Content-Type: application/json}}
      body: '{{"agent": "${{AGENT_NAME}}", "event": "${{EVENT}}"}}'
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    space = Workspace(tmp_path)
    yield space
    space.cleanup()


def history(workspace: Workspace, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "history", *argv],
        env={**workspace.env, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def run_the_flaky_hook(workspace: Workspace, server: TargetServer, **env: str) -> None:
    server.on(
        "/notify",
        Reply(503, {"Content-Type": "text/plain", "Retry-After": "1"}, b"busy, try later"),
        Reply(503, {"Content-Type": "text/plain"}, b"still busy"),
        Reply.json(201, '{"received": true}'),
    )
    template = workspace.template(FLAKY_HOOK.format(url=server.url("/notify")))
    run = workspace.start(template, workspace.agent_command(exit=0), env=env)
    assert run.wait(timeout=60) == 0, run.stderr
    assert [r.path for r in server.requests] == ["/notify"] * 3


def check_the_three_attempts(shown: dict[str, Any], server: TargetServer) -> None:
    assert (shown["hook"], shown["event"], shown["outcome"], shown["attempt_count"]) == (
        "notify", "post-start", "success", 3,
    )  # fmt: skip
    assert shown["agent_id"] and shown["session_id"] and shown["agent_name"] == "test-agent"
    attempts = shown["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    assert [(a["outcome"], a["response_status"]) for a in attempts] == [
        ("failed", 503), ("failed", 503), ("success", 201),
    ]  # fmt: skip
    assert [a["response_body"] for a in attempts] == [
        "busy, try later", "still busy", '{"received": true}',
    ]  # fmt: skip
    assert ["retry-after", "1"] in [[n.lower(), v] for n, v in attempts[0]["response_headers"]]
    assert [a["error_type"] for a in attempts] == ["http.503", "http.503", None]
    for attempt, received in zip(attempts, server.requests, strict=False):
        request = attempt["request"]
        assert (request["method"], request["url"]) == ("POST", server.url("/notify"))
        assert json.loads(request["body"]) == {"agent": "test-agent", "event": "post-start"}
        sent = {name.lower(): value for name, value in request["headers"]}
        # The headers as they went: the same hook id every time, each attempt's traceparent.
        assert sent["x-scion-hook-id"] == received.headers["x-scion-hook-id"]
        assert sent["traceparent"] == received.headers["traceparent"]
    assert attempts[1]["started_at"] - attempts[0]["started_at"] >= 0.9  # the 1s wait
    assert attempts[2]["started_at"] - attempts[1]["started_at"] >= 1.9  # then 2s


def test_a_supervised_run_journals_every_attempt_with_its_response(
    workspace: Workspace, target_server: TargetServer
) -> None:
    run_the_flaky_hook(workspace, target_server)

    listed = history(workspace)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()[:2]
    assert header.split()[:4] == ["ID", "STARTED", "AGENT", "SESSION"]
    assert row.split()[3:9] == [
        "test-agent",
        row.split()[4],
        "notify",
        "post-start",
        "success",
        "3",
    ]

    execution_id = row.split()[0]
    shown = history(workspace, "show", execution_id, "--json")
    assert shown.returncode == 0, shown.stderr
    check_the_three_attempts(json.loads(shown.stdout), target_server)

    text = history(workspace, "show", execution_id).stdout
    assert text.count("< HTTP 503") == 2 and "< HTTP 201" in text and "< still busy" in text
    assert text.count("> POST " + target_server.url("/notify")) == 3

    assert history(workspace, "--session", row.split()[4]).stdout.count("notify") == 1
    missing = history(workspace, "show", "999")
    assert missing.returncode == 1 and "no execution 999" in missing.stderr


def test_the_supervisor_applies_the_journal_retention_when_it_starts(
    workspace: Workspace, target_server: TargetServer
) -> None:
    journal = Journal(workspace.journal)
    old_ids = [
        journal.record_execution(
            ExecutionRow("old", "tool-start", "success", time.time() - 600 + n),
            [AttemptRow(attempt=1, started_at=time.time() - 600 + n, outcome="success")],
        )
        for n in range(5)
    ]
    journal.close()

    run_the_flaky_hook(workspace, target_server, LIFECYCLE_HOOKS_JOURNAL_RETENTION="3rows")

    with closing(sqlite3.connect(workspace.journal)) as db:
        kept = [row[0] for row in db.execute("SELECT hook FROM executions ORDER BY id")]
        ids = {row[0] for row in db.execute("SELECT id FROM executions")}
        orphans = db.execute(
            "SELECT count(*) FROM attempts WHERE execution_uid NOT IN"
            " (SELECT row_uid FROM executions WHERE row_uid IS NOT NULL)"
        ).fetchone()[0]
    assert not ids & set(old_ids[:2])  # the oldest went, with their attempts
    assert orphans == 0
    assert kept[-1] == "notify" and len(kept) <= 4
