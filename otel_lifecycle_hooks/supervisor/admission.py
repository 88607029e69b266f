"""What the supervisor accepts from the agent: every message, whatever route it came by (the
event socket, the harness's HTTP hooks), passes `Admission.admit` before it reaches the
activity tracker.

A message is refused, counted and logged (rate-limited) unless it is a version-1 `event` with a
runtime event and string fields, or a version-1 `status` with a known signal. An admitted event
keeps only the fields its event may carry (reported.py); each field dropped is counted
too. Nothing the agent sends can raise out of here.

The counts are `IngressCounts`: read by the supervisor at exit (one log line), and the metric
`agent.lifecycle.ingress.refused` {reason, event} when a meter provider is given. Lines a sender
could not deliver at all (the supervisor busy, its backlog full) are counted there too, reason
`undelivered`, from the running count senders keep beside the socket (`sender_losses`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..harness.normalized import MAX_FIELD_CHARS, NormalizedEvent, WireFormatError, clip
from ..reported import safe_text
from .server import Reply

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter as MetricCounter
    from opentelemetry.metrics import MeterProvider

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

REFUSED_METRIC = "agent.lifecycle.ingress.refused"
UNDELIVERED = "undelivered"  # the reason for what senders report they could not deliver
STATUS_SIGNALS = frozenset({"ask_user", "blocked", "task_completed", "limits_exceeded"})
WIRE_VERSION = 1
MAX_STATUS_MESSAGE_CHARS = 4096
# A hostile client can send thousands of bad lines a second: log the first few of each reason,
# then at most one line per reason per interval, saying how many were not logged.
LOG_BURST = 5
LOG_INTERVAL = 10.0  # seconds


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class Admitted(NamedTuple):
    """A message the supervisor acts on: an event, or a status signal and its message."""

    kind: str  # "event" | "status"
    event: NormalizedEvent | None = None
    status: str = ""
    message: str = ""
    # The sender waits for the decision of this event's gates (engine/gates.py); a reply is
    # equal only to itself, so two admitted messages that wait are never equal.
    reply: Reply | None = None

    @property
    def kind_event(self) -> str:
        """The runtime event's name ("" for a status)."""
        return self.event.event if self.event is not None else ""


