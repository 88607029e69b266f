"""The package's metric instruments.

The instrument names are a contract: the bundled dashboards query them. Through a
Prometheus exporter (the SDK's, or the collector's) they appear as

| instrument                          | Prometheus series                                   |
|-------------------------------------|-----------------------------------------------------|
| `agent.lifecycle_hook.executions`   | `agent_lifecycle_hook_executions_total`             |
| `agent.lifecycle_hook.duration` (s) | `agent_lifecycle_hook_duration_seconds_bucket/_sum/_count` |
| `agent.lifecycle_hook.retries`      | `agent_lifecycle_hook_retries_total`                |
| `agent.lifecycle_hook.debounced`    | `agent_lifecycle_hook_debounced_total`              |
| `agent.lifecycle_hook.dropped`      | `agent_lifecycle_hook_dropped_total`                |
| `agent.lifecycle_hook.queue.depth`  | `agent_lifecycle_hook_queue_depth`                  |
| `agent.lifecycle.events`            | `agent_lifecycle_events_total`                      |
| `agent.lifecycle.journal.losses`    | `agent_lifecycle_journal_losses_total`              |

with every attribute's dots written as underscores (`agent_lifecycle_hook_name`).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from .. import events

logger = logging.getLogger(__name__)

METER_NAME = "otel_lifecycle_hooks"

EXECUTIONS = "agent.lifecycle_hook.executions"
DURATION = "agent.lifecycle_hook.duration"
RETRIES = "agent.lifecycle_hook.retries"
DEBOUNCED = "agent.lifecycle_hook.debounced"
DROPPED = "agent.lifecycle_hook.dropped"
DECISIONS = "agent.lifecycle_hook.decisions"
ATTR_DECISION = "agent.lifecycle_hook.decision"
QUEUE_DEPTH = "agent.lifecycle_hook.queue.depth"
LIFECYCLE_EVENTS = "agent.lifecycle.events"
JOURNAL_LOSSES = "agent.lifecycle.journal.losses"
ATTR_JOURNAL_LOSS = "agent.lifecycle.journal.loss"
# What `agent.lifecycle.journal.losses` counts, one attribute value each: journal writes that
# failed (the database down, refusing, or the file unwritable), writes the database refused,
# writes kept only in a local spill file, earlier processes' spill files adopted (written),
# owed moments (a registration's) not in the shared journal when their hooks were sent, and
# owed hooks that failed during crash recovery (their session stays owed).
JOURNAL_LOSS_KINDS: tuple[str, ...] = (
    "failures", "refused", "spilled", "adopted", "unconfirmed", "recovery_failed",
)  # fmt: skip

ATTR_DROP_REASON = "agent.lifecycle_hook.drop_reason"
DROP_REASONS: tuple[str, ...] = ("queue_full", "rate_limited", "shutdown")

# From a 1 ms loopback call to the 120 s ceiling on any hook's timeout.
DURATION_BUCKETS_S: Sequence[float] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)


class _Totals:
    """Running totals per attribute set, reported by an observable counter when metrics are
    collected. Every execution and every event is counted: through an SDK counter each `add`
    is a measurement (its attributes cleaned, hashed and aggregated, some microseconds);
    here it is a dictionary update, and the SDK sees one observation per attribute set per
    collection. What is exported is the same monotonic sum."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[object, tuple[dict[str, str], list[int]]] = {}

    def add(self, key: object, attributes: dict[str, str]) -> None:
        with self._lock:
            entry = self._totals.get(key)
            if entry is None:
                self._totals[key] = (attributes, [1])
            else:
                entry[1][0] += 1

    def observe(self, options: CallbackOptions) -> Iterator[Observation]:
        with self._lock:
            totals = [(total[0], attributes) for attributes, total in self._totals.values()]
        for total, attributes in totals:
            yield Observation(total, attributes)


