"""`history` as an operator uses it: agent and session columns and filters, `history show ID`
with every attempt's request and response, `--follow` until Ctrl-C, and retention honoured."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from otel_lifecycle_hooks.cli.main import main as cli_main
from otel_lifecycle_hooks.journal import AttemptRow, ExecutionRow, Journal


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def attempts_of_a_flaky_endpoint(started: float) -> list[AttemptRow]:
    request = {
        "method": "POST",
        "url": "https://hooks.example.test/notify?token=[REDACTED]",
        "headers": [["content-type", "application/json"], ["authorization", "[REDACTED]"]],
        "body": '{"agent": "worker"}',
    }
    return [
        AttemptRow(
            attempt=n,
            started_at=started + n,
            outcome="failed" if n < 3 else "success",
            duration_ms=12.0,
            error_type="http.503" if n < 3 else None,
            message="HTTP 503 Service Unavailable" if n < 3 else "",
            request=request,
            response_status=503 if n < 3 else 200,
            response_headers=[["content-type", "text/plain"], ["retry-after", "1"]],
            response_body="busy\n\x1b[2Jcleared your screen" if n < 3 else "ok",
        )
        for n in (1, 2, 3)
    ]


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    path = tmp_path / "journal.sqlite3"
    journal = Journal(path)
    hour = 3600.0
    now = time.time()  # the rows are 3, 2 and 1 hours old
    journal.open_session("5e55101aa", agent_id="agent-1111", agent_name="worker")
    journal.open_session("5e55202bb", agent_id="agent-2222", agent_name="reviewer")
    journal.record_execution(
        ExecutionRow(
            "notify", "post-start", "success", now - 3 * hour, attempts=3, duration_ms=3050.0,
            session_id="5e55101aa", agent_id="agent-1111", http_status=200,
            idempotency_key="agent-1111:notify:post-start:t",
        ),
        attempts_of_a_flaky_endpoint(now - 3 * hour),
    )  # fmt: skip
    journal.record_execution(
        ExecutionRow(
            "audit", "tool-start", "failed", now - 2 * hour, session_id="5e55202bb",
            agent_id="agent-2222", exit_code=3, error_type="exit.3",
        )
    )  # fmt: skip
    journal.record_execution(
        ExecutionRow(
            "notify", "session-end", "failed", now - hour, session_id="5e55202bb",
            agent_id="agent-2222", http_status=500, error_type="http.500",
        )
    )  # fmt: skip
    journal.close()
    return path


def hooks_listed(out: str) -> list[tuple[str, ...]]:
    return [tuple(line.split()[3:7]) for line in out.splitlines()[1:]]  # STARTED is 2 words


def test_history_shows_agent_and_session_and_filters_by_them(
    journal_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "history", "--journal", str(journal_path))
    assert code == 0
    assert out.splitlines()[0].split()[:6] == ["ID", "STARTED", "AGENT", "SESSION", "HOOK", "EVENT"]
    assert hooks_listed(out) == [
        ("reviewer", "5e55202b", "notify", "session-end"),
        ("reviewer", "5e55202b", "audit", "tool-start"),
        ("worker", "5e55101a", "notify", "post-start"),
    ]
    journal = str(journal_path)
    # The agent by its name or the start of its id, the session by the start the table shows.
    for argv in (["--agent", "worker"], ["--agent", "agent-1"], ["--session", "5e55101a"]):
        code, out, _ = cli(capsys, "history", "--journal", journal, *argv)
        assert hooks_listed(out) == [("worker", "5e55101a", "notify", "post-start")], argv
    code, out, _ = cli(capsys, "history", "--journal", journal, "--event", "tool-start")
    assert [h[2] for h in hooks_listed(out)] == ["audit"]
    code, out, _ = cli(capsys, "history", "--journal", journal, "--hook", "notify", "--last", "1")
    assert [h[3] for h in hooks_listed(out)] == ["session-end"]
    code, out, _ = cli(capsys, "history", "--journal", journal, "--status", "failed", "--json")
    assert [row["hook"] for row in json.loads(out)] == ["notify", "audit"]
    code, out, _ = cli(capsys, "history", "--journal", journal, "--since", "90m")
    assert [h[3] for h in hooks_listed(out)] == ["session-end"]


def test_history_show_prints_every_attempt_with_its_request_and_response(
    journal_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "history", "show", "1", "--journal", str(journal_path))
    assert code == 0, err
    assert out.startswith("execution 1: notify on post-start\n")
    assert "success after 3 attempts in 3.050s, http 200" in out
    assert "agent       worker agent-1111" in out
    assert out.count("> POST https://hooks.example.test/notify?token=[REDACTED]") == 3
    assert "> authorization: [REDACTED]" in out
    assert out.count("< HTTP 503") == 2 and out.count("< HTTP 200") == 1
    assert "< retry-after: 1" in out
    # What the endpoint wrote is shown, never interpreted by the terminal.
    assert "\x1b" not in out and "< \\x1b[2Jcleared your screen" in out
    blocks = out.split("\n\nattempt ")
    assert [block.split()[0] for block in blocks[1:]] == ["1", "2", "3"]
    assert "http.503" in blocks[1] and "HTTP 503 Service Unavailable" in blocks[1]

    code, out, _ = cli(capsys, "history", "show", "1", "--json", "--journal", str(journal_path))
    shown = json.loads(out)
    assert shown["agent_name"] == "worker"
    assert [a["response_status"] for a in shown["attempts"]] == [503, 503, 200]
    assert shown["attempts"][0]["request"]["headers"][1] == ["authorization", "[REDACTED]"]


def test_history_show_of_an_unknown_or_malformed_id_says_what_to_give(
    journal_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "history", "show", "99", "--journal", str(journal_path))
    assert code == 1 and out == ""
    assert "no execution 99 in the journal" in err and "`history` lists the ids" in err
    code, _, err = cli(capsys, "history", "show", "abc", "--journal", str(journal_path))
    assert code == 2 and "got 'abc'; give an execution's journal id" in err
    code, _, err = cli(capsys, "history", "show", "--journal", str(journal_path))
    assert code == 2 and "got nothing" in err
    code, _, err = cli(capsys, "history", "7", "--journal", str(journal_path))
    assert code == 2 and "`history show 7`" in err


def test_history_honours_the_retention_setting(
    journal_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIFECYCLE_HOOKS_JOURNAL_RETENTION", "2rows")
    code, out, _ = cli(capsys, "history", "--journal", str(journal_path))
    assert [h[2] for h in hooks_listed(out)] == ["notify", "audit"]  # the oldest is beyond
    code, _, err = cli(capsys, "history", "show", "1", "--journal", str(journal_path))
    assert code == 1 and "any more (beyond retention)" in err and "retention 2rows" in err
    monkeypatch.setenv("LIFECYCLE_HOOKS_JOURNAL_RETENTION", "150m")
    code, out, _ = cli(capsys, "history", "--journal", str(journal_path))
    assert [h[2] for h in hooks_listed(out)] == ["notify", "audit"]
    monkeypatch.setenv("LIFECYCLE_HOOKS_JOURNAL_RETENTION", "off")
    code, out, _ = cli(capsys, "history", "--journal", str(journal_path))
    assert len(hooks_listed(out)) == 3


def read_lines(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)


def next_line(lines: queue.Queue[str], what: str) -> str:
    try:
        return lines.get(timeout=120)
    except queue.Empty:
        raise AssertionError(f"history --follow printed no line for {what}") from None


@pytest.mark.parametrize("as_json", [False, True])
def test_history_follow_prints_new_rows_as_they_are_journaled_until_ctrl_c(
    journal_path: Path, as_json: bool
) -> None:
    argv = ["history", "--follow", "--hook", "notify", "--journal", str(journal_path)]
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_lifecycle_hooks", *argv, *(["--json"] if as_json else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=read_lines, args=(process.stdout, lines), daemon=True).start()
    try:
        if not as_json:
            assert next_line(lines, "the header").split()[:3] == ["ID", "STARTED", "AGENT"]
        first, second = next_line(lines, "row 1"), next_line(lines, "row 3")
        journal = Journal(journal_path)
        journal.record_execution(ExecutionRow("audit", "tool-end", "success", time.time()))
        journal.record_execution(ExecutionRow("notify", "pre-stop", "failed", time.time()))
        journal.close()
        new = next_line(lines, "the row journaled while it followed")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 0
        assert process.stderr is not None and process.stderr.read() == ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if as_json:
        assert [json.loads(line)["id"] for line in (first, second, new)] == [1, 3, 5]
        assert json.loads(new)["event"] == "pre-stop"
    else:
        assert [line.split()[0] for line in (first, second, new)] == ["1", "3", "5"]
        assert "pre-stop" in new and "audit" not in new
    assert lines.empty()  # the filtered-out row never came


def test_history_follow_lines_its_rows_up_under_its_header(journal_path: Path) -> None:
    # The header is printed before any row is read, so its widths must already fit the usual
    # cells ("http 500", "http.500", "ConnectError"); a column starting elsewhere misreads.
    argv = ["history", "--follow", "--journal", str(journal_path)]
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_lifecycle_hooks", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=read_lines, args=(process.stdout, lines), daemon=True).start()
    try:
        header = next_line(lines, "the header")
        rows = [next_line(lines, f"row {n}") for n in (1, 2, 3)]
        journal = Journal(journal_path)
        journal.record_execution(
            ExecutionRow("notify", "pre-stop", "failed", time.time(), error_type="ConnectError")
        )
        journal.close()
        rows.append(next_line(lines, "the row journaled while it followed"))
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    result, error, replay_of = (header.index(c) for c in ("RESULT", "ERROR", "REPLAY_OF"))
    for row in rows:
        assert row[result - 2 : result] == "  " and row[result] != " ", (header, row)
        assert row[error - 2 : error] == "  " and row[error] != " ", (header, row)
        assert row[replay_of - 2 : replay_of] == "  " and row[replay_of] != " ", (header, row)
    assert "http.500" in rows[2] and "ConnectError" in rows[3]
