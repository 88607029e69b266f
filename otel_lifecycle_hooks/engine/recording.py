"""Where executions are recorded besides their span: metrics, the hook log and the journal,
each an `ExecutionObserver` of the executor; and the `ExecutionWatcher`s (observers.py) told
what operators are shown as it happens (the journal's id of each execution, each retry, each
drop).

Each recorder is optional and isolated: a journal on a full disk or a hook log that cannot be
written is reported once by its own module and never stops a hook. Opening a journal or a hook
log is the caller's job (engine/engine.py): the recorders are given open ones, or None.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from opentelemetry import metrics as metrics_api

from ..hooklog import HookLog
from ..telemetry.metrics import HookMetrics
from ..template.model import HookSpec
from .dispatch import EngineListener
from .model import Execution, LifecycleEvent
from .observers import ExecutionObserver, ExecutionWatcher, Retry

if TYPE_CHECKING:
    from ..journal.base import Journal as JournalBackend
    from ..journal.in_flight import InFlight

log = logging.getLogger("otel_lifecycle_hooks.engine")


def _tell(method: Callable[..., None], *args: object) -> None:
    try:
        method(*args)
    except Exception:  # a broken watcher must not stop a hook
        log.exception("execution watcher %r failed", method)


class _MetricsListener(EngineListener):
    """Counts what dispatch did not run (debounced, dropped) and tells the watchers of drops."""

    def __init__(self, metrics: HookMetrics, watchers: list[ExecutionWatcher]) -> None:
        self._metrics = metrics
        self._watchers = watchers

    def debounced(self, hook: HookSpec, event: LifecycleEvent) -> None:
        self._metrics.record_debounced(hook.name, event.name)

    def dropped(self, hook: HookSpec, event: LifecycleEvent, reason: str) -> None:
        self._metrics.record_dropped(hook.name, event.name, reason)
        for watcher in self._watchers:
            _tell(watcher.dropped, hook, event, reason)


class MetricsObserver:
    """Counts executions (with their duration) and retries."""

    takes_output = False

    def __init__(self, metrics: HookMetrics) -> None:
        self._metrics = metrics

    def on_output(self, hook: HookSpec, stream: str, line: str) -> None:
        """Output is not counted."""

    def on_retry(self, retry: Retry) -> None:
        """Count the retry."""
        self._metrics.record_retry(retry.hook.name, retry.event.name)

    def on_execution(self, execution: Execution) -> None:
        """Count the execution by outcome, with its duration."""
        self._metrics.record_execution(
            execution.hook.name,
            execution.event.name,
            execution.hook.action.type,
            execution.outcome,
            execution.duration,
        )
        if execution.decision is not None:
            self._metrics.record_decision(
                execution.hook.name, execution.event.name, execution.decision.verdict
            )


class HookLogObserver:
    """Writes executions and scripts' output lines to the hook log."""

    takes_output = True

    def __init__(self, hook_log: HookLog) -> None:
        self._hook_log = hook_log

    def on_output(self, hook: HookSpec, stream: str, line: str) -> None:
        """Log one line of `hook`'s script."""
        self._hook_log.script_output(hook.name, stream, line)

    def on_retry(self, retry: Retry) -> None:
        """Retries show in the execution's line when it ends."""

    def on_execution(self, execution: Execution) -> None:
        """Log the execution."""
        self._hook_log.record_execution(execution)


class JournalObserver:
    """Journals executions (a retrying one as running at its first wait, so it can be seen)
    and tells the watchers, who are shown the journal's id, after it."""

    takes_output = False

    def __init__(self, journal: JournalBackend | None, watchers: list[ExecutionWatcher]) -> None:
        self._journal = journal
        self._watchers = watchers
        self._in_flight: InFlight | None = None
        self._lock = threading.Lock()

    def _in_flight_of(self, journal: JournalBackend) -> InFlight:
        if self._in_flight is None:
            with self._lock:
                if self._in_flight is None:
                    # Imported here, not above: the journal's modules and SQLite (about 6 ms,
                    # -X importtime) come after the agent's start (test_startup_imports.py).
                    from ..journal.in_flight import InFlight

                    self._in_flight = InFlight(journal)
        return self._in_flight

    def on_output(self, hook: HookSpec, stream: str, line: str) -> None:
        """Output is journaled with its attempt (the tails), not line by line."""

    def on_retry(self, retry: Retry) -> None:
        """Tell the watchers, then journal the execution as running."""
        for watcher in self._watchers:
            _tell(watcher.retrying, retry.hook, retry.event, retry.attempt,
                  retry.max_attempts, retry.delay, retry.result)  # fmt: skip
        if self._journal is not None:
            self._in_flight_of(self._journal).retrying(
                retry.hook, retry.event, retry.session, retry.idempotency_key,
                retry.attempt_rows, retry.max_attempts, retry.delay,
            )  # fmt: skip

    def on_execution(self, execution: Execution) -> None:
        """Journal the execution, then tell the watchers its journal id."""
        history_id: int | None = None
        if self._journal is not None:
            history_id = self._in_flight_of(self._journal).record(execution)
        for watcher in self._watchers:
            _tell(watcher.recorded, execution, history_id)

    def on_given_up(self, execution: Execution) -> None:
        """Journal the execution the shutdown stopped waiting for as interrupted, its row kept
        for its own end to rewrite, then tell the watchers its journal id."""
        history_id: int | None = None
        if self._journal is not None:
            history_id = self._in_flight_of(self._journal).given_up(execution)
        for watcher in self._watchers:
            _tell(watcher.recorded, execution, history_id)

    def on_late_end(self, execution: Execution) -> None:
        """Rewrite the row the shutdown journaled as interrupted with what the execution did
        (the watchers were shown that row already)."""
        if self._journal is not None:
            self._in_flight_of(self._journal).record(execution)


class Recorders:
    """The recorders an engine feeds, as the executor's observers and dispatch's listener."""

    def __init__(
        self,
        metrics: HookMetrics,
        hook_log: HookLog | None,
        journal: JournalBackend | None,
    ) -> None:
        self.metrics = metrics
        self.hook_log = hook_log
        self.journal = journal
        self.watchers: list[ExecutionWatcher] = []
        self.listener: EngineListener = _MetricsListener(metrics, self.watchers)
        # In the order the executor tells them: as the journal's id is what the operator is
        # shown, the watchers hear (through the journal's observer) last.
        self.observers: list[ExecutionObserver] = [MetricsObserver(metrics)]
        if hook_log is not None:
            self.observers.append(HookLogObserver(hook_log))
        self.observers.append(JournalObserver(journal, self.watchers))

    def watch(self, watcher: ExecutionWatcher) -> None:
        """Tell `watcher` of every execution, retry and drop from now on."""
        self.watchers.append(watcher)

    def event_recorded(self, event: LifecycleEvent) -> None:
        """Count an event fired and tell the watchers."""
        self.metrics.record_event(event.name)
        for watcher in self.watchers:
            _tell(watcher.event_recorded, event)


def build_recorders(
    *,
    meter_provider: metrics_api.MeterProvider | None,
    journal: JournalBackend | None,
    hook_log: HookLog | None,
) -> Recorders:
    """The recorders of an engine: metrics on `meter_provider`, and the hook log and journal
    given (None: none)."""
    return Recorders(HookMetrics(meter_provider), hook_log, journal)
