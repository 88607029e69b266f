"""Nothing lost: a failed delivery stays in the journal, and `replay` re-sends it with the same
idempotency key and records the outcome; secrets are never journaled, yet reach the target.

Deliveries are made by a real HookEngine against a real loopback server, into a real SQLite
journal; `history` and `replay` run as the command line (in-process, and once as a subprocess).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.cli.main import main
from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.engine.clock import FakeClock
from otel_lifecycle_hooks.journal import Journal
from otel_lifecycle_hooks.template.loader import load_templates
from tests.support.target_server import Reply, TargetServer

TOKEN = "tok-3f9a7c1e5b2d4a60"
API_SECRET = "sk-live-8d1f2e3c4b5a6978"
SIGNING_SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
AGENT_ID = "agent-7"


def write_template(directory: Path, hooks: str, extra: str = "") -> Path:
    path = directory / "scion-agent.yaml"
    path.write_text(
        textwrap.dedent(extra)
        + "lifecycle_hooks:\n"
        + textwrap.indent(textwrap.dedent(hooks), "  ")
    )
    return path


def deliver(
    template: Path,
    journal: Path,
    event: str = "task-completed",
    environ: dict[str, str] | None = None,
) -> None:
    """Fire `event` once through a real engine, recording into `journal` with a session row."""
    engine = HookEngine(
        load_templates([template]),
        clock=FakeClock(),
        journal=journal,
        hook_log=False,
        environ=environ or {},
    )
    session = AgentSession(engine, agent_name="replay-agent", metadata={"AGENT_ID": AGENT_ID})
    records = Journal(journal)
    records.open_session(
        session.session_id,
        agent_id=AGENT_ID,
        agent_name="replay-agent",
        template_files=[str(template)],
    )
    records.close()
    session.record(event, {"TASK_SUMMARY": "wrote the report"})
    session.end()
    engine.shutdown(5)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def rows(journal: Path) -> list[Any]:
    records = Journal(journal)
    try:
        return list(reversed(records.recent(limit=100)))
    finally:
        records.close()


PLAIN_HOOK = """
- name: report
  on: [task-completed]
  action:
    type: http
    method: POST
    url: "{url}"
    body: '{{"summary": "${{TASK_SUMMARY}}"}}'
  blocking: true
