"""Dispatch: which hooks an event fires, in what order, who waits, and what is coalesced.

Each hook owns one queue, and a queue runs one execution at a time, so a hook's executions
never overlap or reorder; a small pool of worker threads shared by every hook serves the
queues (workers.py: its size, and why blocking hooks never wait for a worker). Blocking hooks
go through the same queue and the recording call waits for them;
non-blocking ones are queued and the call returns at once. A blocking call without a deadline
that finds its hook idle (nothing queued, pending or running) runs on the caller's own thread
instead, holding the queue as running meanwhile: the caller would only wait for the worker,
and two thread hand-offs are a visible share of a short script hook. A debounced hook keeps
only the latest event of its window; when stopping begins, every window closes at once
(`close_windows`). Queues are bounded: past the bound the oldest runtime event of a
non-blocking hook is dropped and counted, never a lifecycle event or a blocking one.

A rate-limited hook (`rate_limit:`, and `hook_rate_limit:` for HTTP hooks) keeps at most one
runtime event of a non-blocking hook waiting for its token: a newer one replaces it (the newest
wins; the replaced one is counted as dropped, reason `rate_limited`). Lifecycle events and
blocking calls never wait for a token and are never dropped; they still spend one, and a
runtime event waiting in front of them is let through with them so that order is kept.

A delivery has one end, recorded once: at shutdown, the dispatcher records a delivery still in
flight as `interrupted` (the process may end before it does) only if it claims that delivery's
end first; a delivery that then ends after all rewrites that journal row with what it did
(`replay` must not send a delivery that arrived), and is not counted a second time. Its own
run, cut short by the operator, records the same form (outcome and error type `interrupted`),
so that which of the two records it never shows.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from .. import events as ev
from ..template.model import HookSpec, Template
from .executor import HookExecutor
from .gates import GateDecision, merge
from .model import Execution, LifecycleEvent, SessionInfo
from .policies import INTERRUPTED, DebounceWindow, fails_transition
from .ratelimit import RateGate, gates_for
from .workers import DEFAULT_WORKERS, WorkerPool

log = logging.getLogger("otel_lifecycle_hooks.engine")

DEFAULT_QUEUE_LIMIT = 1024
DROP_LOG_EVERY = 1000


@dataclass(slots=True, eq=False)
class _Job:
    """One event queued for a hook's worker, and the caller's future when it waits."""

    event: LifecycleEvent
    session: SessionInfo
    future: Future[Execution] | None = None  # set when a caller waits for it
    deadline: float | None = None
    # Who records this job's end: its run (`ended`) or the shutdown that stopped waiting for
    # it (`given_up`), whichever takes `end_lock` first. The shutdown records it under the
    # lock, so a run that ends meanwhile finds that record made, to rewrite.
    ended: bool = False
    given_up: bool = False
    end_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def droppable(self) -> bool:
        return self.future is None and self.event.name not in ev.LIFECYCLE_EVENTS

    def claim_end(self) -> bool:
        """Whether the job's run records its own end: False when the shutdown gave up on it
        and recorded it as interrupted already."""
        with self.end_lock:
            self.ended = not self.given_up
            return self.ended


# Filled in as the blocking hooks finish: mutable, compared by identity.
@dataclass(slots=True, eq=False)
class DispatchResult:
    """What the blocking hooks of one event did; `failed` is the hook that aborts the
    transition (`on_error: fail`), if any."""

    event: LifecycleEvent
    executions: list[Execution] = field(default_factory=list)
    failed: Execution | None = None

    @property
    def ok(self) -> bool:
        return self.failed is None

    @property
    def gated(self) -> bool:
        """Whether any gate of the event decided something (engine/gates.py)."""
        return any(execution.decision is not None for execution in self.executions)

    @property
    def decision(self) -> GateDecision:
        """The event's gates' decisions merged in declaration order (allow when none)."""
        return merge(execution.decision for execution in self.executions)


class EngineListener:
    """Told of queue-level happenings (metrics implement it); every method is optional."""

    def debounced(self, hook: HookSpec, event: LifecycleEvent) -> None: ...

    def dropped(self, hook: HookSpec, event: LifecycleEvent, reason: str) -> None: ...


class HookQueue:
    """The serial queue of one hook, served by the pool's workers one execution at a time."""

    def __init__(
        self,
        hook: HookSpec,
        executor: HookExecutor,
        listener: EngineListener,
        limit: int = DEFAULT_QUEUE_LIMIT,
        gate: RateGate | None = None,
        pool: WorkerPool | None = None,
    ) -> None:
        self.hook = hook
        self._executor = executor
        self._listener = listener
        self._limit = limit
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._pending: _Job | None = None  # the debounced event waiting for its window
        self._window_closes: float | None = None
        self._window = DebounceWindow(hook.debounce) if hook.debounce else None
        self._gate = gate
        self._dropped = 0  # queue_full drops so far, for the log
        self._overflowed = False  # dropped since the queue was last empty
        self._running = False
        self._closing = False
        self._windows_closed = False  # stopping began: debounced events wait for no window
        self._drain_deadline: float | None = None
        self._drained = False  # closing, and nothing is left that may still run
        self._scheduled = False  # the pool was asked to serve this queue, and has not yet
        self._pool = pool if pool is not None else WorkerPool(1, executor.clock)
        self.current: _Job | None = None  # the job being run, by the worker or a caller

    # -- producers --

    def submit(self, job: _Job) -> None:
        with self._cond:
            self._enqueue(job)
            self._wake()

    def _wake(self, from_worker: bool = False) -> None:
        """(lock held) Ask the pool to serve this queue, unless a run is on (its end asks)
        or the pool was already asked (the worker it sends takes what is queued by then)."""
        if not self._running and not self._scheduled:
            self._scheduled = True
            # A blocking hook's caller waits (a pre-stop hook spends the grace period).
            self._pool.wake(self, urgent=self.hook.blocking, from_worker=from_worker)

    def _enqueue(self, job: _Job) -> None:
        """Append `job` (lock held): coalescing under a rate limit, bounded by the limit."""
        if self._gate is not None and job.droppable:
            self._replace_waiting()
        if not job.droppable and self._overflowed:
            self._shed_runtime_events()
        if len(self._jobs) >= self._limit:
            self._drop_oldest()
        self._jobs.append(job)

    def _shed_runtime_events(self) -> None:
        # Overloaded: a lifecycle event or blocking call must not wait behind (nor be cut at
        # shutdown behind) a backlog of runtime events that are already being dropped.
        kept = deque(job for job in self._jobs if not job.droppable)
        for queued in self._jobs:
            if queued.droppable:
                self._listener.dropped(self.hook, queued.event, "queue_full")
        log.warning(
            "hook %s: overloaded; %d queued runtime events dropped ahead of a lifecycle event",
            self.hook.name,
            len(self._jobs) - len(kept),
        )
        self._jobs = kept
        self._overflowed = False

    def _replace_waiting(self) -> None:
        # The newest wins: a runtime event still waiting for its token is superseded.
        for index, queued in enumerate(self._jobs):
            if queued.droppable:
                del self._jobs[index]
                self._listener.dropped(self.hook, queued.event, "rate_limited")
                return

    def offer_debounced(self, job: _Job) -> None:
        assert self._window is not None
        with self._cond:
            if self._windows_closed:
                self._enqueue(job)  # stopping: no window may outlast the grace period
                self._wake()
                return
            if self._pending is not None:
                self._listener.debounced(self.hook, self._pending.event)
            else:
                self._window_closes = self._window.closes_at(self._executor.clock.monotonic())
                self._pool.at(self._window_closes, self)
            self._pending = job

    def _drop_oldest(self) -> None:
        for index, queued in enumerate(self._jobs):
            if queued.droppable:
                del self._jobs[index]
                self._listener.dropped(self.hook, queued.event, "queue_full")
                self._dropped += 1
                self._overflowed = True
                if self._dropped == 1 or self._dropped % DROP_LOG_EVERY == 0:
                    # Logged once and then every DROP_LOG_EVERY drops: an overload must not
                    # also flood the log (the metric counts every one).
                    log.warning(
                        "hook %s: queue full (%d), dropped the oldest %s event (%d dropped so far)",
                        self.hook.name,
                        self._limit,
                        queued.event.name,
                        self._dropped,
                    )
                return
        # Only lifecycle events and waiting callers are queued: they are never dropped.

    # -- served by the pool --

    def serve(self) -> None:
        """Run the next job if one may start now; else ask the pool to come back when it may
        (the debounce window closes, the rate-limit token comes)."""
        job = self._take()
        if job is not None:
            self._execute(job, on_worker=True)

    def _take(self) -> _Job | None:
        """The job to run now, marking the queue running; None when there is none yet."""
        clock = self._executor.clock
        with self._cond:
            self._scheduled = False
            if self._running or self._drained:
                return None  # the run on now asks for the next when it ends
            now = clock.monotonic()
            if self._pending is not None and (self._closing or now >= (self._window_closes or 0.0)):
                # The window closed (or we are shutting down): its latest event fires.
                pending, self._pending, self._window_closes = self._pending, None, None
                self._enqueue(pending)
            token_wait = self._token_wait(now) if self._jobs else 0.0
            if self._jobs and token_wait <= 0.0:
                self._running = True
                job = self._jobs.popleft()
                self._overflowed = self._overflowed and bool(self._jobs)
                return job
            if self._closing and (not self._jobs or self._token_after_drain(token_wait)):
                # What is left is reported as dropped (shutdown).
                self._drained = True
                self._cond.notify_all()
                return None
            wake_at = [now + token_wait] if self._jobs else []
            if self._window_closes is not None:
                wake_at.append(self._window_closes)
            if wake_at:
                self._pool.at(min(wake_at), self)
            return None

    def _token_wait(self, now: float) -> float:
        """Seconds the head job must wait for its rate-limit token (0.0: it was taken)."""
        if self._gate is None:
            return 0.0
        # A lifecycle event or blocking call in the queue pushes everything before it through.
        forced = any(not job.droppable for job in self._jobs)
        return self._gate.admit(now, force=forced)

    def _token_after_drain(self, token_wait: float) -> bool:
        deadline = self._drain_deadline
        return deadline is not None and self._executor.clock.monotonic() + token_wait > deadline

    def run_inline(self, job: _Job) -> bool:
        """Run the blocking `job` on the calling thread if this hook is idle (nothing queued,
        pending or running, not closing) and the caller has no deadline; its result lands in
        `job.future`. False when it did not run: the caller submits it instead."""
        if job.future is None or job.deadline is not None:
            # With a deadline the caller must be able to walk away from a run that overstays
            # it, which only a run on another thread allows.
            return False
        with self._cond:
            if self._closing or self._running or self._jobs or self._pending is not None:
                return False
            if self._gate is not None:
                # As a queued blocking call does: it never waits, but still spends its token.
                self._gate.admit(self._executor.clock.monotonic(), force=True)
            self._running = True
        # An empty context, as the worker thread has: the caller's active span and baggage
        # must not become the hook span's parent or leak into its requests.
        contextvars.Context().run(self._execute, job)
        return True

    def _execute(self, job: _Job, on_worker: bool = False) -> None:
        """Run `job` (the queue is marked running), hand its result to a waiting caller, and
        free the queue for the next job."""
        deadline = job.deadline
        if self._drain_deadline is not None:
            deadline = min(deadline or self._drain_deadline, self._drain_deadline)
        with self._cond:
            self.current = job
        try:
            execution = self._executor.run(
                self.hook, job.event, job.session, deadline, claim=job.claim_end
            )
        except BaseException as exc:  # never leave a waiting caller hanging
            if job.future is not None:
                job.future.set_exception(exc)
            log.exception("hook %s worker failed", self.hook.name)
        else:
            if job.future is not None:
                job.future.set_result(execution)
        finally:
            with self._cond:
                self._running = False
                self.current = None
                if self._jobs or self._pending is not None:
                    # To the back of the pool's line: other hooks' queues go first.
                    self._wake(from_worker=on_worker)
                elif self._closing:
                    self._drained = True
                self._cond.notify_all()

    # -- shutdown --

    def close_window(self) -> None:
        """Stopping began: the pending debounced event (its window's latest) is queued now,
        and later ones are queued as they come, so that the grace period delivers them."""
        with self._cond:
            self._windows_closed = True
            if self._pending is not None:
                # Queued here, not at the next serve: an event offered after this one must
                # not overtake it.
                pending, self._pending, self._window_closes = self._pending, None, None
                self._enqueue(pending)
                self._wake()

    def close(self, deadline: float) -> None:
        """Stop taking work; what is queued or pending runs, cut short at `deadline`."""
        with self._cond:
            self._closing = True
            self._drain_deadline = deadline
            if not self._running:  # else the run's end serves what is left
                if self._jobs or self._pending is not None:
                    self._wake()
                else:
                    self._drained = True
            self._cond.notify_all()

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds until nothing runs (on a worker or inline on a
        caller's thread) and nothing is left that will still run."""
        # Real seconds (a test's fake clock may stand still).
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._running or not (
                self._drained or (not self._jobs and self._pending is None)
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def abandon(self) -> list[_Job]:
        """After the drain deadline: what never ran (reported as dropped, reason shutdown)."""
        with self._cond:
            left = list(self._jobs)
            if self._pending is not None:
                left.append(self._pending)
            self._jobs.clear()
            self._pending = None
            self._drained = True
            self._cond.notify_all()
        return left

    def take_droppable(self) -> list[_Job]:
        """Remove and return the queued (and pending) jobs that no caller waits for and that
        are no lifecycle event: what a bounded exit may leave undelivered."""
        with self._cond:
            taken = [job for job in self._jobs if job.droppable]
            self._jobs = deque(job for job in self._jobs if not job.droppable)
            if self._pending is not None and self._pending.droppable:
                taken.append(self._pending)
                self._pending, self._window_closes = None, None
            self._cond.notify_all()
        return taken

    def wait_idle(self, deadline: float) -> bool:
        clock = self._executor.clock
        with self._cond:
            if self._pending is not None:
                self._window_closes = clock.monotonic()
                self._wake()
            while self._jobs or self._pending is not None or self._running:
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.05))
        return True

    @property
    def depth(self) -> int:
        with self._cond:
            return len(self._jobs) + (1 if self._pending else 0) + (1 if self._running else 0)


