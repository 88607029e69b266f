"""Hooks share a small pool of worker threads: each hook's executions still run one at a time
and in the order their events came; a thousand hooks take no more threads than the pool; a
blocking hook never waits for a worker; hooks hanging until their timeout hold their worker
until it fires, and the others go on after; an exit still ends within its drain deadline and
journals what it left undone.

The ordering property runs against an executor stand-in that yields at random points, so that
many interleavings are tried; everything else against real loopback servers and a real engine.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_lifecycle_hooks.engine.clock import SYSTEM_CLOCK
from otel_lifecycle_hooks.engine.dispatch import Dispatcher
from otel_lifecycle_hooks.engine.model import Execution, LifecycleEvent, SessionInfo
from otel_lifecycle_hooks.engine.observers import ExecutionCallback
from otel_lifecycle_hooks.engine.workers import (
    DEFAULT_WORKERS,
    WORKERS_ENV,
    WorkerPool,
    workers_from,
)
from otel_lifecycle_hooks.template.model import HookSpec
from tests.engine.counting_server import CountingServer
from tests.engine.pool_hooks import hooks_yaml, http_hook, new_engine, pre_stop_check

WAIT = 60.0  # seconds: a bound for hang checks only
SESSION = SessionInfo(session_id="s-pool")
EVENTS = ("tool-start", "tool-end", "notification", "task-completed")


class Completions:
    """An execution sink: every execution, in the order they ended."""

    def __init__(self) -> None:
        self.executions: list[Execution] = []
        self._lock = threading.Condition()

    def __call__(self, execution: Execution) -> None:
        with self._lock:
            self.executions.append(execution)
            self._lock.notify_all()

    def wait_for(self, count: int) -> list[Execution]:
        with self._lock:
            assert self._lock.wait_for(lambda: len(self.executions) >= count, WAIT), (
                f"{len(self.executions)} of {count} executions ended"
            )
            return list(self.executions)


# -- the size setting ---------------------------------------------------------------------------


def test_the_pool_size_comes_from_the_environment_and_a_bad_value_says_what_is_valid(caplog):
    assert workers_from({}) == DEFAULT_WORKERS
    assert workers_from({WORKERS_ENV: " 4 "}) == 4
    for bad in ("0", "-3", "many", "2.5", "100000"):
        caplog.clear()
        assert workers_from({WORKERS_ENV: bad}) == DEFAULT_WORKERS
        assert f"{WORKERS_ENV}={bad!r}: write a whole number from 1 to 256" in caplog.text


def test_an_engine_takes_its_pool_size_from_its_environment(engines):
    template = hooks_yaml([http_hook("one", "http://127.0.0.1:9/x")])
    engine = new_engine(engines, template, environ={WORKERS_ENV: "3"})
    assert engine.dispatcher.pool.size == 3


def test_a_pool_refuses_to_have_no_worker():
    with pytest.raises(ValueError, match="at least one worker"):
        WorkerPool(0)


# -- order, under many interleavings ------------------------------------------------------------


class YieldingExecutor:
    """Runs nothing but records each run; sleeps a random moment (0-2 ms) so that workers
    interleave differently on every example. Counts overlapping runs per hook."""

    clock = SYSTEM_CLOCK

    def __init__(self, seed: int) -> None:
        self.stopping = threading.Event()
        self.ran: dict[str, list[str]] = {}
        self.overlaps = 0
        self.most_at_once = 0
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self._random = random.Random(seed)

    def run(
        self,
        hook: HookSpec,
        event: LifecycleEvent,
        session: SessionInfo,
        deadline: float | None = None,
        claim: Callable[[], bool] | None = None,  # nothing is recorded here
    ) -> Execution:
        with self._lock:
            if hook.name in self._running:
                self.overlaps += 1
            self._running.add(hook.name)
            self.most_at_once = max(self.most_at_once, len(self._running))
            pause = self._random.choice((0.0, 0.0, 0.0005, 0.002))
        time.sleep(pause)
        with self._lock:
            self.ran.setdefault(hook.name, []).append(event.fields["SEQ"])
            self._running.discard(hook.name)
        return Execution(
            hook=hook,
            event=event,
            session_id=session.session_id,
            outcome="success",
            attempts=1,
            duration=0.0,
            started_at=0.0,
            idempotency_key=event.event_id,
        )


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # each example starts real threads
@given(
    workers=st.integers(min_value=1, max_value=5),
    subscriptions=st.lists(
        st.tuples(st.sets(st.sampled_from(EVENTS), min_size=1), st.booleans()),
        min_size=1,
        max_size=30,
    ),
    fired=st.lists(st.sampled_from(EVENTS), min_size=1, max_size=40),
    seed=st.integers(0, 2**16),
)
def test_each_hook_runs_its_events_one_at_a_time_in_the_order_they_came(
    workers, subscriptions, fired, seed
):
    entries = [
        f"  - name: h{index}\n    on: [{', '.join(sorted(events))}]\n"
        f"    blocking: {'true' if blocking else 'false'}\n"
        '    action: {type: script, command: ["true"]}\n'
        for index, (events, blocking) in enumerate(subscriptions)
    ]
    template = hooks_yaml(entries)
    executor = YieldingExecutor(seed)
    dispatcher = Dispatcher(template, executor, workers=workers)  # type: ignore[arg-type]
    for number, name in enumerate(fired):
        dispatcher.dispatch(LifecycleEvent(name, {"SEQ": str(number)}), SESSION)
    assert dispatcher.wait_idle(WAIT)
    dispatcher.shutdown(WAIT)

    expected = {
        f"h{index}": [str(n) for n, name in enumerate(fired) if name in events]
        for index, (events, _) in enumerate(subscriptions)
    }
    assert {hook: seqs for hook, seqs in executor.ran.items()} == {
        hook: seqs for hook, seqs in expected.items() if seqs
    }
    assert executor.overlaps == 0
    # Blocking runs may be on the dispatching thread, and never wait for a worker.
    blocking_hooks = sum(1 for _, blocking in subscriptions if blocking)
    assert executor.most_at_once <= workers + min(blocking_hooks, 1)
    assert dispatcher.pool.threads <= workers
    assert dispatcher.pool.most_serving <= workers


class CountingQueue:
    """A hook queue whose every serve() is one execution, counted."""

    def __init__(self) -> None:
        self.served = threading.Event()

    def serve(self) -> None:
        self.served.set()


def test_work_arriving_while_a_new_worker_starts_never_starts_one_past_the_bound(monkeypatch):
    """A worker just started has not looked for work yet (here it is held right there, as a
    thread the scheduler set aside would be): work arriving then must wait for it, not start
    a second worker in a pool of one."""
    about_to_look, go_on = threading.Event(), threading.Event()
    look_for_work = WorkerPool._next

    def held_before_looking(self: WorkerPool, *args: object) -> object:
        about_to_look.set()
        assert go_on.wait(WAIT)
        return look_for_work(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(WorkerPool, "_next", held_before_looking)
    pool = WorkerPool(size=1)
    first, second = CountingQueue(), CountingQueue()
    pool.wake(first)
    assert about_to_look.wait(WAIT)
    pool.wake(second)
    assert pool.threads == 1
    go_on.set()
    assert first.served.wait(WAIT) and second.served.wait(WAIT)
    assert pool.threads == 1
    pool.stop()


def test_over_real_http_every_hooks_requests_arrive_all_and_in_order(engines):
    with CountingServer() as server:
        hooks = [http_hook(f"h{i}", server.url(f"/h{i}")) for i in range(40)]
        engine = new_engine(engines, hooks_yaml(hooks), workers=4)
        for seq in range(25):
            engine.fire("tool-start", SESSION, {"TOOL_NAME": str(seq)})
        arrivals = server.wait_for(40 * 25)

    by_hook: dict[str, list[int]] = {}
    for arrival in arrivals:
        by_hook.setdefault(arrival.path, []).append(int(json.loads(arrival.body)["seq"]))
    assert by_hook == {f"/h{i}": list(range(25)) for i in range(40)}


# -- threads and connections at scale -----------------------------------------------------------


def test_a_thousand_hooks_on_one_event_share_the_pools_threads(engines):
    with CountingServer() as server:
        hooks = [http_hook(f"h{i}", server.url(f"/h{i}")) for i in range(1000)]
        engine = new_engine(engines, hooks_yaml(hooks), workers=8)
        before = threading.active_count()
        for seq in range(3):
            engine.fire("tool-start", SESSION, {"TOOL_NAME": str(seq)})
        arrivals = server.wait_for(3000)
        assert engine.force_flush(WAIT)

    assert len({(a.path, a.body) for a in arrivals}) == 3000
    # At most eight workers and the attempts' one deadline watchdog, whatever the number of
    # hooks (a thread per hook made it a thousand).
    assert max(a.threads for a in arrivals) <= before + 8 + 1
    assert 1 <= engine.dispatcher.pool.threads <= 8


def test_a_pool_starts_no_more_workers_than_the_work_needs(engines):
    with CountingServer() as server:
        engine = new_engine(engines, hooks_yaml([http_hook("only", server.url("/only"))]))
        for seq in range(20):
            engine.fire("tool-start", SESSION, {"TOOL_NAME": str(seq)})
        server.wait_for(20)
        assert engine.force_flush(WAIT)
    assert engine.dispatcher.pool.threads == 1  # one hook runs one execution at a time


def test_new_connections_per_event_are_no_more_than_the_distinct_origins(engines):
    servers = [CountingServer(), CountingServer(), CountingServer()]
    with servers[0], servers[1], servers[2]:
        hooks = [
            http_hook(f"h{i}", servers[i % 3].url(f"/h{i}"))
            for i in range(90)  # thirty hooks on each origin
        ]
        engine = new_engine(engines, hooks_yaml(hooks), workers=6)
        engine.fire("tool-start", SESSION, {"TOOL_NAME": "0"})
        for server in servers:
            server.wait_for(30)
        assert engine.force_flush(WAIT)
        # No origin ever has more requests in flight than there are workers.
        warm = [server.accepted for server in servers]
        assert all(1 <= count <= 6 for count in warm)

        for seq in range(1, 6):
            engine.fire("tool-start", SESSION, {"TOOL_NAME": str(seq)})
        for server in servers:
            server.wait_for(30 * 6)
        assert engine.force_flush(WAIT)
        opened = sum(server.accepted for server in servers) - sum(warm)

    # The idle connections of the first event are kept and reused: five more events open
    # at most one per origin each (in practice none).
    assert opened <= 3 * 5


def test_hooks_sharing_a_connection_never_share_a_credential(engines):
    token = "hub-token-5f0c1e"
    with CountingServer() as server:
        hooks = [
            http_hook(
                "with-token",
                server.url("/with-token"),
                extra="    auth: {type: bearer-token, token_env: HUB_TOKEN}\n",  # the action's
            ),
            http_hook("without", server.url("/without")),
        ]
        # One worker: both hooks' requests take turns on the one kept-alive connection.
        engine = new_engine(engines, hooks_yaml(hooks), workers=1, environ={"HUB_TOKEN": token})
        for seq in range(10):
            engine.fire("tool-start", SESSION, {"TOOL_NAME": str(seq)})
        arrivals = server.wait_for(20)

    assert {a.connection for a in arrivals} == {1}
    assert {a.path for a in arrivals} == {"/with-token", "/without"}
    for arrival in arrivals:
        if arrival.path == "/with-token":
            assert arrival.headers["authorization"] == f"Bearer {token}"
        else:
            assert "authorization" not in arrival.headers
            assert token not in str(arrival.headers)


# -- blocking hooks and hanging hooks -----------------------------------------------------------


def test_a_blocking_hook_does_not_wait_for_workers_held_by_hanging_hooks(engines):
    with CountingServer(hang=("/hang",)) as server:
        hooks = [
            http_hook(f"slow-{i}", server.url("/hang"), extra="  timeout: 120s\n") for i in range(3)
        ]
        hooks.append(pre_stop_check(server.url("/ok")))
        engine = new_engine(engines, hooks_yaml(hooks), workers=2)
        engine.fire("tool-start", SESSION, {"TOOL_NAME": "0"})
        server.wait_for(2)  # both workers now hang on a request that is never answered
        deadline = time.monotonic() + WAIT
        result = engine.fire("pre-stop", SESSION, deadline=deadline)

        assert [e.outcome for e in result.executions] == ["success"]
        # The hanging hooks still hold both workers, and the third still waits for one.
        assert engine.dispatcher.queue_depth("slow-0") == 1
        assert engine.dispatcher.queue_depth("slow-1") == 1
        assert engine.dispatcher.queue_depth("slow-2") == 1
        assert engine.dispatcher.pool.threads == 2


def test_more_hooks_hanging_until_their_timeout_than_workers_delay_the_others_until_they_fire(
    engines,
):
    completions = Completions()
    with CountingServer(hang=("/hang",)) as server:
        hooks = [
            http_hook(f"hang-{i}", server.url("/hang"), extra="  timeout: 300ms\n")
            for i in range(5)
        ]
        hooks.append(http_hook("quick", server.url("/quick")))
        engine = new_engine(engines, hooks_yaml(hooks), workers=2)
        engine.executor.observers.add(ExecutionCallback(completions))
        engine.fire("tool-start", SESSION, {"TOOL_NAME": "0"})
        ended = completions.wait_for(6)

    names = [e.hook.name for e in ended]
    outcomes = {e.hook.name: e.outcome for e in ended}
    assert outcomes == {**{f"hang-{i}": "timeout" for i in range(5)}, "quick": "success"}
    # Two workers, hooks served in declaration order: the quick hook got a worker only when
    # the fourth hanging hook's timeout fired (two rounds of timeouts), never before.
    assert names.index("quick") >= 4


# -- the exit drain ------------------------------------------------------------------------------


def test_an_exit_with_more_hooks_than_workers_is_bounded_and_journals_what_it_left(
    engines, tmp_path: Path
):
    journal = tmp_path / "journal.sqlite3"
    with CountingServer(hang=("/hang",)) as server:
        hooks = [
            http_hook(f"h{i}", server.url("/hang"), extra="  timeout: 120s\n") for i in range(200)
        ]
        engine = new_engine(engines, hooks_yaml(hooks), workers=2, journal=journal)
        engine.fire("tool-start", SESSION, {"TOOL_NAME": "0"})
        server.wait_for(2)
        # Two in flight until their two-minute timeout, 198 waiting for a worker.
        finished = threading.Event()

        def shut() -> None:
            engine.shutdown(0.3)
            finished.set()

        threading.Thread(target=shut, daemon=True).start()
        # Bounded: the drain deadline and one shared half second, not a half second per
        # queue (which would be 100 s) nor the hanging requests' timeout.
        assert finished.wait(WAIT)

    with sqlite3.connect(journal) as db:
        rows = db.execute("SELECT hook, outcome FROM executions").fetchall()
    outcomes: dict[str, list[str]] = {}
    for hook, outcome in rows:
        outcomes.setdefault(outcome, []).append(hook)
    assert len(outcomes.get("interrupted", [])) == 2
    assert len(outcomes.get("dropped", [])) == 198
    assert len({hook for hook, _ in rows}) == 200  # every hook's delivery has its row


def test_each_origin_has_a_connection_pool_of_its_own_and_past_the_bound_they_share_one():
    import httpx

    from otel_lifecycle_hooks.actions.http import _PerOrigin

    made: list[object] = []

    def make() -> object:
        made.append(object())
        return made[-1]

    shared = object()
    pools = _PerOrigin(make, shared)
    first = pools.pool_for(httpx.URL("http://127.0.0.1:8000/a"))
    assert pools.pool_for(httpx.URL("http://127.0.0.1:8000/b?q=1")) is first
    assert pools.pool_for(httpx.URL("https://127.0.0.1:8000/a")) is not first  # scheme
    assert pools.pool_for(httpx.URL("http://localhost:8000/a")) is not first  # host
    for port in range(8001, 8001 + _PerOrigin.MAX_POOLS):
        pools.pool_for(httpx.URL(f"http://127.0.0.1:{port}/"))
    assert len(made) == _PerOrigin.MAX_POOLS
    assert pools.pool_for(httpx.URL("http://127.0.0.1:9999/")) is shared
    assert len(pools.pools()) == _PerOrigin.MAX_POOLS + 1
