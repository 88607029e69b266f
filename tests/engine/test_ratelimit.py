"""Rate limits: the token-bucket decisions on plain numbers, the template keys, and the
dispatcher enforcing them against a real loopback server without ever blocking the agent."""

from __future__ import annotations

import itertools
import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_lifecycle_hooks.engine import HookEngine, SessionInfo
from otel_lifecycle_hooks.engine.ratelimit import RateGate, TokenBucket, gates_for
from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.model import RateLimit
from otel_lifecycle_hooks.template.problems import TemplateError
from tests.support.target_server import TargetServer

FIVE_PER_SECOND = RateLimit(5, 1.0, "5/s")


# -- the decisions, on plain numbers ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [("10/min", 10, 60.0), ("5/s", 5, 1.0), ("100/h", 100, 3600.0), (" 3 / Minute ", 3, 60.0)],
)
def test_a_rate_is_a_count_per_unit(text: str, count: int, period: float) -> None:
    limit = RateLimit.parse(text)
    assert (limit.executions, limit.period) == (count, period)


@pytest.mark.parametrize("text", ["10", "0/s", "-1/s", "1.5/s", "5/day", "x/min", "/s", "５/s"])
def test_a_malformed_rate_says_what_would_be_valid(text: str) -> None:
    with pytest.raises(ValueError, match="e.g. 10/min, 5/s or 100/h"):
        RateLimit.parse(text)


def test_a_fresh_bucket_allows_a_burst_then_one_token_per_interval() -> None:
    gate = RateGate([TokenBucket(FIVE_PER_SECOND, now=0.0)])
    assert [gate.admit(0.0) for _ in range(5)] == [0.0] * 5
    assert gate.admit(0.0) == pytest.approx(0.2)
    assert gate.admit(0.1) == pytest.approx(0.1)  # asking again took nothing
    assert gate.admit(0.2) == 0.0
    assert gate.admit(0.2) == pytest.approx(0.2)


def test_a_worker_that_always_waits_its_turn_stays_within_count_plus_rate_times_time() -> None:
    gate = RateGate([TokenBucket(FIVE_PER_SECOND, now=0.0)])
    now, started = 0.0, []
    while now <= 10.0 + 1e-6:
        wait = gate.admit(now)
        if wait == 0.0:
            started.append(now)
        now += wait
    assert len(started) == 5 + 5 * 10  # the burst at 0 s, then one every 0.2 s up to 10 s
    assert all(b - a >= 0.2 - 1e-9 for a, b in itertools.pairwise(started[5:]))


def test_forced_executions_are_counted_and_their_debt_is_bounded_by_one_bucket() -> None:
    bucket = TokenBucket(RateLimit(2, 1.0), now=0.0)
    gate = RateGate([bucket])
    for _ in range(50):  # a blocking hook firing 50 times at once
        assert gate.admit(0.0, force=True) == 0.0
    assert bucket.tokens == -2.0
    assert gate.admit(0.0) == pytest.approx(1.5)  # (1 - (-2)) / 2 per second


def test_the_shared_bucket_limits_the_sum_of_the_hooks_sharing_it() -> None:
    shared = TokenBucket(RateLimit(3, 1.0), now=0.0)
    first = RateGate([TokenBucket(RateLimit(10, 1.0), now=0.0), shared])
    second = RateGate([shared])
    own = next(bucket for bucket in first.buckets if bucket is not shared)
    admitted = [gate.admit(0.0) == 0.0 for gate in (first, second) * 4]
    assert admitted == [True, True, True, False, False, False, False, False]
    assert own.tokens == 8.0  # charged for its two admissions, not for the refusals


