"""A blocking call that finds its hook idle runs on the caller's thread: a hook's executions
still never overlap or reorder, the rate limit is still charged, and the run sees no caller
context. The executor here is a stand-in whose runs wait on gates the test opens, so every
interleaving is forced rather than hoped for.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_lifecycle_hooks.engine.clock import SYSTEM_CLOCK
from otel_lifecycle_hooks.engine.dispatch import Dispatcher, EngineListener, HookQueue, _Job
from otel_lifecycle_hooks.engine.model import Execution, LifecycleEvent, SessionInfo
from otel_lifecycle_hooks.engine.ratelimit import RateGate, TokenBucket
from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.model import HookSpec, RateLimit, Template

WAIT = 60.0  # seconds: a bound for hang checks only


def blocking_template(extra: str = "") -> Template:
    return load_template_text(
        textwrap.dedent(
            f"""
            lifecycle_hooks:
              - name: announce
                on: [task-completed, post-start]
                action:
                  type: script
                  command: ["true"]
                blocking: true
            {extra}
            """
        )
    )


class GatedExecutor:
    """Records who ran what, and how many runs overlapped; a run whose event carries a
    `GATE` field waits until the test opens that gate."""

    clock = SYSTEM_CLOCK

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.gates: dict[str, threading.Event] = {}
        self.started: dict[str, threading.Event] = {}
        self.log: list[tuple[str, str]] = []  # (start | end, event id)
        self.threads: dict[str, str] = {}  # event id -> thread name it ran on
        self.saw_active_span: dict[str, bool] = {}
        self.max_active = 0
        self._active = 0
        self._lock = threading.Lock()

    def gate(self, name: str) -> threading.Event:
        self.started[name] = threading.Event()
        return self.gates.setdefault(name, threading.Event())

    def run(
        self,
        hook: HookSpec,
        event: LifecycleEvent,
        session: SessionInfo,
        deadline: float | None = None,
        claim: Callable[[], bool] | None = None,  # nothing is recorded here
    ) -> Execution:
        with self._lock:
            self._active += 1
            self.max_active = max(self.max_active, self._active)
            self.log.append(("start", event.event_id))
            self.threads[event.event_id] = threading.current_thread().name
            self.saw_active_span[event.event_id] = (
                trace.get_current_span().get_span_context().is_valid
            )
        gate_name = event.fields.get("GATE")
        if gate_name:
            self.started[gate_name].set()
            assert self.gates[gate_name].wait(WAIT), "the test never opened the gate"
        with self._lock:
            self._active -= 1
            self.log.append(("end", event.event_id))
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


def event(gate: str | None = None) -> LifecycleEvent:
    return LifecycleEvent("task-completed", {"GATE": gate} if gate else {})


SESSION = SessionInfo(session_id="s-1")


def wait_until(condition: Callable[[], bool]) -> None:
    stop = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < stop, "condition never became true"
        time.sleep(0.001)


@pytest.fixture
def executor() -> GatedExecutor:
    return GatedExecutor()


def test_an_idle_blocking_hook_runs_on_the_callers_thread_without_its_context(executor):
    dispatcher = Dispatcher(blocking_template(), executor)  # type: ignore[arg-type]
    provider = TracerProvider()
    first = event()
    with provider.get_tracer("test").start_as_current_span("caller's span"):
        result = dispatcher.dispatch(first, SESSION)
    dispatcher.shutdown(WAIT)

    assert [e.outcome for e in result.executions] == ["success"]
    assert executor.threads[first.event_id] == threading.current_thread().name
    # As on a worker thread: the caller's active span does not become the hook's context.
    assert executor.saw_active_span[first.event_id] is False


def test_a_blocking_call_waits_for_a_queued_run_of_the_same_hook(executor):
    dispatcher = Dispatcher(blocking_template(), executor)  # type: ignore[arg-type]
    queue = dispatcher._queues["announce"]
    in_flight = event(gate="first")
    release_first = executor.gate("first")
    queue.submit(_Job(in_flight, SESSION))  # a run the caller does not wait for
    assert executor.started["first"].wait(WAIT)

    blocking = event()
    results = []
    caller = threading.Thread(target=lambda: results.append(dispatcher.dispatch(blocking, SESSION)))
    caller.start()
    # The caller found the hook running: its job is queued behind the in-flight run.
    wait_until(lambda: dispatcher.queue_depth("announce") == 2)
    assert ("start", blocking.event_id) not in executor.log
    release_first.set()
    caller.join(WAIT)
    dispatcher.shutdown(WAIT)

    assert not caller.is_alive()
    assert [e.event.event_id for e in results[0].executions] == [blocking.event_id]
    assert executor.log == [
        ("start", in_flight.event_id),
        ("end", in_flight.event_id),
        ("start", blocking.event_id),
        ("end", blocking.event_id),
    ]
    assert executor.max_active == 1


def test_a_queued_job_waits_for_an_inline_run(executor):
    dispatcher = Dispatcher(blocking_template(), executor)  # type: ignore[arg-type]
    queue = dispatcher._queues["announce"]
    inline = event(gate="inline")
    release_inline = executor.gate("inline")
    caller = threading.Thread(target=dispatcher.dispatch, args=(inline, SESSION))
    caller.start()
    assert executor.started["inline"].wait(WAIT)
    assert executor.threads[inline.event_id] == caller.name  # it runs inline

    queued = event()
    queue.submit(_Job(queued, SESSION))  # the worker starts, and must not run it yet
    wait_until(lambda: dispatcher.queue_depth("announce") == 2)
    assert ("start", queued.event_id) not in executor.log
    release_inline.set()
    caller.join(WAIT)
    assert dispatcher.wait_idle(WAIT)
    dispatcher.shutdown(WAIT)

    assert executor.log == [
        ("start", inline.event_id),
        ("end", inline.event_id),
        ("start", queued.event_id),
        ("end", queued.event_id),
    ]
    assert executor.threads[queued.event_id].startswith("hook-worker-")


def test_concurrent_blocking_callers_never_run_the_hook_at_once(executor):
    dispatcher = Dispatcher(blocking_template(), executor)  # type: ignore[arg-type]
    first = event(gate="first")
    release_first = executor.gate("first")
    others = [event() for _ in range(5)]
    results: dict[str, list[str]] = {}

    def call(e: LifecycleEvent) -> None:
        results[e.event_id] = [x.event.event_id for x in dispatcher.dispatch(e, SESSION).executions]

    callers = [threading.Thread(target=call, args=(first,))]
    callers[0].start()
    assert executor.started["first"].wait(WAIT)
    callers += [threading.Thread(target=call, args=(e,)) for e in others]
    for thread in callers[1:]:
        thread.start()
    # Every other caller found the hook busy and queued: 1 running + 5 waiting.
    wait_until(lambda: dispatcher.queue_depth("announce") == 6)
    release_first.set()
    for thread in callers:
        thread.join(WAIT)
    dispatcher.shutdown(WAIT)

    assert not any(thread.is_alive() for thread in callers)
    assert executor.max_active == 1
    # Each caller got its own execution back, and every run ended before the next started.
    assert results == {e.event_id: [e.event_id] for e in [first, *others]}
    assert [kind for kind, _ in executor.log] == ["start", "end"] * 6
    assert executor.threads[first.event_id] == callers[0].name
    assert all(executor.threads[e.event_id].startswith("hook-worker") for e in others)


def test_a_call_with_a_deadline_runs_on_the_worker(executor):
    dispatcher = Dispatcher(blocking_template(), executor)  # type: ignore[arg-type]
    with_deadline = event()
    result = dispatcher.dispatch(with_deadline, SESSION, deadline=SYSTEM_CLOCK.monotonic() + WAIT)
    dispatcher.shutdown(WAIT)

    assert [e.outcome for e in result.executions] == ["success"]
    # The caller must be able to walk away at its deadline: the run is on another thread.
    assert executor.threads[with_deadline.event_id].startswith("hook-worker-")


def test_an_inline_run_spends_a_rate_limit_token(executor):
    hook = blocking_template().hooks[0]
    bucket = TokenBucket(RateLimit(executions=3, period=60.0), SYSTEM_CLOCK.monotonic())
    queue = HookQueue(hook, executor, EngineListener(), gate=RateGate([bucket]))  # type: ignore[arg-type]
    for _ in range(5):  # blocking calls never wait for a token, but each spends one
        job = _Job(event(), SESSION, future=Future())
        assert queue.run_inline(job)
        assert job.future is not None and job.future.result(0).outcome == "success"

    assert bucket.tokens == pytest.approx(-2.0, abs=0.01)  # 3 - 5: in debt
    assert executor.max_active == 1


def test_shutdown_waits_for_an_inline_run(executor):
    dispatcher = Dispatcher(blocking_template(), executor)  # type: ignore[arg-type]
    queue = dispatcher._queues["announce"]
    inline = event(gate="inline")
    release_inline = executor.gate("inline")
    caller = threading.Thread(target=dispatcher.dispatch, args=(inline, SESSION))
    caller.start()
    assert executor.started["inline"].wait(WAIT)

    assert queue.join(0.05) is False  # still running on the caller's thread
    release_inline.set()
    assert queue.join(WAIT) is True
    caller.join(WAIT)
    dispatcher.shutdown(WAIT)
    assert executor.log[-1] == ("end", inline.event_id)
