"""Where executions are recorded besides their span: metrics, the hook log and the journal.

Each recorder is optional and isolated: a journal on a full disk or a hook log that cannot be
written is reported once by its own module and never stops a hook.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics as metrics_api

from ..actions.base import AttemptResult
from ..template.model import HookSpec
from .dispatch import EngineListener
from .executor import HookExecutor
from .model import Execution, LifecycleEvent

log = logging.getLogger("otel_lifecycle_hooks.engine")


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


class _MetricsListener(EngineListener):
    def __init__(self, metrics: Any, watchers: list[ExecutionWatcher]) -> None:
        self._metrics = metrics
        self._watchers = watchers

    def debounced(self, hook: HookSpec, event: LifecycleEvent) -> None:
        self._metrics.record_debounced(hook.name, event.name)

    def dropped(self, hook: HookSpec, event: LifecycleEvent, reason: str) -> None:
        self._metrics.record_dropped(hook.name, event.name, reason)
        for watcher in self._watchers:
            _tell(watcher.dropped, hook, event, reason)


def _tell(method: Any, *args: Any) -> None:
    try:
        method(*args)
    except Exception:  # a broken watcher must not stop a hook
        log.exception("execution watcher %r failed", method)


class Recorders:
    """The recorders an engine feeds; `_owned` are the ones it opened and must close."""

    def __init__(self) -> None:
        self.metrics: Any = None
        self.hook_log: Any = None
        self.journal: Any = None
        self.listener: EngineListener = EngineListener()
        self.watchers: list[ExecutionWatcher] = []
        self._owned: list[Any] = []

    def watch(self, watcher: ExecutionWatcher) -> None:
        """Tell `watcher` of every execution, retry and drop from now on."""
        self.watchers.append(watcher)

    def event_recorded(self, event: LifecycleEvent) -> None:
        if self.metrics is not None:
            self.metrics.record_event(event.name)
        for watcher in self.watchers:
            _tell(watcher.event_recorded, event)

    def close(self) -> None:
        for owned in self._owned:
            try:
                owned.close()
            except Exception:
                log.debug("closing %r failed", owned, exc_info=True)


class _InFlightLater:
    """journal.in_flight.InFlight, made at its first use: importing it imports the journal's
    modules and SQLite, which `run` leaves until its agent has started."""

    def __init__(self, journal: Any) -> None:
        self._journal = journal
        self._made: Any = None
        self._lock = threading.Lock()

    def _in_flight(self) -> Any:
        if self._made is None:
            with self._lock:
                if self._made is None:
                    from ..journal.in_flight import InFlight

                    self._made = InFlight(self._journal)
        return self._made

    def retrying(self, *args: Any) -> None:
        self._in_flight().retrying(*args)

    def record(self, execution: Execution) -> int | None:
        recorded: int | None = self._in_flight().record(execution)
        return recorded


def build_recorders(
    executor: HookExecutor,
    *,
    meter_provider: metrics_api.MeterProvider | None,
    journal: Any,
    hook_log: Any,
    environ: Mapping[str, str],
) -> Recorders:
    """Wire the recorders into the executor. `journal` / `hook_log`: an instance, a path,
    None for the default location, or False for none."""
    from ..telemetry.metrics import HookMetrics

    recorders = Recorders()
    recorders.metrics = HookMetrics(meter_provider)
    recorders.listener = _MetricsListener(recorders.metrics, recorders.watchers)
    if hook_log is not False:
        from ..hooklog import HookLog, default_hook_log_path

        if (
            hook_log is None
            or isinstance(hook_log, (str, bytes))
            or hasattr(hook_log, "__fspath__")
        ):
            hook_log = HookLog(hook_log or default_hook_log_path(environ))
            recorders._owned.append(hook_log)
        recorders.hook_log = hook_log
    if journal is not False:
        if journal is None or isinstance(journal, (str, bytes)) or hasattr(journal, "__fspath__"):
            from ..journal import journal_location, open_journal

            journal = open_journal(journal_location(journal or None, environ))
            recorders._owned.append(journal)
        recorders.journal = journal

    metrics = recorders.metrics

    def record_metrics(execution: Execution) -> None:
        metrics.record_execution(
            execution.hook.name,
            execution.event.name,
            execution.hook.action.type,
            execution.outcome,
            execution.duration,
        )

    executor.sinks.append(record_metrics)
    executor.retry_listeners.append(lambda hook, event: metrics.record_retry(hook.name, event.name))
    if recorders.hook_log is not None:
        hook_log_ = recorders.hook_log
        executor.sinks.append(hook_log_.record_execution)
        executor.output_sink = lambda hook, stream, line: hook_log_.script_output(
            hook.name, stream, line
        )
    watchers = recorders.watchers
    journal_ = recorders.journal
    in_flight = None
    if journal_ is not None and hasattr(journal_, "update_execution"):
        # A retrying execution is journaled as running at its first wait, so it can be seen.
        in_flight = _InFlightLater(journal_)
        executor.in_flight.append(in_flight.retrying)

    def record_journal(execution: Execution) -> None:
        # The journal's id is what the operator is shown, so watchers hear after it.
        if in_flight is not None:
            history_id = in_flight.record(execution)
        else:
            history_id = journal_.record(execution) if journal_ is not None else None
        for watcher in watchers:
            _tell(watcher.recorded, execution, history_id)

    def retrying(
        hook: HookSpec,
        event: LifecycleEvent,
        attempt: int,
        max_attempts: int,
        delay: float,
        result: AttemptResult,
    ) -> None:
        for watcher in watchers:
            _tell(watcher.retrying, hook, event, attempt, max_attempts, delay, result)

    executor.sinks.append(record_journal)
    executor.retry_waits.append(retrying)
    return recorders