def test_only_http_hooks_draw_from_hook_rate_limit() -> None:
    template = load_template_text(
        textwrap.dedent(
            """
            hook_rate_limit: 100/min
            lifecycle_hooks:
              - name: status
                on: [activity-change]
                rate_limit: 5/s
                action: {type: http, url: "http://127.0.0.1:9/status"}
              - name: notify
                on: [task-completed]
                action: {type: webhook, url: "http://127.0.0.1:9/notify"}
              - name: audit
                on: [activity-change]
                action: {type: script, command: ["true"]}
              - name: limited-script
                on: [activity-change]
                rate_limit: 1/h
                action: {type: script, command: ["true"]}
            """
        )
    )
    assert template.hook_rate_limit == RateLimit(100, 60.0, "100/min")
    gates = gates_for(template, now=0.0)
    assert set(gates) == {"status", "notify", "limited-script"}
    limits = {name: sorted(b.limit.text for b in gate.buckets) for name, gate in gates.items()}
    assert limits == {
        "status": ["100/min", "5/s"],
        "notify": ["100/min"],
        "limited-script": ["1/h"],
    }
    (shared,) = gates["notify"].buckets
    assert shared in gates["status"].buckets  # one bucket, not two of the same size


def test_bad_rates_are_reported_with_their_position() -> None:
    with pytest.raises(TemplateError) as caught:
        load_template_text(
            "hook_rate_limit: 100\n"
            "lifecycle_hooks:\n"
            "  - name: status\n"
            "    on: [activity-change]\n"
            "    rate_limit: 5/fortnight\n"
            "    action: {type: http, url: 'http://127.0.0.1:9/'}\n"
        )
    lines = str(caught.value).splitlines()
    assert lines[0].startswith('scion-agent.yaml:1:18: field "hook_rate_limit": got the number 100')
    assert lines[1].startswith(
        'scion-agent.yaml:5:17: hook "status": field "rate_limit": got "5/fortnight"'
    )


# -- the dispatcher, against a real server ----------------------------------------------------


