"""What an engine shutdown leaves undone is journaled, never silently lost: the delivery still
in flight at the deadline as `interrupted`, those still queued as `dropped`, each with its
request and idempotency key so that `replay` can send it. A real hanging loopback target and a
real journal file."""

from __future__ import annotations

import re
import sqlite3
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_lifecycle_hooks.actions.base import AttemptResult
from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.engine.clock import FakeClock
from otel_lifecycle_hooks.engine.observers import ExecutionWatcher
from otel_lifecycle_hooks.engine.runners import ActionServices, Attempt, builtin_runners
from otel_lifecycle_hooks.engine.runners.http import HttpRunner
from otel_lifecycle_hooks.journal import FAILED_OUTCOMES, open_journal
from otel_lifecycle_hooks.journal.views import list_executions
from otel_lifecycle_hooks.telemetry.metrics import DROPPED, EXECUTIONS
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
    assert by_outcome["interrupted"][0] == "interrupted"
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
    assert (outcome, error_type) == ("interrupted", "interrupted"), message
    assert "run interrupted before attempt 2" in message
    session.end()


def test_the_shutdown_and_the_run_itself_journal_an_interrupted_delivery_in_one_form(
    tmp_path: Path, target_server: TargetServer
) -> None:
    # One situation, one form, whoever records it: a delivery the engine's shutdown stopped
    # waiting for while it was in flight (recorded by the shutdown), and one the operator's
    # second signal cut short in its retry wait (recorded by its own run), each read the same
    # in the journal, the executions metric, the hook log and the page's status filter.
    target_server.always("/slow", Reply.hang())
    target_server.always("/busy", Reply.json(503, '{"error": "unavailable"}'))
    reader = InMemoryMetricReader()
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    journal = tmp_path / "journal.sqlite3"
    hook_log = tmp_path / "hooks.log"
    template = load_template_text(
        textwrap.dedent(
            f"""
            lifecycle_hooks:
              - name: given-up
                on: [tool-start]
                timeout: 60s
                action:
                  type: http
                  method: POST
                  url: "{target_server.url("/slow")}"
                  body: '{{}}'
              - name: cut-short
                on: [session-end]
                blocking: true
                on_error: retry
                action:
                  type: http
                  method: POST
                  url: "{target_server.url("/busy")}"
                  body: '{{}}'
            """
        )
    )
    engine = HookEngine(
        template,
        journal=journal,
        hook_log=hook_log,
        meter_provider=MeterProvider(metric_readers=[reader]),
        tracer_provider=tracer_provider,
    )
    session = AgentSession(engine, agent_name="agent")

    class InterruptAtTheRetryWait(ExecutionWatcher):
        def retrying(self, *_: object) -> None:  # told just before the wait begins
            engine.executor.interrupted.set()
            engine.executor.stopping.set()

    engine.recorders.watch(InterruptAtTheRetryWait())
    session.record("tool-start", {"TOOL_NAME": "first"})
    target_server.wait_for(1)  # given-up is in flight: the target holds it
    session.record("session-end", {"EXIT_CODE": "0"})  # cut-short ends, interrupted, first
    engine.dispatcher.shutdown(0.0)  # gives up on given-up, still held

    with sqlite3.connect(journal) as db:
        found = db.execute("SELECT hook, outcome, error_type FROM executions").fetchall()
    assert {hook: (outcome, error_type) for hook, outcome, error_type in found} == {
        "given-up": ("interrupted", "interrupted"),
        "cut-short": ("interrupted", "interrupted"),
    }
    reading = open_journal(journal)
    try:
        shown = list_executions(reading, outcomes=["interrupted"])
    finally:
        reading.close()
    assert sorted((d["hook"], d["replayable"]) for d in shown) == [
        ("cut-short", True),
        ("given-up", True),
    ]
    assert _counted(reader, EXECUTIONS) == {
        ("given-up", "interrupted"): 1,
        ("cut-short", "interrupted"): 1,
    }
    engine.shutdown(1.0)  # the hook log flushed and closed
    logged = {
        hook: (_logged(line, "outcome"), _logged(line, "error"))
        for line in hook_log.read_text().splitlines()
        for hook in ("given-up", "cut-short")
        if f"hook={hook} " in line
    }
    assert logged == {
        "given-up": ("interrupted", "interrupted"),
        "cut-short": ("interrupted", "interrupted"),
    }
    # The span keeps the contract's outcomes: failed, its error type saying why.
    [span] = [s for s in spans.get_finished_spans() if s.name == "agent.lifecycle_hook cut-short"]
    assert span.attributes is not None
    assert (span.attributes["agent.lifecycle_hook.outcome"], span.attributes["error.type"]) == (
        "failed",
        "interrupted",
    )
    session.end()


class _HeldHttpRunner:
    """The real HTTP runner, each attempt held until the test lets it go: the test decides
    when a delivery in flight ends, not the scheduler."""

    renders = True

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self._http = HttpRunner()

    def attempt(self, services: ActionServices, attempt: Attempt) -> AttemptResult:
        self.started.set()
        self.release.wait(60.0)  # a hang guard: the test releases it
        return self._http.attempt(services, attempt)


