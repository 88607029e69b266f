"""A hostile agent that can write the journal file rewrites a failed delivery's stored request,
then waits for the operator to `replay` it: the credential must still go only where the
template names, with the template's method and header names, never the journal's.

Deliveries are made by a real engine against a real loopback endpoint; the journal is then
edited with SQLite as the agent would; `replay` runs as the command line, naming the operator's
template (test_replay_trusts_operator_templates.py: the one the journal names is never loaded)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.test_reliability_replay import cli, deliver, rows, write_template
from tests.support.target_server import Reply, TargetServer

TOKEN = "tok-5be1c0a9d3f27e64"


def replay(capsys: pytest.CaptureFixture[str], journal: Path, *argv: str) -> tuple[int, str, str]:
    """`replay ARGV...` with the operator's template (the one beside the journal) named."""
    template = journal.with_name("scion-agent.yaml")
    return cli(capsys, "replay", *argv, "--journal", str(journal), "--template", str(template))


def tamper(journal: Path, execution_id: int, change: Any) -> None:
    """Rewrite one row's stored request, as an agent with write access to the file can."""
    with sqlite3.connect(journal) as db:
        (text,) = db.execute(
            "SELECT request FROM executions WHERE id = ?", (execution_id,)
        ).fetchone()
        request = json.loads(text)
        change(request)
        db.execute(
            "UPDATE executions SET request = ? WHERE id = ?", (json.dumps(request), execution_id)
        )


@pytest.fixture
def failed_bearer_delivery(
    tmp_path: Path, target: TargetServer, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, int]:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(
        tmp_path,
        f"""
        - name: notify
          on: [task-completed]
          action:
            type: http
            method: POST
            url: "{target.url("/notify")}"
            auth: {{type: bearer-token, token_env: NOTIFY_TOKEN}}
            headers:
              X-Kind: report
            body: '{{"summary": "${{TASK_SUMMARY}}"}}'
        """,
    )
    target.on("/notify", Reply(503))
    deliver(template, journal, environ={"NOTIFY_TOKEN": TOKEN})
    target.wait_for(1)
    monkeypatch.setenv("NOTIFY_TOKEN", TOKEN)
    [failed] = rows(journal)
    assert failed.id is not None
    return journal, failed.id


