"""How many workers serve at once follows the work: while the line of waiting hooks keeps
moving, one worker serves it (more would only take turns at the interpreter lock); when every
serving worker is held by an execution that waits, another joins, up to the pool's bound; a
blocking hook never waits for that rule. Each hook's executions stay serial and in order.

Against real loopback servers and a real engine, except where an execution must wait for the
test's word (a stand-in executor that holds each run until released). Where a test must rule
out "the line stood still" it sets STARVED_AFTER to an hour, so no result depends on timing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from otel_lifecycle_hooks.engine import workers
from otel_lifecycle_hooks.engine.clock import SYSTEM_CLOCK
from otel_lifecycle_hooks.engine.dispatch import Dispatcher
from otel_lifecycle_hooks.engine.model import Execution, LifecycleEvent, SessionInfo
from otel_lifecycle_hooks.template.model import HookSpec, Template
from tests.engine.counting_server import CountingServer
from tests.engine.pool_hooks import hooks_yaml, http_hook, new_engine, pre_stop_check

WAIT = 60.0  # seconds: a bound for hang checks only
SESSION = SessionInfo(session_id="s-adapt")
AN_HOUR = 3600.0


class HeldExecutor:
    """Each run waits until the test releases all runs; counts the runs on at once."""

    clock = SYSTEM_CLOCK

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.released = threading.Event()
        self.ran: dict[str, list[str]] = {}
        self.running = 0
        self.most_at_once = 0
        self._state = threading.Condition()

    def run(
        self,
        hook: HookSpec,
        event: LifecycleEvent,
        session: SessionInfo,
        deadline: float | None = None,
        claim: Callable[[], bool] | None = None,  # nothing is recorded here
    ) -> Execution:
        with self._state:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            self._state.notify_all()
        self.released.wait(WAIT)
        with self._state:
            self.running -= 1
            self.ran.setdefault(hook.name, []).append(event.fields["SEQ"])
            self._state.notify_all()
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

    def wait_running(self, count: int) -> int:
        with self._state:
            self._state.wait_for(lambda: self.running >= count, WAIT)
            return self.running


def script_hooks(count: int) -> Template:
    return hooks_yaml(
        [
            f"  - name: h{index}\n    on: [tool-start]\n"
            '    action: {type: script, command: ["true"]}\n'
            for index in range(count)
        ]
    )


def test_a_burst_to_fast_endpoints_is_served_by_one_worker_while_its_line_moves(
    engines, monkeypatch
):
    # The line never counts as stood still: whatever joins, joins for another reason.
    monkeypatch.setattr(workers, "STARVED_AFTER", AN_HOUR)
    with CountingServer() as server:
        hooks = [http_hook(f"h{i}", server.url(f"/h{i}")) for i in range(100)]
        engine = new_engine(engines, hooks_yaml(hooks), workers=8)
        for seq in range(3):
            engine.fire("tool-start", SESSION, {"TOOL_NAME": str(seq)})
        arrivals = server.wait_for(300)
        assert engine.force_flush(WAIT)

    by_hook: dict[str, list[int]] = {}
    for arrival in arrivals:
        by_hook.setdefault(arrival.path, []).append(int(json.loads(arrival.body)["seq"]))
    assert by_hook == {f"/h{i}": [0, 1, 2] for i in range(100)}
    pool = engine.dispatcher.pool
    assert pool.most_serving == 1
    assert pool.threads <= 2  # the one serving, and one waiting to see whether the line moves


def test_workers_held_by_waiting_executions_are_joined_by_others_up_to_the_bound():
    executor = HeldExecutor()
    dispatcher = Dispatcher(script_hooks(6), executor, workers=4)  # type: ignore[arg-type]
    try:
        dispatcher.dispatch(LifecycleEvent("tool-start", {"SEQ": "0"}), SESSION)
        # Each held run stands the line still until another worker joins, up to four.
        assert executor.wait_running(4) == 4
        assert dispatcher.pool.threads == 4
        executor.released.set()
        assert dispatcher.wait_idle(WAIT)
    finally:
        executor.released.set()
        dispatcher.shutdown(WAIT)
    assert executor.ran == {f"h{i}": ["0"] for i in range(6)}
    assert executor.most_at_once == 4
    assert dispatcher.pool.most_serving == 4


def test_slow_endpoints_are_requested_in_parallel_up_to_the_bound(engines):
    with CountingServer(hang=("/hang",)) as server:
        hooks = [
            http_hook(f"slow-{i}", server.url("/hang"), extra="  timeout: 120s\n")
            for i in range(10)
        ]
        engine = new_engine(engines, hooks_yaml(hooks), workers=8)
        engine.fire("tool-start", SESSION, {"TOOL_NAME": "0"})
        # Eight requests in flight at once, every one unanswered: a worker joined each time
        # the others were all held.
        assert len(server.wait_for(8)) == 8
        pool = engine.dispatcher.pool
        assert pool.threads == 8
        assert pool.most_serving == 8  # and never more: the last two wait for a worker


def test_a_blocking_hook_is_served_at_once_even_while_the_line_is_said_to_move(
    engines, monkeypatch
):
    monkeypatch.setattr(workers, "STARVED_AFTER", AN_HOUR)
    with CountingServer(hang=("/hang",)) as server:
        hooks = [
            http_hook("hangs", server.url("/hang"), extra="  timeout: 120s\n"),
            http_hook("waits", server.url("/waits")),
            pre_stop_check(server.url("/ok")),
        ]
        engine = new_engine(engines, hooks_yaml(hooks), workers=4)
        engine.fire("tool-start", SESSION, {"TOOL_NAME": "0"})
        server.wait_for(1)  # the one serving worker hangs; "waits" is left in the line
        result = engine.fire("pre-stop", SESSION, deadline=SYSTEM_CLOCK.monotonic() + WAIT)

        assert [e.outcome for e in result.executions] == ["success"]
        assert engine.dispatcher.pool.most_serving == 2  # the hanging run and pre-stop's


def test_a_hanging_hook_holds_one_worker_and_the_line_goes_on_without_it(engines):
    with CountingServer(hang=("/hang",)) as server:
        hooks = [http_hook("hangs", server.url("/hang"), extra="  timeout: 120s\n")]
        hooks += [http_hook(f"h{i}", server.url(f"/h{i}")) for i in range(50)]
        engine = new_engine(engines, hooks_yaml(hooks), workers=8)
        for seq in range(2):
            engine.fire("tool-start", SESSION, {"TOOL_NAME": str(seq)})
        # The hanging request is never answered, and every other hook's two still arrive.
        arrivals = server.wait_for(1 + 50 * 2)

    by_hook: dict[str, list[int]] = {}
    for arrival in arrivals:
        by_hook.setdefault(arrival.path, []).append(int(json.loads(arrival.body)["seq"]))
    assert by_hook == {"/hang": [0], **{f"/h{i}": [0, 1] for i in range(50)}}
