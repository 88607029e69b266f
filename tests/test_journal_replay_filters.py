"""`replay` of a filtered selection, with history's filters, against a real loopback endpoint:
only the failed deliveries the filters name are re-sent, each with its idempotency key, and
the replay's own attempt (request and response) is journaled for `history show`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from otel_lifecycle_hooks.cli.main import main as cli_main
from otel_lifecycle_hooks.journal import ExecutionRow, Journal
from tests.support.target_server import Reply, TargetServer


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def failed_delivery(
    server: TargetServer,
    hook: str,
    session: str,
    outcome: str = "failed",
    event: str = "post-start",
) -> ExecutionRow:
    return ExecutionRow(
        hook=hook,
        event=event,
        outcome=outcome,
        started_at=time.time() - 60,
        session_id=session,
        agent_id="agent-1",
        idempotency_key=f"agent-1:{hook}:{event}:{session}",
        request={
            "method": "POST",
            "url": server.url(f"/{hook}"),
            "headers": {"Content-Type": "application/json"},
            "body": json.dumps({"hook": hook, "session": session}),
            "auth": "none",
            "signed": False,
        },
    )


TEMPLATE = """\
lifecycle_hooks:
  - name: notify
    on: [post-start, session-end]
    action:
      type: http
      method: POST
      url: "{url}/notify"
      body: '{{"hook": "notify", "session": "${{SESSION_ID}}"}}'
  - name: audit
    on: [tool-start]
    action:
      type: http
      method: POST
      url: "{url}/audit"
      body: '{{"hook": "audit", "session": "${{SESSION_ID}}"}}'
"""


@pytest.fixture
def journal_path(
    tmp_path: Path, target_server: TargetServer, monkeypatch: pytest.MonkeyPatch
) -> Path:
    # The operator's template, named as `run` read it: replay renders only from one named.
    template = tmp_path / "scion-agent.yaml"
    template.write_text(TEMPLATE.format(url=target_server.url("").rstrip("/")))
    monkeypatch.setenv("LIFECYCLE_HOOKS_TEMPLATE", str(template))
    path = tmp_path / "journal.sqlite3"
    journal = Journal(path)
    journal.open_session("aaaa1111", agent_id="agent-1", agent_name="worker")
    journal.open_session("bbbb2222", agent_id="agent-1", agent_name="worker")
    for row in (
        failed_delivery(target_server, "notify", "aaaa1111"),  # 1
        failed_delivery(target_server, "audit", "aaaa1111", "timeout", "tool-start"),  # 2
        failed_delivery(target_server, "notify", "bbbb2222"),  # 3
        failed_delivery(target_server, "notify", "bbbb2222", event="session-end"),  # 4
        failed_delivery(target_server, "notify", "bbbb2222")._replace(outcome="success"),  # 5
    ):
        journal.record_execution(row)
    journal.close()
    return path


def sent(server: TargetServer) -> list[tuple[str, str]]:
    return [
        (json.loads(r.body)["session"], r.headers["x-scion-hook-id"].split(":")[2])
        for r in server.requests
    ]


def test_replay_of_one_session_re_sends_only_its_failed_deliveries(
    journal_path: Path, target_server: TargetServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "replay", "--session", "aaaa", "--journal", str(journal_path))
    assert code == 0, err
    assert sent(target_server) == [("aaaa1111", "post-start"), ("aaaa1111", "tool-start")]
    assert out.splitlines() == [
        "#1 notify/post-start: success (http 200) -> #6",
        "#2 audit/tool-start: success (http 200) -> #7",
    ]
    # Delivered now: the same selection has nothing left to replay.
    code, out, _ = cli(capsys, "replay", "--session", "aaaa", "--journal", str(journal_path))
    assert (code, out.strip()) == (0, "nothing to replay")


def test_replay_filters_by_hook_event_status_and_last(
    journal_path: Path, target_server: TargetServer, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = str(journal_path)
    code, out, _ = cli(capsys, "replay", "--status", "timeout", "--dry-run", "--journal", journal)
    assert code == 0 and [line.split()[0] for line in out.splitlines()[::2]] == ["#2"]
    code, out, _ = cli(
        capsys, "replay", "--event", "post-start", "--hook", "notify", "--dry-run",
        "--journal", journal,
    )  # fmt: skip
    assert [line.split()[0] for line in out.splitlines()[::2]] == ["#1", "#3"]
    assert target_server.requests == []  # a dry run sends nothing
    code, out, _ = cli(capsys, "replay", "--hook", "notify", "--last", "1", "--journal", journal)
    assert code == 0 and out.splitlines() == ["#4 notify/session-end: success (http 200) -> #6"]
    assert sent(target_server) == [("bbbb2222", "session-end")]


def test_a_success_is_never_a_replay_choice_and_no_selection_is_a_usage_error(
    journal_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli(capsys, "replay", "--status", "success", "--journal", str(journal_path))
    assert exited.value.code == 2
    assert "invalid choice: 'success'" in capsys.readouterr().err
    code, _, err = cli(capsys, "replay", "--journal", str(journal_path))
    assert code == 2 and "--failed, or choose failed deliveries with history's filters" in err


def test_the_replays_attempt_is_journaled_with_what_the_endpoint_answered(
    journal_path: Path, target_server: TargetServer, capsys: pytest.CaptureFixture[str]
) -> None:
    target_server.on("/audit", Reply.json(202, '{"queued": true}'))
    code, out, _ = cli(capsys, "replay", "2", "--journal", str(journal_path))
    assert code == 0 and out.strip() == "#2 audit/tool-start: success (http 202) -> #6"
    code, out, _ = cli(capsys, "history", "show", "6", "--json", "--journal", str(journal_path))
    shown = json.loads(out)
    assert shown["replayed_from"] == 2
    (attempt,) = shown["attempts"]
    assert attempt["response_status"] == 202 and attempt["response_body"] == '{"queued": true}'
    headers = {name.lower(): value for name, value in attempt["request"]["headers"]}
    assert headers["x-scion-hook-id"] == "agent-1:audit:tool-start:aaaa1111"
