"""What an execution reports as it happens, and who is told: the journal, the hook log, the
metrics and the operator's terminal each implement `ExecutionObserver`.

An observer never stops a hook: the executor tells every observer in turn, and one that
raises is logged and passed over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..actions.base import AttemptResult
    from ..journal.rows import AttemptRow
    from ..template.model import HookSpec
    from .model import Execution, LifecycleEvent, SessionInfo

log = logging.getLogger("otel_lifecycle_hooks.engine")


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class Retry(NamedTuple):
    """An execution about to wait `delay` seconds before attempt `attempt + 1`."""

    hook: HookSpec
    event: LifecycleEvent
    session: SessionInfo
    idempotency_key: str
    attempt: int  # the attempt that just failed, 1-based
    max_attempts: int
    delay: float  # seconds
    result: AttemptResult  # what the failed attempt produced
    attempt_rows: Sequence[AttemptRow]  # the delivery history so far, one row per attempt


class ExecutionObserver(Protocol):
    """Told of what executions do, on the thread that runs them: none may block for long."""

    # Whether `on_output` is wanted: a script's output is split into lines (and redacted)
    # only when someone reads them.
    @property
    def takes_output(self) -> bool: ...

    def on_output(self, hook: HookSpec, stream: str, line: str) -> None:
        """One line a script printed (`stream`: stdout or stderr), secrets taken out."""

    def on_retry(self, retry: Retry) -> None:
        """An attempt failed and another follows after `retry.delay`."""

    def on_execution(self, execution: Execution) -> None:
        """An execution ended (or was recorded without running: dropped, interrupted)."""


@runtime_checkable
class LateEndObserver(Protocol):
    """An observer that keeps a record of each execution it can rewrite (the journal)."""

    def on_given_up(self, execution: Execution) -> None:
        """The shutdown stopped waiting for `execution`, still in flight, and records it as
        interrupted: a record to keep rewritable, as its own end may still come."""

    def on_late_end(self, execution: Execution) -> None:
        """`execution` ended after the shutdown had recorded it as interrupted: its record
        now says what it did."""


class ExecutionCallback:
    """An observer that hands each ended execution to `callback` and ignores the rest."""

    takes_output = False

    def __init__(self, callback: Callable[[Execution], object]) -> None:
        self._callback = callback

    def on_output(self, hook: HookSpec, stream: str, line: str) -> None:
        """Script output is not this observer's business."""

    def on_retry(self, retry: Retry) -> None:
        """Retries are not this observer's business."""

    def on_execution(self, execution: Execution) -> None:
        """Hand `execution` to the callback."""
        self._callback(execution)


class Observers:
    """The observers of one executor, told in the order they were added."""

    def __init__(self, observers: Sequence[ExecutionObserver] = ()) -> None:
        self._observers: list[ExecutionObserver] = list(observers)

    def add(self, observer: ExecutionObserver) -> None:
        """Tell `observer` of every execution from now on."""
        self._observers.append(observer)

    def __iter__(self) -> Iterator[ExecutionObserver]:
        return iter(self._observers)

    @property
    def take_output(self) -> bool:
        """Whether any observer reads scripts' output lines."""
        return any(observer.takes_output for observer in self._observers)

    def output(self, hook: HookSpec, stream: str, line: str) -> None:
        """Tell the observers that read output of one line `hook`'s script printed."""
        for observer in self._observers:
            if observer.takes_output:
                try:
                    observer.on_output(hook, stream, line)
                except Exception:  # a broken observer must not stop the others
                    log.exception("recording output of hook %s failed", hook.name)

    def retry(self, retry: Retry) -> None:
        """Tell every observer that `retry.hook` waits for another attempt."""
        for observer in self._observers:
            try:
                observer.on_retry(retry)
            except Exception:  # a broken observer must not stop the others
                log.exception("recording a retry of hook %s failed", retry.hook.name)

    def execution(self, execution: Execution) -> None:
        """Tell every observer that `execution` ended."""
        for observer in self._observers:
            try:
                observer.on_execution(execution)
            except Exception:  # a broken observer must not stop the others
                log.exception("recording hook execution of %s failed", execution.hook.name)

    def given_up(self, execution: Execution) -> None:
        """Tell every observer that the shutdown recorded `execution`, still in flight, as
        interrupted: counted and logged as any execution that ended, and kept rewritable by
        the observers that can rewrite it (`ended_late`)."""
        for observer in self._observers:
            try:
                if isinstance(observer, LateEndObserver):
                    observer.on_given_up(execution)
                else:
                    observer.on_execution(execution)
            except Exception:  # a broken observer must not stop the others
                log.exception("recording hook execution of %s failed", execution.hook.name)

    def ended_late(self, execution: Execution) -> None:
        """`execution` ended after the shutdown recorded it as interrupted and counted it:
        the observers that keep a rewritable record correct it, and nothing counts it again
        (a delivery is one execution in the metrics and one line in the hook log)."""
        for observer in self._observers:
            if isinstance(observer, LateEndObserver):
                try:
                    observer.on_late_end(execution)
                except Exception:  # a broken observer must not stop the others
                    log.exception("correcting the record of %s failed", execution.hook.name)


class ExecutionWatcher:
    """Told of what operators want to see as it happens (`run`'s report implements it):
    each recorded execution with its journal id, each retry, each dropped event. Every
    method is optional; none may block for long, as they run on the hooks' workers."""

    def recorded(self, execution: Execution, history_id: int | None) -> None: ...

    def retrying(
        self,
        hook: HookSpec,
        event: LifecycleEvent,
        attempt: int,
        max_attempts: int,
        delay: float,
        result: AttemptResult,
    ) -> None: ...

    def dropped(self, hook: HookSpec, event: LifecycleEvent, reason: str) -> None: ...

    def event_recorded(self, event: LifecycleEvent) -> None: ...
