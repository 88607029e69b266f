"""Deliveries that did not finish: a run's grace period ended while they were still queued
(`dropped`, error type `NotDelivered`), or the engine shut down while one was still in flight
(`interrupted`, error type `interrupted`: it may have reached its target, or not; the form a
run cut short by the operator records itself, engine/policies.py).

They are recorded like any execution (metrics, hook log, journal) with that outcome and the
request, rendered and redacted, so that `replay` can send it with the same idempotency key (a
receiver that saw it already can tell). An interrupted one is still running: its record is
kept rewritable for its own end (`Observers.given_up`). No hook span is made here.
"""

from __future__ import annotations

from ..render import RenderError, hook_id_header, render_action
from ..template.model import HookSpec
from .executor import HookExecutor
from .model import Execution, LifecycleEvent, SessionInfo
from .policies import INTERRUPTED
from .request_record import request_record

DROPPED = "dropped"


def record_undelivered(
    executor: HookExecutor,
    hook: HookSpec,
    event: LifecycleEvent,
    session: SessionInfo,
    reason: str,
    outcome: str = DROPPED,
) -> Execution:
    """Record that `hook` did not finish for `event` (`reason` says why) and return the
    record; `outcome` is DROPPED or INTERRUPTED."""
    variables = executor.variables_for(hook, event, session)
    hook_id = hook_id_header(variables, hook.name, event.name)[1]
    request = None
    if hook.action.type != "python":
        try:
            request = request_record(
                hook, render_action(hook.action, variables), executor.redactor(variables)
            )
        except RenderError:
            request = None  # it would have been refused: nothing to replay either
    execution = Execution(
        hook=hook,
        event=event,
        session_id=session.session_id,
        outcome=outcome,
        attempts=0 if outcome == DROPPED else 1,
        duration=0.0,
        started_at=executor.clock.wall(),
        idempotency_key=hook_id,
        error_type="NotDelivered" if outcome == DROPPED else INTERRUPTED,
        message=f"not delivered: {reason}" if outcome == DROPPED else f"interrupted: {reason}",
        request=request,
        agent_id=session.metadata.get("AGENT_ID"),
    )
    if outcome == INTERRUPTED:
        executor.observers.given_up(execution)
    else:
        executor.observers.execution(execution)
    return execution
