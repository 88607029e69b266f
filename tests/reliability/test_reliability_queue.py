"""Overload at the engine level, with exact counts: a non-blocking hook's queue is bounded; when
it overflows the oldest runtime events are dropped, counted in `agent.lifecycle_hook.dropped`
(InMemoryMetricReader) and logged once per thousand; lifecycle events and blocking calls are
never dropped, and a lifecycle event does not wait behind a backlog already being dropped.

The hook's target holds the first request until the test releases it, so the queue's content
is known exactly at every step (no sleeps, no timing).
"""

from __future__ import annotations

import json
import logging
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_lifecycle_hooks.engine import HookEngine, SessionInfo
from otel_lifecycle_hooks.template.loader import load_template_text
from tests.support.target_server import TargetServer

LIMIT = 5


@pytest.fixture
def gated_server() -> Iterator[tuple[TargetServer, threading.Event]]:
    """A target whose first request waits until the event is set."""
    release = threading.Event()
    with TargetServer() as server:
        original = server._record

        def record(request: Any) -> Any:
            reply = original(request)
            if len(server.requests) == 1:
                release.wait(30)
            return reply

        server._record = record  # type: ignore[method-assign]
        yield server, release
        release.set()


def engine_for(url: str, reader: InMemoryMetricReader, blocking: bool = False) -> HookEngine:
    template = load_template_text(
        textwrap.dedent(
            f"""
            lifecycle_hooks:
              - name: slow
                on: [activity-change, tool-start, pre-stop, session-end]
                action:
                  type: http
                  url: "{url}"
                  body: '{{"event": "${{EVENT}}", "n": "${{TOOL_NAME}}"}}'
                blocking: {"true" if blocking else "false"}
                timeout: 30s
            """
        )
    )
    return HookEngine(
        template,
        meter_provider=MeterProvider(metric_readers=[reader]),
        journal=False,
        hook_log=False,
        queue_limit=LIMIT,
    )


def dropped_counts(reader: InMemoryMetricReader) -> dict[tuple[str, str, str], int]:
    counts: dict[tuple[str, str, str], int] = {}
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else []:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "agent.lifecycle_hook.dropped":
                    for point in metric.data.data_points:
                        a = point.attributes or {}
                        key = (
                            a["agent.lifecycle_hook.name"],
                            a["agent.lifecycle_hook.event"],
                            a["agent.lifecycle_hook.drop_reason"],
                        )
                        counts[key] = int(point.value)
    return counts


def sent(server: TargetServer) -> list[tuple[str, str]]:
    return [(b["event"], b["n"]) for b in (json.loads(r.body) for r in server.requests)]


def test_an_overflowing_queue_drops_the_oldest_runtime_events_counts_and_logs_them(
    gated_server: tuple[TargetServer, threading.Event], caplog: pytest.LogCaptureFixture
) -> None:
    server, release = gated_server
    reader = InMemoryMetricReader()
    engine = engine_for(server.url("/hook"), reader)
    session = SessionInfo("s-1")
    engine.fire("tool-start", session, {"TOOL_NAME": "0"})
    server.wait_for(1)  # the worker is busy with event 0; everything after waits in the queue

    with caplog.at_level(logging.WARNING, logger="otel_lifecycle_hooks.engine"):
        for n in range(1, 21):
            engine.fire("tool-start", session, {"TOOL_NAME": str(n)})
        assert (
            engine.dispatcher.queue_depth("slow") == LIMIT + 1
        )  # bounded: five queued, one running
        release.set()
        assert engine.force_flush(10)

    # 20 queued into 5 places: the 15 oldest were dropped, the newest 5 delivered in order.
    assert sent(server) == [("tool-start", str(n)) for n in (0, 16, 17, 18, 19, 20)]
    assert dropped_counts(reader) == {("slow", "tool-start", "queue_full"): 15}
    drop_logs = [r for r in caplog.records if "dropped the oldest" in r.getMessage()]
    assert len(drop_logs) == 1 and "slow" in drop_logs[0].getMessage()
    engine.shutdown(5)


def test_lifecycle_events_are_never_dropped_and_skip_a_backlog_being_dropped(
    gated_server: tuple[TargetServer, threading.Event],
) -> None:
    server, release = gated_server
    reader = InMemoryMetricReader()
    engine = engine_for(server.url("/hook"), reader)
    session = SessionInfo("s-1")
    engine.fire("tool-start", session, {"TOOL_NAME": "0"})
    server.wait_for(1)

    for n in range(1, 9):
        engine.fire("tool-start", session, {"TOOL_NAME": str(n)})  # overflows: 3 dropped
    engine.fire("pre-stop", session)  # sheds the 5 waiting runtime events
    for _ in range(LIMIT + 2):
        engine.fire(
            "session-end", session
        )  # past the bound, and still nothing lifecycle is dropped
    release.set()
    assert engine.force_flush(10)

    events = [event for event, _ in sent(server)]
    assert events == ["tool-start", "pre-stop"] + ["session-end"] * (LIMIT + 2)
    assert dropped_counts(reader) == {("slow", "tool-start", "queue_full"): 8}
    engine.shutdown(5)


def test_blocking_calls_are_never_dropped(
    gated_server: tuple[TargetServer, threading.Event],
) -> None:
    server, release = gated_server
    reader = InMemoryMetricReader()
    engine = engine_for(server.url("/hook"), reader, blocking=True)
    session = SessionInfo("s-1")
    callers = [
        threading.Thread(target=engine.fire, args=("tool-start", session, {"TOOL_NAME": str(n)}))
        for n in range(LIMIT * 2)
    ]
    for caller in callers:
        caller.start()
    server.wait_for(1)
    release.set()
    for caller in callers:
        caller.join(30)

    assert len(sent(server)) == LIMIT * 2
    assert dropped_counts(reader) == {}
    engine.shutdown(5)
