"""The attempts of one execution: as many as the hook's retry policy allows within its
deadline, each made by the action's runner and kept, redacted, for the delivery history."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from opentelemetry.trace import Span

from .. import events as ev
from ..actions.base import AttemptResult
from ..render import RenderedCommand, RenderedRequest
from ..template.model import HookSpec
from ..variables import Variables
from .model import LifecycleEvent, SessionInfo
from .observers import Observers, Retry
from .policies import INTERRUPTED, attempt_timeout, retry_policy_for
from .runners.base import ActionRunner, ActionServices, Attempt

if TYPE_CHECKING:
    from ..journal.rows import AttemptRow

log = logging.getLogger("otel_lifecycle_hooks.engine")


class AttemptLoop:
    """Makes one execution's attempts; `rows` holds the history of those made so far."""

    def __init__(
        self,
        services: ActionServices,
        observers: Observers,
        stopping: threading.Event,
        interrupted: threading.Event,
        frame: Attempt,
        deadline: float | None,
    ) -> None:
        self._services = services
        self._observers = observers
        self._stopping = stopping  # set at shutdown: a retry wait ends early
        self._interrupted = interrupted  # set by the operator's second signal: no new attempt
        self._frame = frame  # the hook, event, session, span and variables; timeout 0
        self._deadline = deadline
        self.attempts = 0  # set when the loop ends
        self.rows: list[AttemptRow] = []

    def run(
        self, runner: ActionRunner, rendered: RenderedRequest | RenderedCommand | None
    ) -> AttemptResult:
        """Attempt until the policy says stop, a wait would pass the deadline, or the run is
        stopped; the last attempt's result."""
        hook, clock = self._frame.hook, self._services.clock
        policy = retry_policy_for(hook)
        waited = 0.0
        attempt = 0
        while True:
            attempt += 1
            attempt_started = clock.wall()
            timeout = attempt_timeout(hook, clock.monotonic(), self._deadline)
            if self._interrupted.is_set():  # the operator asked twice: no new attempt
                result = AttemptResult(
                    "timeout", 0.0, error_type=INTERRUPTED, message="run interrupted"
                )
            elif timeout <= 0:
                result = AttemptResult(
                    "timeout", 0.0, error_type="timeout", message="deadline passed"
                )
            else:
                one = self._frame._replace(rendered=rendered, timeout=timeout)
                result = runner.attempt(self._services, one)
            if self._interrupted.is_set() and result.kind != "ok":
                # Cut short by the operator's second signal (a blocking hook on the main
                # thread is abandoned by an exception): interrupted, not the hook's failure.
                result = AttemptResult(
                    "transient", result.duration, error_type=INTERRUPTED,
                    message=f"run interrupted during attempt {attempt}",
                )  # fmt: skip
            self._keep(attempt, attempt_started, result, rendered)
            if result.error_type == INTERRUPTED:
                return self._end(attempt, result)
            decision = policy.decide(attempt, result, waited)
            if not decision.retry:
                return self._end(attempt, result)
            delay = float(decision.delay or 0.0)
            if self._deadline is not None and clock.monotonic() + delay >= self._deadline:
                return self._end(attempt, result)
            self._frame.span.add_event(
                ev.HOOK_RETRY_EVENT,
                {"attempt": attempt + 1, "delay": delay, "reason": decision.reason},
            )
            self._observers.retry(self._retry(attempt, policy.max_attempts, delay, result))
            if clock.sleep(delay, self._stopping):
                if self._interrupted.is_set():  # the operator's doing, not the endpoint's
                    reason = f"run interrupted before attempt {attempt + 1} of "
                    result = result._replace(
                        error_type=INTERRUPTED,
                        message=f"{reason}{policy.max_attempts}: {result.message}",
                    )
                return self._end(attempt, result)
            waited += delay

    def _end(self, attempts: int, result: AttemptResult) -> AttemptResult:
        self.attempts = attempts
        return result

    def _retry(self, attempt: int, max_attempts: int, delay: float, result: AttemptResult) -> Retry:
        frame = self._frame
        return Retry(
            hook=frame.hook,
            event=frame.event,
            session=frame.session,
            idempotency_key=frame.hook_id,
            attempt=attempt,
            max_attempts=max_attempts,
            delay=delay,
            result=result,
            attempt_rows=tuple(self.rows),
        )

    def _keep(
        self,
        number: int,
        started_at: float,
        result: AttemptResult,
        rendered: RenderedRequest | RenderedCommand | None,
    ) -> None:
        """The attempt's row for the delivery history: redacted with the secrets known now
        (a token fetched for this attempt among them)."""
        # Imported here, not above: its rows are the journal's, which `run` imports only
        # once its agent has started (about 6 ms with SQLite, -X importtime;
        # tests/test_startup_imports.py pins it).
        from .attempt_log import attempt_row

        try:
            argv = rendered.argv if isinstance(rendered, RenderedCommand) else None
            redactor = self._services.redactor(self._frame.variables)
            self.rows.append(attempt_row(number, started_at, result, redactor, argv=argv))
        except Exception:  # the history is a record: a hook never fails for it
            log.exception("could not record attempt %d of hook execution", number)


def frame_of(
    hook: HookSpec,
    event: LifecycleEvent,
    session: SessionInfo,
    hook_id: str,
    span: Span,
    variables: Variables,
) -> Attempt:
    """What every attempt of one execution shares (its timeout and rendering set per attempt)."""
    return Attempt(hook, event, session, None, hook_id, span, 0.0, variables)
