"""Dispatch: which hooks an event fires, in what order, who waits, and what is coalesced.

Each hook owns one worker thread and one queue, so a hook's executions never overlap or
reorder. Blocking hooks go through the same queue and the recording call waits for them;
non-blocking ones are queued and the call returns at once. A debounced hook keeps only the
latest event of its window. Queues are bounded: past the bound the oldest runtime event of a
non-blocking hook is dropped and counted, never a lifecycle event or a blocking one.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from .. import events as ev
from ..spec.model import HookSpec, Template
from .executor import HookExecutor
from .model import Execution, LifecycleEvent, SessionInfo
from .policies import DebounceWindow, fails_transition

log = logging.getLogger("otel_lifecycle_hooks.engine")

DEFAULT_QUEUE_LIMIT = 1024


@dataclass
class _Job:
    event: LifecycleEvent
    session: SessionInfo
    future: Future[Execution] | None = None  # set when a caller waits for it
    deadline: float | None = None

    @property
    def droppable(self) -> bool:
        return self.future is None and self.event.name not in ev.LIFECYCLE_EVENTS


@dataclass
class DispatchResult:
    """What the blocking hooks of one event did; `failed` is the hook that aborts the
    transition (`on_error: fail`), if any."""

    event: LifecycleEvent
    executions: list[Execution] = field(default_factory=list)
    failed: Execution | None = None

    @property
    def ok(self) -> bool:
        return self.failed is None


class EngineListener:
    """Told of queue-level happenings (metrics implement it); every method is optional."""

    def debounced(self, hook: HookSpec, event: LifecycleEvent) -> None: ...

    def dropped(self, hook: HookSpec, event: LifecycleEvent, reason: str) -> None: ...

    def queue_changed(self, hook: HookSpec, delta: int) -> None: ...


class HookQueue:
    """The serial queue and worker of one hook."""

    def __init__(
        self,
        hook: HookSpec,
        executor: HookExecutor,
        listener: EngineListener,
        limit: int = DEFAULT_QUEUE_LIMIT,
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
        self._running = False
        self._closing = False
        self._drain_deadline: float | None = None
        self._thread: threading.Thread | None = None

    # -- producers --

    def submit(self, job: _Job) -> None:
        with self._cond:
            self._ensure_worker()
            if len(self._jobs) >= self._limit:
                self._drop_oldest()
            self._jobs.append(job)
            self._listener.queue_changed(self.hook, 1)
            self._cond.notify()

    def offer_debounced(self, job: _Job) -> None:
        assert self._window is not None
        with self._cond:
            self._ensure_worker()
            if self._pending is not None:
                self._listener.debounced(self.hook, self._pending.event)
            else:
                self._window_closes = self._window.closes_at(self._executor.clock.monotonic())
            self._pending = job
            self._cond.notify()

    def _drop_oldest(self) -> None:
        for index, queued in enumerate(self._jobs):
            if queued.droppable:
                del self._jobs[index]
                self._listener.queue_changed(self.hook, -1)
                self._listener.dropped(self.hook, queued.event, "queue_full")
                log.warning(
                    "hook %s: queue full (%d), dropped the oldest %s event",
                    self.hook.name,
                    self._limit,
                    queued.event.name,
                )
                return
        # Only lifecycle events and waiting callers are queued: they are never dropped.

    # -- the worker --

    def _ensure_worker(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._work, name=f"hook:{self.hook.name}", daemon=True
            )
            self._thread.start()

    def _next_job(self) -> _Job | None:
        """Wait for the next job; None when closed and drained."""
        clock = self._executor.clock
        with self._cond:
            while True:
                if self._pending is not None and (
                    self._closing or clock.monotonic() >= (self._window_closes or 0.0)
                ):
                    # The window closed (or we are shutting down): its latest event fires.
                    self._jobs.append(self._pending)
                    self._listener.queue_changed(self.hook, 1)
                    self._pending, self._window_closes = None, None
                if self._jobs:
                    self._running = True
                    self._listener.queue_changed(self.hook, -1)
                    return self._jobs.popleft()
                if self._closing:
                    return None
                timeout = None
                if self._window_closes is not None:
                    timeout = max(0.0, self._window_closes - clock.monotonic())
                self._cond.wait(timeout)

    def _work(self) -> None:
        while True:
            job = self._next_job()
            if job is None:
                return
            deadline = job.deadline
            if self._drain_deadline is not None:
                deadline = min(deadline or self._drain_deadline, self._drain_deadline)
            try:
                execution = self._executor.run(self.hook, job.event, job.session, deadline)
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
                    self._cond.notify_all()

    # -- shutdown --

    def close(self, deadline: float) -> None:
        """Stop taking work; what is queued or pending runs, cut short at `deadline`."""
        with self._cond:
            self._closing = True
            self._drain_deadline = deadline
            self._cond.notify_all()

    def join(self, timeout: float) -> bool:
        if self._thread is None:
            return True
        self._thread.join(max(0.0, timeout))
        return not self._thread.is_alive()

    def abandon(self) -> list[_Job]:
        """After the drain deadline: what never ran (reported as dropped, reason shutdown)."""
        with self._cond:
            left = list(self._jobs)
            if self._pending is not None:
                left.append(self._pending)
            self._jobs.clear()
            self._pending = None
        return left

    def wait_idle(self, deadline: float) -> bool:
        clock = self._executor.clock
        with self._cond:
            if self._pending is not None:
                self._window_closes = clock.monotonic()
                self._cond.notify_all()
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
    """Maps events onto the template's hooks and owns their queues."""

    def __init__(
        self,
        template: Template,
        executor: HookExecutor,
        listener: EngineListener | None = None,
        queue_limit: int = DEFAULT_QUEUE_LIMIT,
    ) -> None:
        self.template = template
        self.executor = executor
        self.listener = listener or EngineListener()
        self._queues = {
            hook.name: HookQueue(hook, executor, self.listener, queue_limit)
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
        A blocking `on_error: fail` hook that does not succeed stops the rest and is returned
        as `failed`."""
        result = DispatchResult(event)
        if self._closed:
            for hook in self.template.hooks_for(event.name):
                self.listener.dropped(hook, event, "shutdown")
            return result
        for hook in self.template.hooks_for(event.name):
            queue = self._queues[hook.name]
            if hook.debounce:
                queue.offer_debounced(_Job(event, session, deadline=deadline))
                continue
            if not hook.blocking:
                queue.submit(_Job(event, session, deadline=deadline))
                continue
            future: Future[Execution] = Future()
            queue.submit(_Job(event, session, future=future, deadline=deadline))
            execution = self._wait(future, deadline)
            if execution is None:
                log.warning("hook %s: still running at the transition's deadline", hook.name)
                continue
            result.executions.append(execution)
            if fails_transition(hook, execution.outcome):
                result.failed = execution
                break
        return result

    def _wait(self, future: Future[Execution], deadline: float | None) -> Execution | None:
        timeout = None
        if deadline is not None:
            # A little slack: the attempt itself is cut at the deadline and then recorded.
            timeout = max(0.0, deadline - self.executor.clock.monotonic()) + 1.0
        try:
            return future.result(timeout)
        except Exception:
            return None

    def queue_depth(self, hook_name: str) -> int:
        return self._queues[hook_name].depth

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
        for queue in self._queues.values():
            queue.join(0.5)
            for job in queue.abandon():
                self.listener.dropped(queue.hook, job.event, "shutdown")
                log.error(
                    "hook %s: %s event not delivered before shutdown deadline",
                    queue.hook.name,
                    job.event.name,
                )

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no hook has queued, pending or running work (for force_flush); a
        pending debounced event fires now instead of at the end of its window."""
        deadline = self.executor.clock.monotonic() + timeout
        return all(queue.wait_idle(deadline) for queue in self._queues.values())