"""


def test_a_failed_delivery_is_journaled_and_replay_resends_it_with_the_same_key(
    tmp_path: Path,
    target_server: TargetServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(tmp_path, PLAIN_HOOK.format(url=target_server.url("/report")))
    target_server.on("/report", Reply(503))
    deliver(template, journal)
    [failed] = rows(journal)
    assert (failed.outcome, failed.http_status, failed.error_type) == ("failed", 503, "http.503")
    assert failed.request["body"] == '{"summary": "wrote the report"}'

    # The operator names the template: the one the journal names is only shown, never loaded.
    code, out, _ = cli(
        capsys, "replay", "--template", str(template), "--failed", "--journal", str(journal)
    )

    assert code == 0, out
    first, again = target_server.wait_for(2)
    assert (
        again.headers["x-scion-hook-id"]
        == first.headers["x-scion-hook-id"]
        == failed.idempotency_key
    )
    assert again.body == first.body == b'{"summary": "wrote the report"}'
    original, replayed = rows(journal)
    assert (replayed.outcome, replayed.http_status, replayed.replayed_from) == (
        "success",
        200,
        original.id,
    )
    assert replayed.idempotency_key == original.idempotency_key
    assert f"#{original.id} report/task-completed: success (http 200) -> #{replayed.id}" in out
    # Delivered now: a second --all-failed has nothing left, and the id itself is refused.
    assert cli(
        capsys, "replay", "--template", str(template), "--failed", "--journal", str(journal)
    )[:2] == (
        0,
        "nothing to replay\n",
    )
    code, out, _ = cli(
        capsys, "replay", "--template", str(template), str(original.id), "--journal", str(journal)
    )
    assert code == 1 and "already delivered" in out
    assert len(target_server.requests) == 2


def test_a_replay_that_fails_again_is_recorded_and_stays_replayable(
    tmp_path: Path, target_server: TargetServer, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(tmp_path, PLAIN_HOOK.format(url=target_server.url("/report")))
    target_server.on("/report", Reply(500), Reply(502), Reply(204))
    deliver(template, journal)

    code, out, _ = cli(
        capsys,
        "replay",
        "--template",
        str(template),
        "--failed",
        "--journal",
        str(journal),
        "--json",
    )
    assert code == 1
    [outcome] = json.loads(out)
    assert (outcome["outcome"], outcome["status_code"], outcome["error_type"]) == (
        "failed",
        502,
        "http.502",
    )

    code, out, _ = cli(
        capsys,
        "replay",
        "--template",
        str(template),
        "--failed",
        "--journal",
        str(journal),
        "--json",
    )
    assert code == 0 and json.loads(out)[0]["status_code"] == 204
    original, second, third = rows(journal)
    assert [r.outcome for r in (original, second, third)] == ["failed", "failed", "success"]
    assert second.replayed_from == third.replayed_from == original.id
    keys = {request.headers["x-scion-hook-id"] for request in target_server.requests}
    assert keys == {original.idempotency_key}


def test_a_bearer_token_is_never_journaled_yet_the_replay_carries_it(
    tmp_path: Path,
    target_server: TargetServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(
        tmp_path,
        f"""
        - name: notify
          on: [task-completed]
          action:
            type: http
            url: "{target_server.url("/notify")}"
            auth: {{type: bearer-token, token_env: NOTIFY_TOKEN}}
            headers:
              X-Api-Secret: "${{API_SECRET}}"
            body: '{{"summary": "${{TASK_SUMMARY}}", "sig": "${{API_SECRET}}"}}'
        """,
        extra="secrets:\n  - key: API_SECRET\n",
    )
    environ = {"NOTIFY_TOKEN": TOKEN, "API_SECRET": API_SECRET}
    target_server.on("/notify", Reply(503))
    deliver(template, journal, environ=environ)
    first = target_server.wait_for(1)[0]
    assert first.headers["authorization"] == f"Bearer {TOKEN}"
    assert first.headers["x-api-secret"] == API_SECRET

    stored = b"".join(p.read_bytes() for p in tmp_path.glob("journal.sqlite3*"))
    assert TOKEN.encode() not in stored and API_SECRET.encode() not in stored
    [failed] = rows(journal)
    assert failed.request["headers"]["X-Api-Secret"] == "[REDACTED]"
    assert '"sig": "[REDACTED]"' in failed.request["body"]

    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    code, out, _ = cli(
        capsys, "replay", "--template", str(template), str(failed.id), "--journal", str(journal)
    )

    assert code == 0, out
    replayed = target_server.wait_for(2)[1]
    assert replayed.headers["authorization"] == f"Bearer {TOKEN}"
    assert replayed.headers["x-api-secret"] == API_SECRET
    assert replayed.body == first.body
    assert replayed.headers["x-scion-hook-id"] == first.headers["x-scion-hook-id"]
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("journal.sqlite3*"))
    assert TOKEN.encode() not in stored and API_SECRET.encode() not in stored
    assert TOKEN not in out and API_SECRET not in out


def test_a_signed_webhook_replay_keeps_its_webhook_id_with_a_fresh_valid_signature(
    tmp_path: Path,
    target_server: TargetServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(
        tmp_path,
        f"""
        - name: signed
          on: [task-completed]
          action:
            type: webhook
            url: "{target_server.url("/signed")}"
            signing_secret_env: SIGNING_SECRET
            body: '{{"summary": "${{TASK_SUMMARY}}"}}'
        """,
    )
    target_server.on("/signed", Reply(500))
    deliver(template, journal, environ={"SIGNING_SECRET": SIGNING_SECRET})
    monkeypatch.setenv("SIGNING_SECRET", SIGNING_SECRET)

    code, out, _ = cli(
        capsys, "replay", "--template", str(template), "--failed", "--journal", str(journal)
    )

    assert code == 0, out
    first, replayed = target_server.wait_for(2)
    assert replayed.headers["webhook-id"] == first.headers["webhook-id"]
    key = base64.b64decode(SIGNING_SECRET.removeprefix("whsec_"))
    signed = (
        f"{replayed.headers['webhook-id']}.{replayed.headers['webhook-timestamp']}.".encode()
        + replayed.body
    )
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert replayed.headers["webhook-signature"] == f"v1,{expected}"


def test_without_a_named_template_replay_says_which_the_journal_names_and_sends_nothing(
    tmp_path: Path,
    target_server: TargetServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(
        tmp_path,
        f"""
        - name: notify
          on: [task-completed]
          action:
            type: http
            url: "{target_server.url("/notify")}"
            auth: {{type: bearer-token, token_env: NOTIFY_TOKEN}}
        """,
    )
    target_server.on("/notify", Reply(503))
    deliver(template, journal, environ={"NOTIFY_TOKEN": TOKEN})
    monkeypatch.setenv("NOTIFY_TOKEN", TOKEN)
    monkeypatch.delenv("LIFECYCLE_HOOKS_TEMPLATE", raising=False)
    monkeypatch.delenv("OTEL_LIFECYCLE_HOOKS_TEMPLATE", raising=False)
    [failed] = rows(journal)

    code, out, _ = cli(capsys, "replay", "--failed", "--journal", str(journal))

    assert code == 1
    assert f"the journal names {template}, which is not loaded" in out
    assert (
        f"run: otel-lifecycle-hooks replay {failed.id} --journal {journal} --template {template}."
        in out
    )
    assert "Nothing was sent" in out and TOKEN not in out
    assert len(target_server.requests) == 1
    assert [row.outcome for row in rows(journal)] == ["failed"]

    template.unlink()
    code, out, _ = cli(
        capsys, "replay", "--failed", "--journal", str(journal), "--template", str(template)
    )
    assert code == 1 and "does not load" in out and "Nothing was sent" in out
    assert len(target_server.requests) == 1


def test_an_unset_secret_at_replay_time_is_refused_naming_the_variable(
    tmp_path: Path,
    target_server: TargetServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(
        tmp_path,
        f"""
        - name: keyed
          on: [task-completed]
          action:
            type: http
            url: "{target_server.url("/keyed")}"
            headers:
              X-Api-Secret: "${{API_SECRET}}"
        """,
    )
    target_server.on("/keyed", Reply(503))
    deliver(template, journal, environ={"API_SECRET": API_SECRET})
    monkeypatch.delenv("API_SECRET", raising=False)

    code, out, _ = cli(
        capsys, "replay", "--failed", "--journal", str(journal), "--template", str(template)
    )

    assert code == 1 and "${API_SECRET}" in out and "Nothing was sent" in out
    assert len(target_server.requests) == 1


def test_a_script_execution_is_not_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(
        tmp_path,
        f"""
        - name: fails
          on: [task-completed]
          action:
            type: script
            command: {json.dumps([sys.executable, "-c", "raise SystemExit(3)"])}
        """,
    )
    deliver(template, journal)
    [failed] = rows(journal)
    assert (failed.outcome, failed.exit_code) == ("failed", 3)

    code, out, _ = cli(
        capsys, "replay", "--template", str(template), str(failed.id), "--journal", str(journal)
    )

    assert code == 1 and "scripts are not replayed" in out
    assert len(rows(journal)) == 1


def test_dry_run_shows_the_request_with_secrets_redacted_and_sends_nothing(
    tmp_path: Path,
    target_server: TargetServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(
        tmp_path,
        f"""
        - name: notify
          on: [task-completed]
          action:
            type: http
            url: "{target_server.url("/notify")}"
            auth: {{type: bearer-token, token_env: NOTIFY_TOKEN}}
        """,
    )
    target_server.on("/notify", Reply(503))
    deliver(template, journal, environ={"NOTIFY_TOKEN": TOKEN})
    monkeypatch.setenv("NOTIFY_TOKEN", TOKEN)

    code, out, _ = cli(
        capsys, "replay", "--failed", "--dry-run", "--json", "--journal", str(journal),
        "--template", str(template),
    )  # fmt: skip

    assert code == 0
    [outcome] = json.loads(out)
    assert outcome["outcome"] == "dry-run"
    assert outcome["request"]["headers"]["Authorization"] == "[REDACTED]"
    assert outcome["request"]["headers"]["X-Scion-Hook-ID"] == outcome["idempotency_key"]
    assert TOKEN not in out
    assert len(target_server.requests) == 1 and len(rows(journal)) == 1


def test_replay_needs_ids_or_failed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "replay", "--journal", str(tmp_path / "j.sqlite3"))
    assert code == 2 and "--failed" in err


def test_history_lists_newest_first_filters_and_links_replays(
    tmp_path: Path, target_server: TargetServer, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(
        tmp_path,
        PLAIN_HOOK.format(url=target_server.url("/report"))
        + f"""
