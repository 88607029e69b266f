"""What an engine shutdown leaves undone is journaled, never silently lost: the delivery still
in flight at the deadline as `interrupted`, those still queued as `dropped`, each with its
request and idempotency key so that `replay` can send it. A real hanging loopback target and a
real journal file."""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.engine.recording import ExecutionWatcher
from otel_lifecycle_hooks.journal import FAILED_OUTCOMES
from otel_lifecycle_hooks.template.loader import load_template_text
from tests.support.target_server import Reply, TargetServer


def test_a_shutdown_journals_the_delivery_in_flight_and_those_queued(
    tmp_path: Path, target_server: TargetServer
) -> None:
    target_server.always("/slow", Reply.hang())
    template = load_template_text(
        textwrap.dedent(
            f"""
            lifecycle_hooks:
              - name: target
                on: [tool-start]
                action:
                  type: http
                  method: POST
                  url: "{target_server.url("/slow")}"
                  body: '{{"tool": "${{TOOL_NAME}}"}}'
                timeout: 10s
            """
        )
    )
    journal = tmp_path / "journal.sqlite3"
    engine = HookEngine(template, journal=journal, hook_log=False)
    session = AgentSession(engine, agent_name="agent")
    session.record("tool-start", {"TOOL_NAME": "first"})
    target_server.wait_for(1)  # the first is in flight: the target holds it
    session.record("tool-start", {"TOOL_NAME": "second"})
    engine.shutdown(0.2)

    with sqlite3.connect(journal) as db:
        rows = db.execute(
            "SELECT outcome, error_type, request, idempotency_key FROM executions ORDER BY id"
        ).fetchall()
    by_outcome = {outcome: (error, request, key) for outcome, error, request, key in rows}
    assert set(by_outcome) >= {"interrupted", "dropped"}
    assert by_outcome["interrupted"][0] == "Interrupted"
    assert '\\"first\\"' in by_outcome["interrupted"][1]
    assert by_outcome["dropped"][0] == "NotDelivered"
    assert '\\"second\\"' in by_outcome["dropped"][1]
    assert all(key for _, _, key in by_outcome.values())
    assert {"interrupted", "dropped"} <= set(FAILED_OUTCOMES)  # what replay --all-failed sends
    session.end()


def test_an_interruption_that_wakes_a_blocking_hooks_retry_wait_is_journaled_as_interrupted(
    tmp_path: Path, target_server: TargetServer
) -> None:
    # `run`'s second signal sets `interrupted` and `stopping`: the retry wait wakes with the
    # endpoint's 503 as the last answer, and the row must say interrupted (replayable), as it
    # does when the signal raises out of the wait instead.
    target_server.always("/end", Reply.json(503, '{"error": "unavailable"}'))
    template = load_template_text(
        textwrap.dedent(
            f"""
            lifecycle_hooks:
              - name: end-retry
                on: [session-end]
                blocking: true
                on_error: retry
                action:
                  type: http
                  method: POST
                  url: "{target_server.url("/end")}"
                  body: '{{}}'
            """
        )
    )
    journal = tmp_path / "journal.sqlite3"
    engine = HookEngine(template, journal=journal, hook_log=False)
    session = AgentSession(engine, agent_name="agent")

    class InterruptAtTheRetryWait(ExecutionWatcher):
        def retrying(self, *_: object) -> None:  # told just before the wait begins
            engine.executor.interrupted.set()
            engine.executor.stopping.set()

    engine.recorders.watch(InterruptAtTheRetryWait())
    session.record("session-end", {"EXIT_CODE": "0"})  # blocking: returns once it ended
    engine.shutdown(1.0)
    with sqlite3.connect(journal) as db:
        [(outcome, error_type, message)] = db.execute(
            "SELECT outcome, error_type, message FROM executions WHERE hook = 'end-retry'"
        ).fetchall()
    assert error_type == "interrupted", (outcome, error_type, message)
    assert "run interrupted before attempt 2" in message
    session.end()