class _Observed:
    """The state behind a meter provider's observable instruments: the totals and the queues
    of every HookMetrics on it. The SDK keeps the callbacks of an instrument's first creation
    only (a second HookMetrics on the same provider is handed the same instrument), so this
    is one per provider, shared."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.executions = _Totals()
        self.events = _Totals()
        self.queue_sources: list[Callable[[], Iterable[tuple[str, int]]]] = []
        self._queue_attributes: dict[str, dict[str, str]] = {}
        meter.create_observable_counter(
            EXECUTIONS,
            callbacks=[self.executions.observe],
            unit="{execution}",
            description="Lifecycle hook executions, by outcome.",
        )
        # Observed when metrics are collected, from the queues themselves: an up-down counter
        # moved on every enqueue and dequeue cost every event two metric updates.
        meter.create_observable_up_down_counter(
            QUEUE_DEPTH,
            callbacks=[self._observe_queue_depths],
            unit="{event}",
            description="Events waiting in a hook's queue.",
        )
        meter.create_observable_counter(
            LIFECYCLE_EVENTS,
            callbacks=[self.events.observe],
            unit="{event}",
            description="Lifecycle events recorded, by type.",
        )

    def _observe_queue_depths(self, options: CallbackOptions) -> Iterator[Observation]:
        for source in list(self.queue_sources):
            try:
                depths = list(source())
            except Exception:
                logger.debug("reading hook queue depths failed", exc_info=True)
                continue
            for hook, depth in depths:
                attributes = self._queue_attributes.get(hook)
                if attributes is None:
                    attributes = self._queue_attributes[hook] = {events.HOOK_ATTR_NAME: hook}
                yield Observation(depth, attributes)


_OBSERVED: weakref.WeakKeyDictionary[object, _Observed] = weakref.WeakKeyDictionary()
_OBSERVED_LOCK = threading.Lock()


def _observed_for(provider: MeterProvider, meter: metrics.Meter) -> _Observed:
    with _OBSERVED_LOCK:
        try:
            observed = _OBSERVED.get(provider)
        except TypeError:  # a provider that cannot be weakly referenced: one each time
            return _Observed(meter)
        if observed is None:
            observed = _OBSERVED[provider] = _Observed(meter)
        return observed


class HookMetrics:
    """Records hook executions, retries, debounced and dropped events, and queue depth.

    Every method swallows its own errors: a metrics failure must never stop a hook.
    """

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = provider.get_meter(METER_NAME)
        observed = _observed_for(provider, meter)
        self._executions = observed.executions
        self._lifecycle_events = observed.events
        self._queue_sources = observed.queue_sources
        self._duration = meter.create_histogram(
            DURATION,
            unit="s",
            description="Duration of lifecycle hook executions, retries included.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
        )
        self._retries = meter.create_counter(
            RETRIES, unit="{retry}", description="Retries of lifecycle hook actions."
        )
        self._debounced = meter.create_counter(
            DEBOUNCED,
            unit="{event}",
            description="Events coalesced away by a hook's debounce window.",
        )
        self._dropped = meter.create_counter(
            DROPPED, unit="{event}", description="Events a hook never ran for, by reason."
        )
        self._decisions = meter.create_counter(
            DECISIONS, unit="{decision}", description="Gate decisions, by gate and verdict."
        )
        # One attribute dict per (hook, event, action, outcome) and per event, built once: a
        # template has a handful of those, and every execution would otherwise build its own.
        self._execution_attributes: dict[tuple[str, str, str, str], dict[str, str]] = {}
        self._event_attributes: dict[str, dict[str, str]] = {}

    def record_execution(
        self, hook: str, event: str, action: str, outcome: str, duration_s: float
    ) -> None:
        """Count one finished execution and record how long it took."""
        key = (hook, event, action, outcome)
        attributes = self._execution_attributes.get(key)
        if attributes is None:
            attributes = {
                events.HOOK_ATTR_NAME: hook,
                events.HOOK_ATTR_EVENT: event,
                events.HOOK_ATTR_OUTCOME: outcome,
                events.HOOK_ATTR_ACTION: action,
            }
            self._execution_attributes[key] = attributes
        try:
            self._executions.add(key, attributes)
            self._duration.record(max(duration_s, 0.0), attributes)
        except Exception:
            logger.debug("recording a hook execution failed", exc_info=True)

    def record_decision(self, hook: str, event: str, verdict: str) -> None:
        """Count one gate decision (`allow|deny|ask`) of hook `hook` at `event`."""
        attributes = {
            events.HOOK_ATTR_NAME: hook,
            events.HOOK_ATTR_EVENT: event,
            ATTR_DECISION: verdict,
        }
        self._add(self._decisions, 1, attributes)

    def record_retry(self, hook: str, event: str) -> None:
        """Count one retry of a hook's action."""
        self._add(self._retries, 1, {events.HOOK_ATTR_NAME: hook, events.HOOK_ATTR_EVENT: event})

    def record_debounced(self, hook: str, event: str, n: int = 1) -> None:
        """Count `n` events that a newer one replaced inside the debounce window."""
        self._add(self._debounced, n, {events.HOOK_ATTR_NAME: hook, events.HOOK_ATTR_EVENT: event})

    def record_dropped(self, hook: str, event: str, reason: str) -> None:
        """Count one event the hook will never run for (`queue_full|rate_limited|shutdown`)."""
        attributes = {
            events.HOOK_ATTR_NAME: hook,
            events.HOOK_ATTR_EVENT: event,
            ATTR_DROP_REASON: reason,
        }
        self._add(self._dropped, 1, attributes)

    def observe_queues(self, depths: Callable[[], Iterable[tuple[str, int]]]) -> None:
        """Report the queue depths `depths` gives, as (hook name, events waiting), each time
        metrics are collected."""
        self._queue_sources.append(depths)

    def record_event(self, event: str) -> None:
        """Count one lifecycle event recorded on a session."""
        attributes = self._event_attributes.get(event)
        if attributes is None:
            attributes = self._event_attributes[event] = {events.ATTR_EVENT: event}
        self._lifecycle_events.add(event, attributes)

    @staticmethod
    def _add(
        instrument: metrics.Counter | metrics.UpDownCounter, amount: int, attributes: dict[str, str]
    ) -> None:
        try:
            instrument.add(amount, attributes)
        except Exception:
            logger.debug("recording a hook metric failed", exc_info=True)