def test_a_journaled_url_rewritten_to_another_host_never_receives_the_credential(
    failed_bearer_delivery: tuple[Path, int],
    target: TargetServer,
    attacker: TargetServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    journal, execution_id = failed_bearer_delivery

    def steer(request: dict[str, Any]) -> None:
        request["url"] = attacker.url("/steal")

    tamper(journal, execution_id, steer)
    code, out, err = replay(capsys, journal, str(execution_id))

    assert attacker.requests == []
    assert code != 0
    assert "refused" in out + err and "url" in out + err
    assert TOKEN not in out + err


def test_a_journaled_port_or_scheme_change_is_refused_as_well(
    failed_bearer_delivery: tuple[Path, int],
    target: TargetServer,
    attacker: TargetServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    journal, execution_id = failed_bearer_delivery
    other_port = attacker.url("/notify").rsplit(":", 1)[1]

    def steer(request: dict[str, Any]) -> None:
        request["url"] = request["url"].replace(
            request["url"].split("/")[2], "attacker@127.0.0.1:" + other_port.split("/")[0]
        )

    tamper(journal, execution_id, steer)
    code, _, _ = replay(capsys, journal, str(execution_id))
    assert code != 0
    assert attacker.requests == [] and len(target.requests) == 1


def test_agent_written_headers_and_method_are_not_sent_with_the_credential(
    failed_bearer_delivery: tuple[Path, int],
    target: TargetServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    journal, execution_id = failed_bearer_delivery

    def add_headers(request: dict[str, Any]) -> None:
        request["method"] = "DELETE"
        request["headers"]["X-Forwarded-Host"] = "attacker.example"
        request["headers"]["X-Kind"] = "agent-chosen"

    tamper(journal, execution_id, add_headers)
    code, out, err = replay(capsys, journal, str(execution_id))

    sent = target.requests[1:]
    assert all(r.method == "POST" for r in sent)
    assert all("x-forwarded-host" not in r.headers for r in sent)
    assert all(r.headers.get("x-kind") == "report" for r in sent)
    if not sent:
        assert code != 0 and "refused" in out + err


def test_a_row_renamed_to_another_hook_is_sent_only_where_that_hook_points(
    tmp_path: Path,
    target: TargetServer,
    attacker: TargetServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plain hook's row (to the attacker's own endpoint, which the operator allowed for
    an uncredentialed notice) relabelled as the credentialed hook."""
    journal = tmp_path / "journal.sqlite3"
    template = write_template(
        tmp_path,
        f"""
        - name: notify
          on: [task-completed]
          action:
            type: http
            url: "{target.url("/notify")}"
            auth: {{type: bearer-token, token_env: NOTIFY_TOKEN}}
        - name: public
          on: [task-completed]
          action:
            type: http
            url: "{attacker.url("/public")}"
        """,
    )
    target.on("/notify", Reply(503))
    attacker.on("/public", Reply(503))
    deliver(template, journal, environ={"NOTIFY_TOKEN": TOKEN})
    monkeypatch.setenv("NOTIFY_TOKEN", TOKEN)
    public = next(r for r in rows(journal) if r.hook == "public")
    with sqlite3.connect(journal) as db:
        db.execute("UPDATE executions SET hook = 'notify' WHERE id = ?", (public.id,))
    before = len(attacker.requests)
    replay(capsys, journal, str(public.id))
    assert all("authorization" not in r.headers for r in attacker.requests[before:])
    assert len(attacker.requests) == before


def test_a_journaled_path_rewritten_on_the_right_host_does_not_get_the_credential(
    failed_bearer_delivery: tuple[Path, int],
    target: TargetServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    journal, execution_id = failed_bearer_delivery

    def to_admin(request: dict[str, Any]) -> None:
        request["url"] = request["url"].replace("/notify", "/admin/delete-everything")

    tamper(journal, execution_id, to_admin)
    code, out, err = replay(capsys, journal, str(execution_id))
    assert code != 0 and "url is not one its template makes" in out + err
    assert [r.path for r in target.requests] == ["/notify"]


SIGNED_HOOK = """
- name: approve
  on: [task-completed]
  action:
    type: webhook
    url: "{url}"
    signing_secret_env: SIGNING_SECRET
    body: '{{"summary": "${{TASK_SUMMARY}}", "approved": false}}'
"""


@pytest.fixture
def failed_signed_delivery(
    tmp_path: Path, target: TargetServer, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, int]:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(tmp_path, SIGNED_HOOK.format(url=target.url("/approve")))
    target.on("/approve", Reply(500))
    secret = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
    deliver(template, journal, environ={"SIGNING_SECRET": secret})
    target.wait_for(1)
    monkeypatch.setenv("SIGNING_SECRET", secret)
    [failed] = rows(journal)
    assert failed.id is not None
    return journal, failed.id


def test_a_rewritten_body_never_gets_a_valid_signature(
    failed_signed_delivery: tuple[Path, int],
    target: TargetServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    journal, execution_id = failed_signed_delivery

    def approve(request: dict[str, Any]) -> None:
        request["body"] = '{"summary": "", "approved": true}'

    tamper(journal, execution_id, approve)
    code, out, err = replay(capsys, journal, str(execution_id))
    assert code != 0 and "body is not one its template makes" in out + err
    assert len(target.requests) == 1


def test_a_value_that_tries_to_close_its_json_string_is_not_a_body_the_template_makes(
    failed_signed_delivery: tuple[Path, int],
    target: TargetServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    journal, execution_id = failed_signed_delivery

    def smuggle(request: dict[str, Any]) -> None:
        request["body"] = '{"summary": "x", "approved": true, "y": "", "approved": false}'

    tamper(journal, execution_id, smuggle)
    code, _, _ = replay(capsys, journal, str(execution_id))
    assert code != 0 and len(target.requests) == 1


def test_an_untampered_signed_delivery_with_an_agent_value_still_replays(
    failed_signed_delivery: tuple[Path, int],
    target: TargetServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    journal, execution_id = failed_signed_delivery
    target.on("/approve", Reply(200))

    def other_summary(request: dict[str, Any]) -> None:
        # The event's own value is not journaled separately: any text in its place replays.
        assert request["body"] == '{"summary": "wrote the report", "approved": false}'

    tamper(journal, execution_id, other_summary)
    code, out, err = replay(capsys, journal, str(execution_id))
    assert code == 0, out + err
    first, replayed = target.wait_for(2)
    assert replayed.body == first.body
    assert replayed.headers["webhook-signature"]


@pytest.mark.parametrize("body", ["[${TASK_SUMMARY}, false]", '["${TASK_SUMMARY}", false]'])
def test_a_journaled_value_in_or_out_of_a_json_string_cannot_add_an_element(
    body: str, tmp_path: Path, target: TargetServer, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(
        tmp_path,
        f"""
        - name: list
          on: [task-completed]
          action:
            type: webhook
            url: "{target.url("/list")}"
            body: '{body}'
        """,
    )
    target.on("/list", Reply(500))
    deliver(template, journal)
    [failed] = rows(journal)
    assert failed.id is not None
    assert failed.request["body"] == '["wrote the report", false]'

    def add_element(request: dict[str, Any]) -> None:
        request["body"] = '["", true, "", false]'

    tamper(journal, failed.id, add_element)
    code, _, _ = replay(capsys, journal, str(failed.id))
    assert code != 0 and len(target.requests) == 1
