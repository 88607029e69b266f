"""The worker threads that run hook executions: a few, shared by every hook of an engine.

Each hook keeps its own queue (`dispatch.HookQueue`), and a queue runs one execution at a
time, so a hook's executions stay serial and in order whoever runs them. The pool only
decides which queue a free worker serves next: the queues with work wait their turn in
arrival order, and a queue that still has work after one execution goes to the back, so a
hook with a long backlog takes one worker, never all of them.

How many workers serve at once adapts to the work, up to `size`: one worker serves the line
while it keeps taking work from it, and another joins only when nobody has taken work from the
line for STARVED_AFTER (every worker serving is held by an execution that waits, on a slow or
hanging endpoint). Executions are mostly the interpreter's work, so on fast endpoints more
threads than that only take turns at the interpreter lock, each turn a futex wake-up and a
system call: with a thousand loopback hooks on two cores, eight workers serving at once cost
half again the CPU per delivery of one. A serving worker whose execution was short leaves when
one that began serving before it keeps the line moving, and the idle worker woken first is the
one idle the shortest: a burst's work stays on one thread (work moving between threads grew
each one's malloc arena in turn, 4 MiB more at the peak). Workers are started as they are
first needed and then kept; those not serving wait, one of them keeping the time.

A blocking hook's queue (its caller waits; a pre-stop hook spends the grace period) goes
before every other, and never waits for a worker: an idle one takes it at once, and when none
is idle a thread is started for it, which ends when no blocking work is left. So the threads
are at most `size` plus the blocking calls waiting at that moment.

The trade-off: an execution holds its worker until it ends, so more non-blocking hooks
hanging until their timeout than there are workers make the others wait for those timeouts,
and the n-th of several slow hooks on one event starts about (n - 1) * STARVED_AFTER after the
first. `LIFECYCLE_HOOKS_WORKERS` raises the bound.

Timers (a debounce window closing, a rate-limit token coming) are kept here too: an idle
worker waits until the earliest, then hands that queue to a worker.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Protocol

from .clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("otel_lifecycle_hooks.engine")

WORKERS_ENV = "LIFECYCLE_HOOKS_WORKERS"
# Eight: up to eight slow or hanging endpoints are waited for at once. Fast endpoints never
# get that many (one worker keeps the line moving); more only keep more threads, and more
# connections open to each origin at once. Many slow endpoints, or hooks that may hang, are a
# reason to raise it.
DEFAULT_WORKERS = 8
MAX_WORKERS = 256
# How long the line of waiting queues may stand still, every serving worker held by its
# execution, before another worker joins. An execution on a loopback endpoint takes about a
# millisecond, so the line of a burst moves many times within it; an endpoint slower than
# `size` times this gets every worker.
STARVED_AFTER = 0.010


class Served(Protocol):
    """What a worker serves: one hook's queue."""

    def serve(self) -> None:
        """Run the queue's next execution if one may start now (else arrange to be woken)."""
        ...


def workers_from(environ: Mapping[str, str]) -> int:
    """The pool size `LIFECYCLE_HOOKS_WORKERS` asks for; a value that is not a whole number
    from 1 to MAX_WORKERS falls back to the default, with a warning that says so."""
    text = environ.get(WORKERS_ENV, "").strip()
    if not text:
        return DEFAULT_WORKERS
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_WORKERS:
        log.warning(
            "%s=%r: write a whole number from 1 to %d; using %d",
            WORKERS_ENV,
            text,
            MAX_WORKERS,
            DEFAULT_WORKERS,
        )
        return DEFAULT_WORKERS
    return value


