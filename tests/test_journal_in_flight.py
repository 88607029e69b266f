"""A delivery that retries is journaled as `running` at its first wait, with the attempts made
so far, and that same row is rewritten with its outcome when it ends. Real attempts against a
loopback server; the retry waits run on a fake clock that reads the journal (through a second
connection, as `ui` does) while the execution waits."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.engine.clock import FakeClock
from otel_lifecycle_hooks.journal import AttemptRow, ExecutionRow, Journal, views
from otel_lifecycle_hooks.journal.in_flight import InFlight
from otel_lifecycle_hooks.supervisor.recovery import owed_events
from otel_lifecycle_hooks.template.loader import load_template_text
from tests.support.target_server import Reply, TargetServer

TEMPLATE = """\
lifecycle_hooks:
  - name: {name}
    on: [{event}]
    action: {{type: http, method: POST, url: "{url}", body: hello}}
    on_error: retry
    timeout: 5s
    blocking: true
"""


class JournalReadingClock(FakeClock):
    """A fake clock that, at each retry wait, keeps what a reader of the journal sees."""

    def __init__(self, journal_path: Path) -> None:
        super().__init__()
        self.journal_path = journal_path
        self.seen: list[list[dict[str, Any]]] = []

    def sleep(self, seconds: float, interrupt: threading.Event | None = None) -> bool:
        reader = Journal(self.journal_path)
        try:
            found = views.list_executions(reader, limit=None)
            self.seen.append([views.get_execution(reader, d["id"]) or {} for d in found])
        finally:
            reader.close()
        return super().sleep(seconds, interrupt)


def run_session(tmp_path: Path, template_text: str, clock: FakeClock) -> Any:
    journal = Journal(tmp_path / "journal.sqlite3")
    engine = HookEngine(
        load_template_text(template_text), clock=clock, journal=journal, hook_log=False
    )
    try:
        session = AgentSession(engine, agent_name="agent-1")
        result = session.record("post-start", {})
        session.end()
    finally:
        engine.shutdown(5)
        journal.close()
    return result


def test_a_retrying_delivery_is_journaled_running_with_its_attempts_then_finished_in_place(
    tmp_path: Path,
) -> None:
    clock = JournalReadingClock(tmp_path / "journal.sqlite3")
    with TargetServer() as target:
        target.on(
            "/hook",
            Reply(503, {"Content-Type": "text/plain"}, b"busy"),
            Reply(503, {"Content-Type": "text/plain"}, b"still busy"),
            Reply(200, {"Content-Type": "text/plain"}, b"done"),
        )
        text = TEMPLATE.format(name="notify", event="post-start", url=target.url("/hook"))
        result = run_session(tmp_path, text, clock)
    assert [e.outcome for e in result.executions] == ["success"]
    assert clock.sleeps == [1.0, 2.0]

    [[first_wait], [second_wait]] = clock.seen
    assert (first_wait["hook"], first_wait["outcome"], first_wait["attempt_count"]) == (
        "notify",
        "running",
        1,
    )
    assert first_wait["message"] == "attempt 2 of 4 in 1s"
    assert [a["response_body"] for a in first_wait["attempts"]] == ["busy"]
    assert first_wait["replayable"] is False
    assert second_wait["id"] == first_wait["id"]
    assert (second_wait["outcome"], second_wait["attempt_count"]) == ("running", 2)
    assert [a["response_status"] for a in second_wait["attempts"]] == [503, 503]

    journal = Journal(tmp_path / "journal.sqlite3")
    try:
        [done] = views.list_executions(journal, limit=None)
        finished = views.get_execution(journal, done["id"])
    finally:
        journal.close()
    assert finished is not None
    assert finished["id"] == first_wait["id"]  # the same row, rewritten: no second delivery
    assert (finished["outcome"], finished["attempt_count"], finished["http_status"]) == (
        "success",
        3,
        200,
    )
    assert [a["response_body"] for a in finished["attempts"]] == ["busy", "still busy", "done"]
    assert finished["request"]["url"].endswith("/hook")


def test_a_delivery_that_ends_at_its_first_attempt_is_journaled_once_at_its_end(
    tmp_path: Path,
) -> None:
    clock = JournalReadingClock(tmp_path / "journal.sqlite3")
    with TargetServer() as target:
        target.on("/hook", Reply(201))
        text = TEMPLATE.format(name="notify", event="post-start", url=target.url("/hook"))
        run_session(tmp_path, text, clock)
    assert clock.seen == []
    journal = Journal(tmp_path / "journal.sqlite3")
    try:
        [row] = journal.executions()
    finally:
        journal.close()
    assert (row.outcome, row.attempts) == ("success", 1)


def test_recovery_owes_a_hook_whose_only_row_a_killed_run_left_running() -> None:
    template = load_template_text(
        textwrap.dedent(
            """\
            lifecycle_hooks:
              - name: farewell
                on: [session-end]
                action: {type: http, method: POST, url: "http://127.0.0.1:9/x"}
            """
        )
    )
    session = SimpleNamespace(pre_stop_at=None, session_end_at=1_790_000_000.0)
    running = SimpleNamespace(event="session-end", hook="farewell", outcome="running")
    [owed] = owed_events(template, session, [running])
    assert [hook.name for hook in owed.hooks] == ["farewell"]
    finished = SimpleNamespace(event="session-end", hook="farewell", outcome="failed")
    [owed] = owed_events(template, session, [finished])
    assert owed.hooks == ()


def test_history_follow_prints_a_running_delivery_again_when_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    journal = Journal(path)
    running = ExecutionRow(
        "notify", "post-start", "running", time.time(), attempts=1, row_uid="in-flight-1"
    )
    journal.record_execution(running, [AttemptRow(1, time.time(), "failed", response_status=503)])
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_lifecycle_hooks", "history", "--follow", "--json",
         "--journal", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    stdout = process.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in stdout or ()], daemon=True).start()
    try:
        first = json.loads(lines.get(timeout=120))
        finished = running._replace(outcome="success", attempts=2, http_status=200)
        journal.update_execution(finished, [AttemptRow(2, time.time(), "success")])
        again = json.loads(lines.get(timeout=120))
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        journal.close()
    assert (first["id"], first["outcome"]) == (1, "running")
    assert (again["id"], again["outcome"], again["attempts"]) == (1, "success", 2)
    assert lines.empty()


class _HeldRunningWrite(Journal):
    """A real journal whose `running` row's write waits until the shutdown's interrupted
    record of the same execution has reached it, or a while has passed (where that record
    waits for the running row's write instead)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writing_running = threading.Event()
        self.interrupted_reached = threading.Event()

    def record_execution(
        self, row: ExecutionRow, attempts: Sequence[AttemptRow] = ()
    ) -> int | None:
        if row.outcome == "running":
            self.writing_running.set()
            self.interrupted_reached.wait(2.0)
        elif row.outcome == "interrupted":
            self.interrupted_reached.set()
        return super().record_execution(row, attempts)


def test_an_interrupted_record_made_while_the_running_row_is_written_rewrites_that_row(
    tmp_path: Path,
) -> None:
    # The shutdown gives up on a delivery while its first retry wait is being journaled: the
    # interrupted record must rewrite the running row, not sit beside it.
    journal = _HeldRunningWrite(tmp_path / "journal.sqlite3")
    in_flight = InFlight(journal)
    hook, event = SimpleNamespace(name="notify"), SimpleNamespace(name="post-start")
    session = SimpleNamespace(session_id="s1", metadata={})
    attempt = AttemptRow(1, time.time(), "failed", response_status=503)
    retrying = threading.Thread(
        target=in_flight.retrying, args=(hook, event, session, "key-1", [attempt], 3, 1.0)
    )
    retrying.start()
    assert journal.writing_running.wait(60.0)
    interrupted = SimpleNamespace(
        hook=hook, event=event, session_id="s1", outcome="interrupted", attempts=1,
        duration=0.0, started_at=time.time(), idempotency_key="key-1", status_code=None,
        exit_code=None, error_type="interrupted", message="interrupted: shutdown", request=None,
        trace_id=None, span_id=None, agent_id=None, replayed_from=None, attempt_log=(),
    )  # fmt: skip
    in_flight.given_up(interrupted)
    retrying.join(60.0)

    rows = journal.executions()
    assert [(row.outcome, row.attempts) for row in rows] == [("interrupted", 1)], rows
    journal.close()