class JournalLosses:
    """Observes the journal's running loss counts (`JOURNAL_LOSS_KINDS`) as one observable
    counter, `agent.lifecycle.journal.losses`, by kind. `source` returns the counts since the
    journal opened (a kind it does not count is 0); a source that fails is skipped."""

    def __init__(
        self, source: Callable[[], dict[str, int]], meter_provider: MeterProvider | None = None
    ) -> None:
        self._source = source
        self._attributes = {kind: {ATTR_JOURNAL_LOSS: kind} for kind in JOURNAL_LOSS_KINDS}
        try:
            provider = meter_provider or metrics.get_meter_provider()
            provider.get_meter(METER_NAME).create_observable_counter(
                JOURNAL_LOSSES,
                callbacks=[self._observe],
                unit="{write}",
                description="Journal writes failed, refused, spilled, adopted or unconfirmed,"
                " and owed hooks failed in recovery, by kind.",
            )
        except Exception:
            logger.debug("journal loss metric unavailable", exc_info=True)

    def _observe(self, options: CallbackOptions) -> Iterator[Observation]:
        try:
            counts = self._source()
        except Exception:
            logger.debug("reading the journal's loss counts failed", exc_info=True)
            return
        for kind in JOURNAL_LOSS_KINDS:
            yield Observation(int(counts.get(kind, 0)), self._attributes[kind])
