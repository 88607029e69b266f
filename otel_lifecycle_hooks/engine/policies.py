"""Pure decisions: how an attempt's result maps to an outcome, whether and when to retry,
how long an attempt may take. No I/O and no sleeping; every function is a value of its inputs.
"""

from __future__ import annotations

from typing import NamedTuple

from ..actions.base import AttemptResult
from ..template.model import HookSpec

# A delivery cut short, by the operator (`run`'s second signal) or the engine's shutdown (it
# stopped waiting for one in flight): it may have reached its target. Its outcome and error
# type alike, whoever records it; `replay` re-sends it with the same idempotency key.
INTERRUPTED = "interrupted"

# Seed 000: "retry with exponential backoff (1s, 2s, 4s), max 3".
RETRY_DELAYS: tuple[float, ...] = (1.0, 2.0, 4.0)


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class RetryDecision(NamedTuple):
    """Retry after `delay` seconds, or stop (delay None) for `reason`."""

    delay: float | None
    reason: str

    @property
    def retry(self) -> bool:
        return self.delay is not None


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class RetryPolicy(NamedTuple):
    """One attempt plus up to len(delays) retries of transient failures and timeouts.

    A `Retry-After` from the server replaces the next delay when it fits in what is left of
    the backoff budget (the sum of the delays); one that does not fit ends the retries, since
    honouring it would delay the agent longer than the template author allowed.
    """

    delays: tuple[float, ...] = RETRY_DELAYS

    @property
    def budget(self) -> float:
        return sum(self.delays)

    @property
    def max_attempts(self) -> int:
        return len(self.delays) + 1

    def decide(self, attempts_done: int, result: AttemptResult, waited: float) -> RetryDecision:
        """After attempt number `attempts_done` (1-based) ended in `result`, having already
        waited `waited` seconds between attempts, should another attempt follow?"""
        if result.kind == "ok":
            return RetryDecision(None, "succeeded")
        if result.kind == "permanent":
            return RetryDecision(None, "permanent failure")
        if attempts_done >= self.max_attempts:
            return RetryDecision(None, "attempts exhausted")
        delay = self.delays[attempts_done - 1]
        if result.retry_after is not None:
            remaining = self.budget - waited
            if result.retry_after > remaining:
                return RetryDecision(None, f"Retry-After {result.retry_after:g}s exceeds budget")
            delay = max(result.retry_after, 0.0)
        reason = result.error_type or result.kind
        return RetryDecision(delay, reason)


NO_RETRY = RetryPolicy(delays=())


def retry_policy_for(hook: HookSpec) -> RetryPolicy:
    """`on_error: retry` retries; `log` and `fail` make exactly one attempt."""
    return RetryPolicy() if hook.on_error == "retry" else NO_RETRY


def outcome_of(result: AttemptResult) -> str:
    """The journal's outcome for a final attempt: success, skipped, interrupted (the run was
    cut short: `AttemptLoop` says so in its error type), timeout or failed."""
    if result.kind == "ok" and result.skipped:
        return "skipped"
    if result.kind == "ok":
        return "success"
    if result.error_type == INTERRUPTED:
        return INTERRUPTED
    if result.kind == "timeout":
        return "timeout"
    return "failed"


def attempt_timeout(hook: HookSpec, now: float, deadline: float | None) -> float:
    """An attempt gets the hook's timeout, cut short by the caller's deadline (a pre-stop hook
    shares the supervisor's grace period). Never negative."""
    if deadline is None:
        return hook.timeout
    return max(0.0, min(hook.timeout, deadline - now))


def fails_transition(hook: HookSpec, outcome: str, event: str | None = None) -> bool:
    """A blocking hook with `on_error: fail` that did not succeed aborts the transition
    (only at the events of its `refuse_on`, when it names some)."""
    if hook.refuse_on is not None and event is not None and event not in hook.refuse_on:
        return False
    return hook.blocking and hook.on_error == "fail" and outcome not in ("success", "skipped")


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class DebounceWindow(NamedTuple):
    """Trailing-edge coalescing: the first event opens a window of `seconds`; when it closes,
    only the latest event seen in it fires. Windows are fixed from their first event, so a
    steady stream still delivers its latest state once per window instead of never."""

    seconds: float

    def closes_at(self, opened_at: float) -> float:
        return opened_at + self.seconds