class IngressCounts:
    """What the supervisor refused from the agent, by reason (thread-safe)."""

    def __init__(
        self,
        meter_provider: MeterProvider | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._clock = clock
        self._logged: dict[str, tuple[float, int]] = {}  # reason -> (last logged, suppressed)
        self._losses_seen = 0  # the senders' running count of undelivered lines, last read
        self._metric: MetricCounter | None = None
        if meter_provider is not None:
            self.count_with(meter_provider)

    def count_with(self, meter_provider: MeterProvider) -> None:
        """Count refusals as a metric of `meter_provider` from now on (`run` makes its meter
        provider after it opened the routes)."""
        meter = meter_provider.get_meter("otel_lifecycle_hooks")
        self._metric = meter.create_counter(
            REFUSED_METRIC,
            unit="{message}",
            description="Messages and fields from the agent the supervisor refused",
        )

    def refuse(self, reason: str, detail: str = "", event: str = "", count: int = 1) -> None:
        """Count `count` refusals of `reason`; log it unless that reason is logging too often.
        `detail` must never hold what the agent sent (it may be a secret)."""
        with self._lock:
            self._counts[reason] += count
            line = self._log_line(reason, count)
        self._add_metric(reason, event, count)
        if line is not None:
            suffix = f" ({line} more not logged)" if line else ""
            log.warning(
                "agent input refused: %s%s%s", reason, f": {detail}" if detail else "", suffix
            )

    def sender_losses(self, total: int) -> None:
        """Take the senders' running count of lines they could not deliver (the size of
        `harness.socket_client.UNDELIVERED_FILE`); what it grew by since the last call is
        counted as refused, reason `undelivered`. The agent's user keeps that count, so it
        can only inflate its own losses: a count that went down (its file truncated) is the
        new starting point, and nothing counted before is ever taken back."""
        with self._lock:
            added = total - self._losses_seen
            self._losses_seen = total
        if added > 0:
            self.refuse(UNDELIVERED, "lines a sender could not deliver", count=added)

    def _add_metric(self, reason: str, event: str, count: int) -> None:
        if self._metric is not None:
            attributes = {"reason": reason, **({"event": event} if event else {})}
            try:
                self._metric.add(count, attributes)
            except Exception:  # telemetry never throws into the caller's path
                log.debug("ingress metric failed", exc_info=True)

    def _log_line(self, reason: str, count: int = 1) -> int | None:
        """None: do not log; else how many of this reason went unlogged since the last line."""
        now = self._clock()
        if self._counts[reason] <= LOG_BURST:
            self._logged[reason] = (now, 0)  # the interval starts at the burst's last line
            return 0
        # A first report of several at once (sender losses) may pass the burst in one step.
        last, suppressed = self._logged.get(reason, (now - LOG_INTERVAL, 0))
        if now - last >= LOG_INTERVAL:
            self._logged[reason] = (now, 0)
            return suppressed
        self._logged[reason] = (last, suppressed + count)
        return None

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def summary(self) -> str:
        """One line for the end of the run: `refused 3 (not_json: 2, unknown_status: 1)`, and
        `, undelivered 20` when senders could not deliver lines (counted apart: the
        supervisor never saw them)."""
        counts = self.snapshot()
        lost = counts.pop(UNDELIVERED, 0)
        parts = ", ".join(f"{reason}: {n}" for reason, n in sorted(counts.items()))
        text = f"refused {sum(counts.values())} ({parts})" if counts else "refused 0"
        return f"{text}, undelivered {lost}" if lost else text


class Admission:
    """Checks and filters every message from the agent (see the module docstring)."""

    def __init__(self, counts: IngressCounts | None = None) -> None:
        self.counts = counts or IngressCounts()

    def admit(self, message: object) -> Admitted | None:
        """The message to act on, or None when it was refused (and counted)."""
        try:
            return self._admit(message)
        except Exception:  # a bug here must not let one line end the session
            log.debug("admitting a message failed", exc_info=True)
            self.counts.refuse("malformed")
            return None

    def _admit(self, message: object) -> Admitted | None:
        if not isinstance(message, Mapping):
            self.counts.refuse("not_an_object")
            return None
        if message.get("v") != WIRE_VERSION or isinstance(message.get("v"), bool):
            self.counts.refuse("unknown_version")
            return None
        kind = message.get("kind")
        if kind == "event":
            return self._event(message)
        if kind == "status":
            return self._status(message)
        self.counts.refuse("unknown_kind")
        return None

    def _event(self, message: Mapping[str, Any]) -> Admitted | None:
        try:
            event = NormalizedEvent.from_wire(message)
        except (WireFormatError, TypeError, ValueError):
            # Not the error's text: it quotes what the agent sent.
            self.counts.refuse("malformed_event")
            return None
        for name in event.dropped:
            # The name is the agent's choice too: counted, logged only when it is a plain name.
            shown = name if name.isidentifier() and len(name) <= 64 else "(a field)"
            self.counts.refuse(
                "field_not_allowed", f"{event.event} may not set {shown}", event=event.event
            )
        return Admitted("event", event=event)

    def _status(self, message: Mapping[str, Any]) -> Admitted | None:
        status = message.get("status")
        if not isinstance(status, str) or status not in STATUS_SIGNALS:
            self.counts.refuse("unknown_status")
            return None
        text = message.get("message")
        if text is None:
            text = ""
        if not isinstance(text, str):
            self.counts.refuse("malformed_status")
            return None
        text = clip(safe_text(text), min(MAX_STATUS_MESSAGE_CHARS, MAX_FIELD_CHARS))
        return Admitted("status", status=status, message=text)