def test_a_delivery_that_ends_after_the_shutdown_gave_up_on_it_has_one_row_saying_what_it_did(
    tmp_path: Path, target_server: TargetServer
) -> None:
    # The shutdown stops waiting for a delivery in flight and journals it as interrupted (the
    # process may end before it does). If it ends after all, before the journal is closed,
    # that same row says what it truly did (a 200: `replay` must not send it again), and it
    # is counted once: no second row, no second execution in the metrics or the hook log.
    target_server.always("/hook", Reply.json(200, "{}"))
    held = _HeldHttpRunner()
    runners = builtin_runners()
    runners.register("http", held)
    reader = InMemoryMetricReader()
    journal = tmp_path / "journal.sqlite3"
    hook_log = tmp_path / "hooks.log"
    engine = HookEngine(
        load_template_text(
            textwrap.dedent(
                f"""
                lifecycle_hooks:
                  - name: target
                    on: [tool-start]
                    action:
                      type: http
                      method: POST
                      url: "{target_server.url("/hook")}"
                      body: '{{}}'
                """
            )
        ),
        meter_provider=MeterProvider(metric_readers=[reader]),
        journal=journal,
        hook_log=hook_log,
        runners=runners,
    )
    session = AgentSession(engine, agent_name="agent")
    session.record("tool-start", {"TOOL_NAME": "first"})
    assert held.started.wait(60.0)  # in flight, held

    engine.dispatcher.shutdown(0.0)  # gives up on it: its last call passes while it is held
    assert [row[:2] for row in _rows(journal)] == [("interrupted", "interrupted")]

    held.release.set()  # it ends after all
    deadline = time.monotonic() + 60.0
    while not any(outcome == "success" for outcome, *_ in _rows(journal)):
        assert time.monotonic() < deadline, _rows(journal)
        time.sleep(0.02)
    target_server.wait_for(1)

    [(outcome, error_type, attempts)] = _rows(journal)
    assert (outcome, error_type, attempts) == ("success", None, 1)
    assert _counted(reader, EXECUTIONS) == {("target", "interrupted"): 1}
    assert _counted(reader, DROPPED) == {("target", "shutdown"): 1}
    engine.shutdown(1.0)
    logged = [line for line in hook_log.read_text().splitlines() if "target" in line]
    assert len(logged) == 1, logged
    session.end()


class _HeldRetryWaitClock(FakeClock):
    """A fake clock whose retry wait is held until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()
        self.release = threading.Event()

    def sleep(self, seconds: float, interrupt: threading.Event | None = None) -> bool:
        self.waiting.set()
        self.release.wait(60.0)  # a hang guard: the test releases it
        return super().sleep(seconds, interrupt)


def test_a_retrying_delivery_the_shutdown_gave_up_on_keeps_its_one_row_to_its_end(
    tmp_path: Path, target_server: TargetServer
) -> None:
    # Journaled as running at its first retry wait; the shutdown rewrites that row as
    # interrupted, with the attempt made; the wait, cut short by the shutdown, ends the
    # delivery with the endpoint's last answer, and that same row says so.
    target_server.always("/busy", Reply.json(503, '{"error": "unavailable"}'))
    clock = _HeldRetryWaitClock()
    journal = tmp_path / "journal.sqlite3"
    engine = HookEngine(
        load_template_text(
            textwrap.dedent(
                f"""
                lifecycle_hooks:
                  - name: target
                    on: [tool-start]
                    on_error: retry
                    action:
                      type: http
                      method: POST
                      url: "{target_server.url("/busy")}"
                      body: '{{}}'
                """
            )
        ),
        clock=clock,
        journal=journal,
        hook_log=False,
    )
    session = AgentSession(engine, agent_name="agent")
    session.record("tool-start", {"TOOL_NAME": "first"})
    assert clock.waiting.wait(60.0)  # its first retry wait, held
    assert _rows(journal) == [("running", None, 1)]

    engine.dispatcher.shutdown(0.0)
    assert _rows(journal) == [("interrupted", "interrupted", 1)]

    clock.release.set()
    deadline = time.monotonic() + 60.0
    while _rows(journal)[0][0] == "interrupted":
        assert time.monotonic() < deadline, _rows(journal)
        time.sleep(0.02)
    assert _rows(journal) == [("failed", "http.503", 1)]
    assert len(target_server.wait_for(1)) == 1
    with sqlite3.connect(journal) as db:
        assert db.execute("SELECT COUNT(*) FROM attempts").fetchone() == (1,)
    engine.shutdown(1.0)
    session.end()


def _rows(journal: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(journal) as db:
        return db.execute(
            "SELECT outcome, error_type, attempts FROM executions ORDER BY id"
        ).fetchall()


def _logged(line: str, key: str) -> str | None:
    """The value of `key` in a hook log line (`key=value`, its first)."""
    found = re.search(rf" {key}=(\S+)", line)
    return found.group(1) if found else None


def _counted(reader: InMemoryMetricReader, name: str) -> dict[tuple[Any, ...], int]:
    """A counter's values keyed by (hook, outcome or drop reason)."""
    data = reader.get_metrics_data()
    values: dict[tuple[Any, ...], int] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    assert isinstance(point, NumberDataPoint)  # a counter's
                    attributes = point.attributes or {}
                    key = (
                        attributes.get("agent.lifecycle_hook.name"),
                        attributes.get("agent.lifecycle_hook.drop_reason")
                        or attributes.get("agent.lifecycle_hook.outcome"),
                    )
                    values[key] = values.get(key, 0) + int(point.value)
    return values