def _engine(yaml_text: str, tmp_path: Path) -> tuple[HookEngine, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    engine = HookEngine(
        load_template_text(textwrap.dedent(yaml_text)),
        meter_provider=MeterProvider(metric_readers=[reader]),
        journal=False,
        hook_log=False,
    )
    return engine, reader


def _counter(reader: InMemoryMetricReader, name: str) -> dict[tuple[Any, ...], int]:
    """A counter's values keyed by (hook, reason or outcome)."""
    data = reader.get_metrics_data()
    values: dict[tuple[Any, ...], int] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    attributes = point.attributes or {}
                    key = (
                        attributes.get("agent.lifecycle_hook.name"),
                        attributes.get("agent.lifecycle_hook.drop_reason")
                        or attributes.get("agent.lifecycle_hook.outcome"),
                    )
                    values[key] = values.get(key, 0) + int(point.value)
    return values


def _wait_until(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _activities(server: TargetServer) -> list[str]:
    return [json.loads(request.body)["activity"] for request in list(server.requests)]


def test_a_thousand_activity_changes_through_5_per_second_deliver_the_last_state(
    tmp_path: Path, target_server: TargetServer
) -> None:
    engine, reader = _engine(
        f"""
        lifecycle_hooks:
          - name: status
            on: [activity-change]
            rate_limit: 5/s
            action:
              type: http
              url: "{target_server.url("/status")}"
              body: '{{"activity": "${{ACTIVITY}}"}}'
        """,
        tmp_path,
    )
    session = SessionInfo("session-1", {"AGENT_ID": "agent-1"})
    # The first change is delivered before the rest come: with a token in hand it neither
    # waits nor is coalesced, whatever the machine's speed. The other 999 may all arrive
    # before the worker wakes (one delivery, the last) or trickle through the burst.
    began = time.monotonic()
    engine.fire("activity-change", session, {"ACTIVITY": "state-0"})
    _wait_until(lambda: "state-0" in _activities(target_server))
    started = time.monotonic()
    for number in range(1, 1000):
        engine.fire("activity-change", session, {"ACTIVITY": f"state-{number}"})
    recording_took = time.monotonic() - started
    # Recording never waits for tokens: 1000 events at 5/s would otherwise take 200 s.
    assert recording_took < 30

    _wait_until(lambda: "state-999" in _activities(target_server))
    ended = time.monotonic()
    engine.shutdown(5)

    requests = list(target_server.requests)
    delivered = _activities(target_server)
    assert delivered[0] == "state-0"
    assert delivered[-1] == "state-999"
    numbers = [int(state.split("-")[1]) for state in delivered]
    assert numbers == sorted(set(numbers))  # never reordered, never sent twice
    # A burst of 5, then 5 per second: every execution took its token between the first
    # fire and the last arrival, so at most 5 + 5·T of them, however slow the machine.
    window = ended - began
    assert 2 <= len(requests) <= 5 + 5 * window, (len(requests), window)

    dropped = _counter(reader, "agent.lifecycle_hook.dropped")
    assert dropped == {("status", "rate_limited"): 1000 - len(requests)}
    executed = _counter(reader, "agent.lifecycle_hook.executions")
    assert executed == {("status", "success"): len(requests)}


def test_lifecycle_events_are_never_delayed_and_push_a_waiting_event_through_in_order(
    tmp_path: Path, target_server: TargetServer
) -> None:
    engine, reader = _engine(
        f"""
        lifecycle_hooks:
          - name: status
            on: [activity-change, pre-stop]
            rate_limit: 1/min
            action:
              type: http
              url: "{target_server.url("/status")}"
              body: '{{"activity": "${{ACTIVITY}}", "event": "${{EVENT}}"}}'
        """,
        tmp_path,
    )
    session = SessionInfo("session-1")
    engine.fire("activity-change", session, {"ACTIVITY": "thinking"})
    target_server.wait_for(1)
    engine.fire("activity-change", session, {"ACTIVITY": "executing"})  # waits a minute
    engine.fire("pre-stop", session, {"ACTIVITY": "idle"})
    requests = target_server.wait_for(3, timeout=30)  # not a minute
    assert [json.loads(r.body)["event"] for r in requests] == [
        "activity-change", "activity-change", "pre-stop",
    ]  # fmt: skip
    # The lifecycle event spent a token it did not have: the next runtime event waits for it,
    # and is reported as dropped when shutdown comes first.
    engine.fire("activity-change", session, {"ACTIVITY": "completed"})
    engine.shutdown(0.5)
    assert len(target_server.requests) == 3
    assert _counter(reader, "agent.lifecycle_hook.dropped") == {("status", "shutdown"): 1}


def test_a_blocking_hook_never_waits_for_a_token(
    tmp_path: Path, target_server: TargetServer
) -> None:
    engine, _ = _engine(
        f"""
        lifecycle_hooks:
          - name: gate
            on: [tool-start]
            blocking: true
            rate_limit: 1/h
            action: {{type: http, url: "{target_server.url("/gate")}"}}
        """,
        tmp_path,
    )
    session = SessionInfo("session-1")
    results = [engine.fire("tool-start", session, {"TOOL_NAME": "Bash"}) for _ in range(3)]
    engine.shutdown(5)
    assert [r.executions[0].outcome for r in results] == ["success"] * 3
    assert len(target_server.requests) == 3


def test_hook_rate_limit_is_shared_by_the_http_hooks_and_spares_scripts(
    tmp_path: Path, target_server: TargetServer
) -> None:
    lines = tmp_path / "script.lines"
    append = [sys.executable, "-c", f"open({str(lines)!r}, 'a').write('x\\n')"]
    engine, reader = _engine(
        f"""
        hook_rate_limit: 2/min
        lifecycle_hooks:
          - name: first
            on: [activity-change]
            action: {{type: http, url: "{target_server.url("/first")}"}}
          - name: second
            on: [activity-change]
            action: {{type: webhook, url: "{target_server.url("/second")}"}}
          - name: audit
            on: [activity-change]
            action: {{type: script, command: {json.dumps(append)}}}
        """,
        tmp_path,
    )
    session = SessionInfo("session-1")
    for number in range(5):
        engine.fire("activity-change", session, {"ACTIVITY": f"state-{number}"})
    _wait_until(lambda: lines.exists() and len(lines.read_text().splitlines()) == 5)
    target_server.wait_for(2)
    engine.shutdown(0.5)

    # One token each from the shared bucket of 2; the script hook ran for every event.
    assert sorted(r.path for r in target_server.requests) == ["/first", "/second"]
    dropped = _counter(reader, "agent.lifecycle_hook.dropped")
    for hook in ("first", "second"):
        never_ran = dropped.get((hook, "rate_limited"), 0) + dropped.get((hook, "shutdown"), 0)
        assert never_ran == 4, dropped