- name: ping
  on: [task-completed]
  action:
    type: http
    url: "{target_server.url("/ping")}"
  blocking: true
""",
    )
    target_server.on("/report", Reply(503))
    deliver(template, journal)
    assert (
        cli(capsys, "replay", "--template", str(template), "--failed", "--journal", str(journal))[0]
        == 0
    )

    code, out, _ = cli(capsys, "history", "--journal", str(journal), "--json")
    assert code == 0
    listed = json.loads(out)
    assert [(r["hook"], r["outcome"]) for r in listed] == [
        ("report", "success"),
        ("ping", "success"),
        ("report", "failed"),
    ]
    assert listed[0]["replayed_from"] == listed[2]["id"]

    code, out, _ = cli(capsys, "history", "--journal", str(journal), "--failed")
    lines = out.splitlines()
    columns = ["ID", "STARTED", "AGENT", "SESSION", "HOOK", "EVENT", "OUTCOME"]
    assert code == 0 and lines[0].split()[:7] == columns
    assert len(lines) == 2 and "report" in lines[1] and "http.503" in lines[1]

    code, out, _ = cli(
        capsys, "history", "--journal", str(journal), "--hook", "report", "--limit", "1"
    )
    assert (
        len(out.splitlines()) == 2
        and " success " in out
        and str(listed[2]["id"]) in out.splitlines()[1].split()[-1]
    )


def test_history_without_a_journal_says_so_and_creates_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.sqlite3"
    code, _, err = cli(capsys, "history", "--journal", str(missing))
    # Nothing to show is exit 1, as for `trace` and `replay`.
    assert code == 1 and "no journal" in err and not missing.exists()


def test_replay_as_a_user_runs_it_from_the_shell(
    tmp_path: Path, target_server: TargetServer
) -> None:
    journal = tmp_path / "journal.sqlite3"
    template = write_template(tmp_path, PLAIN_HOOK.format(url=target_server.url("/report")))
    target_server.on("/report", Reply(503))
    deliver(template, journal)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_LIFECYCLE_HOOKS_JOURNAL"] = str(journal)
    env["LIFECYCLE_HOOKS_TEMPLATE"] = str(template)  # names it, as `run` read it

    done = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "replay", "--all-failed"],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert "success (http 200)" in done.stdout
    history = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "history"],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert history.returncode == 0 and history.stdout.count("report") == 2