class Dispatcher:
    """Maps events onto the template's hooks and owns their queues and the worker pool."""

    def __init__(
        self,
        template: Template,
        executor: HookExecutor,
        listener: EngineListener | None = None,
        queue_limit: int = DEFAULT_QUEUE_LIMIT,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        self.template = template
        self.executor = executor
        self.listener = listener or EngineListener()
        self.pool = WorkerPool(workers, executor.clock)
        gates = gates_for(template, executor.clock.monotonic())
        self._queues = {
            hook.name: HookQueue(
                hook, executor, self.listener, queue_limit, gates.get(hook.name), self.pool
            )
            for hook in template.hooks
            if hook.enabled
        }
        self._closed = False
        self._lock = threading.Lock()

    def dispatch(
        self, event: LifecycleEvent, session: SessionInfo, deadline: float | None = None
    ) -> DispatchResult:
        """Fire every hook of `event` in declaration order. Blocking hooks run one after the
        other and are waited for (until `deadline`, monotonic); non-blocking ones are queued.
        A blocking `on_error: fail` hook that does not succeed is returned as `failed`; at an
        event that can abort its transition (`events.ABORTABLE_EVENTS`) it stops the rest."""
        result = DispatchResult(event)
        if self._closed:
            for hook in self.template.hooks_for(event.name):
                self.listener.dropped(hook, event, "shutdown")
            return result
        hooks = self.template.hooks_for(event.name)
        for index, hook in enumerate(hooks):
            queue = self._queues[hook.name]
            if hook.debounce:
                queue.offer_debounced(_Job(event, session, deadline=deadline))
                continue
            if not hook.blocking:
                queue.submit(_Job(event, session, deadline=deadline))
                continue
            future: Future[Execution] = Future()
            job = _Job(event, session, future=future, deadline=deadline)
            if not queue.run_inline(job):
                queue.submit(job)
            execution = self._wait(future, deadline)
            if execution is None:
                log.warning("hook %s: still running at the transition's deadline", hook.name)
                continue
            result.executions.append(execution)
            if fails_transition(hook, execution.outcome, event.name) and result.failed is None:
                result.failed = execution
                if event.name in ev.ABORTABLE_EVENTS:
                    # The transition is aborted: the later hooks are for it, so they do not
                    # run, and each is recorded as skipped, saying why.
                    self._skip_the_rest(hooks[index + 1 :], event, session, hook.name)
                    break
        return result

    def _skip_the_rest(
        self, hooks: Sequence[HookSpec], event: LifecycleEvent, session: SessionInfo, failed: str
    ) -> None:
        reason = f"not run: hook {failed!r} failed at {event.name} with on_error: fail"
        for hook in hooks:
            self.executor.run(hook, event, session, not_run=reason)

    def _wait(self, future: Future[Execution], deadline: float | None) -> Execution | None:
        timeout = None
        if deadline is not None:
            # A little slack: the attempt itself is cut at the deadline and then recorded.
            timeout = max(0.0, deadline - self.executor.clock.monotonic()) + 1.0
        try:
            return future.result(timeout)
        except TimeoutError:
            return None  # still running at the deadline: the caller moves on
        except Exception:  # noqa: BLE001 - the worker already logged why the run failed
            return None

    def queue_depth(self, hook_name: str) -> int:
        return self._queues[hook_name].depth

    def queue_depths(self) -> list[tuple[str, int]]:
        """(hook name, events waiting) for every hook."""
        return [(name, queue.depth) for name, queue in self._queues.items()]

    def close_windows(self) -> None:
        """Stopping began: every pending debounced event is delivered now, and later ones
        without a window. A window flushed only at exit would come after a stubborn agent's
        grace period, when nothing is left to deliver it in (the contract: a pending window
        is never lost at shutdown)."""
        for queue in self._queues.values():
            if queue.hook.debounce:
                queue.close_window()

    def shutdown(self, timeout: float) -> None:
        """Fire pending debounced events, drain every queue within `timeout` seconds."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        clock = self.executor.clock
        deadline = clock.monotonic() + timeout
        for queue in self._queues.values():
            queue.close(deadline)
        for queue in self._queues.values():
            queue.join(deadline - clock.monotonic())
        self.executor.stopping.set()
        # One half second for all the queues together, not each: with a thousand hooks
        # waiting for workers, half a second apiece would be minutes.
        last_call = time.monotonic() + 0.5
        for queue in self._queues.values():
            if not queue.join(last_call - time.monotonic()):
                self._give_up(queue)
            for job in queue.abandon():
                self._undelivered(queue, job, "shutdown", "the shutdown deadline came first")
                log.error(
                    "hook %s: %s event not delivered before shutdown deadline",
                    queue.hook.name,
                    job.event.name,
                )
        self.pool.stop()

    def _give_up(self, queue: HookQueue) -> None:
        """The job still in flight after the last call: the process may end before it does,
        and then its own record would never be written. It may yet have reached its target:
        recorded as `interrupted`, unless its run recorded its end first."""
        job = queue.current
        if job is None:
            return
        with job.end_lock:
            if job.ended:
                return
            job.given_up = True
            self._undelivered(
                queue,
                job,
                "shutdown",
                "still running at the shutdown deadline",
                outcome=INTERRUPTED,
            )

    def settle(self, deadline: float) -> int:
        """Let what is queued be delivered until `deadline` (monotonic), so that what comes
        next (session-end) follows it; then drop the non-blocking runtime-event deliveries
        still queued, recording each as `dropped` (replayable). Returns how many."""
        # Every queue waits (and flushes its debounced event) until the same deadline: no
        # short-circuit past the first busy one.
        idle = [queue.wait_idle(deadline) for queue in self._queues.values()]
        if all(idle):
            return 0
        dropped = 0
        for queue in self._queues.values():
            for job in queue.take_droppable():
                self._undelivered(queue, job, "grace_period", "the grace period ended first")
                dropped += 1
        if dropped:
            log.warning(
                "%d queued hook deliveries not made before the grace period ended: journaled "
                "as dropped (otel-lifecycle-hooks replay sends them)",
                dropped,
            )
        return dropped

    def _undelivered(
        self, queue: HookQueue, job: _Job, reason: str, why: str, outcome: str = "dropped"
    ) -> None:
        # Here, not at the top: a delivery lost is rare, and its module is not imported before
        # `run`'s spawn (about 0.1 ms, -X importtime).
        from .undelivered import record_undelivered

        self.listener.dropped(queue.hook, job.event, reason)
        try:
            record_undelivered(
                self.executor, queue.hook, job.event, job.session, why, outcome=outcome
            )
        except Exception:  # never lose the count over a record that could not be made
            log.exception("hook %s: recording an undelivered event failed", queue.hook.name)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no hook has queued, pending or running work (for force_flush); a
        pending debounced event fires now instead of at the end of its window."""
        deadline = self.executor.clock.monotonic() + timeout
        return all(queue.wait_idle(deadline) for queue in self._queues.values())