class WorkerPool:
    """At most `size` worker threads (plus one per blocking call no worker was free for),
    serving hook queues in the order they asked, blocking hooks' queues first; one more
    worker serves at once only when the line has not moved for STARVED_AFTER."""

    def __init__(self, size: int = DEFAULT_WORKERS, clock: Clock = SYSTEM_CLOCK) -> None:
        if size < 1:
            raise ValueError(f"a worker pool needs at least one worker, not {size}")
        self.size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._ready: deque[Served] = deque()
        self._urgent: deque[Served] = deque()
        self._ready_set: set[Served] = set()
        self._urgent_set: set[Served] = set()
        self._timers: list[tuple[float, int, Served]] = []
        self._timer_for: dict[Served, float] = {}
        self._order = itertools.count()
        self._workers: list[threading.Thread] = []
        self._idle = 0  # workers waiting for work (woken or not)
        # The idle workers not yet woken, the one idle the shortest last: it is woken first,
        # so the work stays on the fewest threads (their stacks and allocator arenas warm)
        # and the rest sleep on.
        self._sleepers: list[threading.Condition] = []
        self._fresh = 0  # workers started that have not looked for work yet
        self._spare = 0  # blocking-work threads between two queues
        self._serving = 0  # workers running an execution or going straight to the next
        self._most_serving = 0
        # Real seconds, whatever the engine's clock: this is about threads making progress.
        self._last_take = 0.0  # when a worker last took a queue from the line
        # Serving worker -> when it took its queue, in the order they began serving.
        self._taken_at: dict[int, float] = {}
        self._watched = False  # an idle worker waits to see whether the line moves
        self._stopped = False

    # -- asked by the queues (their own lock may be held: the pool never takes one) --

    def wake(self, queue: Served, urgent: bool = False, from_worker: bool = False) -> None:
        """`queue` has work that may run now: serve it when a worker is free (`urgent`:
        before any other, and at once). `from_worker`: asked by a worker that looks for work
        right after, so no other is needed for it."""
        with self._lock:
            if self._stopped:
                return
            if urgent:
                if queue in self._urgent_set:
                    return
                self._urgent_set.add(queue)
                self._urgent.append(queue)
            else:
                if queue in self._ready_set or queue in self._urgent_set:
                    return  # already waiting for a worker
                self._ready_set.add(queue)
                self._ready.append(queue)
            if not from_worker:
                self._staff()

    def at(self, when: float, queue: Served) -> None:
        """Wake `queue` at `when` (the clock's monotonic seconds), unless it is woken earlier."""
        with self._lock:
            if self._stopped:
                return
            current = self._timer_for.get(queue)
            if current is not None and current <= when:
                return
            self._timer_for[queue] = when
            heapq.heappush(self._timers, (when, next(self._order), queue))
            if self._idle:
                self._wake_idle()  # an idle worker sleeps until the earliest timer
            elif not self._fresh and len(self._workers) < self.size:
                self._start_worker()  # someone must keep the time

    def stop(self) -> None:
        """No more work: idle workers end; busy ones end after their execution."""
        with self._lock:
            self._stopped = True
            self._ready.clear()
            self._ready_set.clear()
            self._urgent.clear()
            self._urgent_set.clear()
            self._timers.clear()
            self._timer_for.clear()
            self._wake_idle(len(self._sleepers))

    @property
    def threads(self) -> int:
        """Worker threads started (blocking-work threads not counted)."""
        with self._lock:
            return len(self._workers)

    @property
    def most_serving(self) -> int:
        """The most workers that were ever serving at once (blocking-work threads not
        counted)."""
        with self._lock:
            return self._most_serving

    # -- the workers --

    def _staff(self) -> None:
        """(lock held) Make sure the waiting queues will be served."""
        if self._urgent:
            # A blocking hook does not wait: any idle worker takes it at once.
            waiting = len(self._urgent)
            self._wake_idle(waiting)
            available = self._idle + self._fresh
            if waiting > available and len(self._workers) < self.size:
                self._start_worker()
            elif waiting > available + self._spare:
                # Every worker is busy: a blocking hook does not wait for them.
                self._spare += 1
                threading.Thread(
                    target=self._serve_blocking, name="hook-worker-blocking", daemon=True
                ).start()
            return
        if self._serving == 0:
            # Nobody serves the line: one worker, now.
            if self._idle:
                self._wake_idle()
            elif not self._fresh and len(self._workers) < self.size:
                self._start_worker()
        else:
            self._watch()

    def _watch(self) -> None:
        """(lock held) Work waits while workers serve: have an idle worker see whether the
        line moves, starting one if none is idle and the pool is not full."""
        if self._watched or not self._ready:
            return
        if self._idle:
            self._wake_idle()  # no idle worker is watching: the one woken will
        elif not self._fresh and len(self._workers) < self.size:
            self._start_worker()

    def _wake_idle(self, count: int = 1) -> None:
        """(lock held) Wake up to `count` idle workers, the one idle the shortest first."""
        for _ in range(min(count, len(self._sleepers))):
            self._sleepers.pop().notify()

    def _start_worker(self) -> None:
        thread = threading.Thread(
            target=self._work, name=f"hook-worker-{len(self._workers) + 1}", daemon=True
        )
        self._workers.append(thread)
        self._fresh += 1
        thread.start()

    def _work(self) -> None:
        me = threading.get_ident()
        wakeup = threading.Condition(self._lock)
        serving, fresh = False, True
        while True:
            queue = self._next(me, wakeup, serving, fresh)
            if queue is None:
                return
            serving, fresh = True, False
            self._serve(queue)

    def _next(
        self, me: int, wakeup: threading.Condition, serving: bool, fresh: bool = False
    ) -> Served | None:
        """The next queue for worker `me` to serve, blocking ones first; None once the pool
        stopped. `serving`: the worker comes from an execution. It goes on to the next
        unless its execution was short and a worker serving since before it keeps the line
        moving (two would only take turns at the interpreter). A worker that was idle joins
        when nobody serves the line, or it has not moved for STARVED_AFTER. `fresh`: its first
        look for work, which ends its count as started (in the same hold of the lock: between
        two, the worker would be neither fresh, idle nor serving, and work arriving then would
        start another past `size`)."""
        with self._lock:
            if fresh:
                self._fresh -= 1
            while True:
                # Timers first: a steady stream of ready queues must not hold a debounced
                # event past its window.
                timeout = self._fire_timers()
                now = time.monotonic()
                if serving and self._ready and not self._urgent and self._moved_by_another(me, now):
                    serving = self._leave(me)
                queue: Served | None = None
                if self._urgent:
                    queue = self._urgent.popleft()
                    self._urgent_set.discard(queue)
                elif self._ready and (
                    serving or not self._serving or now - self._last_take >= STARVED_AFTER
                ):
                    queue = self._ready.popleft()
                    self._ready_set.discard(queue)
                if queue is not None:
                    self._last_take = self._taken_at[me] = now
                    if not serving:
                        self._serving += 1
                        self._most_serving = max(self._most_serving, self._serving)
                    self._watch()  # the line may still wait: someone else keeps watching
                    return queue
                if serving:
                    serving = self._leave(me)
                if self._stopped:
                    return None
                watching = bool(self._ready) and not self._watched
                if watching:
                    # Come back when the line will have stood still for STARVED_AFTER.
                    self._watched = True
                    until_starved = self._last_take + STARVED_AFTER - now
                    timeout = until_starved if timeout is None else min(timeout, until_starved)
                self._idle += 1
                self._sleepers.append(wakeup)
                try:
                    wakeup.wait(timeout)
                finally:
                    self._idle -= 1
                    if wakeup in self._sleepers:  # its time came: nobody woke it
                        self._sleepers.remove(wakeup)
                    if watching:
                        self._watched = False

    def _moved_by_another(self, me: int, now: float) -> bool:
        """(lock held) Worker `me` just ended a short execution, and a worker serving since
        before `me` took its queue less than STARVED_AFTER ago: the line moves without `me`.
        The later one leaves, so a burst's work stays on the same thread."""
        if now - self._taken_at[me] >= STARVED_AFTER:
            return False  # `me` was held: its endpoint is slow, more workers help
        for worker, taken in self._taken_at.items():  # in the order they began serving
            if worker == me:
                return False
            if now - taken < STARVED_AFTER:
                return True
        return False

    def _leave(self, me: int) -> bool:
        """(lock held) Worker `me` stops serving; returns False (no longer serving)."""
        self._serving -= 1
        del self._taken_at[me]
        return False

    def _fire_timers(self) -> float | None:
        """(lock held) Queue every queue whose time came; seconds until the next, if any."""
        now = self._clock.monotonic()
        while self._timers:
            when, _, queue = self._timers[0]
            if self._timer_for.get(queue) != when:
                heapq.heappop(self._timers)  # superseded by an earlier one
                continue
            if when > now:
                return when - now
            heapq.heappop(self._timers)
            del self._timer_for[queue]
            if queue not in self._ready_set and queue not in self._urgent_set:
                self._ready_set.add(queue)
                self._ready.append(queue)
        return None

    def _serve_blocking(self) -> None:
        while True:
            with self._lock:
                if not self._urgent or self._stopped:
                    self._spare -= 1
                    return
                queue = self._urgent.popleft()
                self._urgent_set.discard(queue)
                self._spare -= 1
            self._serve(queue)
            with self._lock:
                self._spare += 1

    @staticmethod
    def _serve(queue: Served) -> None:
        try:
            queue.serve()
        except Exception:  # a worker outlives any one hook's failure
            log.exception("a hook worker failed serving a queue")
