"""Rate limits as pure decisions: how long an execution must wait for its token.

A `rate_limit: 5/s` is a token bucket holding up to 5 tokens, refilled at 5 per second: a
burst of 5, then one execution every 0.2 s. Over any stretch of T seconds at most
`count + count * T / period` executions start. `hook_rate_limit:` is one more bucket, shared
by every http and webhook hook of the agent; an execution needs a token from each bucket
that applies to it.

Nothing here sleeps or reads a clock: every call takes `now` (monotonic seconds), so the
decisions are tested with plain numbers. What to do while waiting (coalesce, drop, let a
lifecycle event through) is dispatch's business.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import ExitStack

from ..template.model import RateLimit, Template

_EPSILON = 1e-9  # of a token


class TokenBucket:
    """The tokens of one rate limit. Thread-safe through `lock`, which `RateGate` holds."""

    def __init__(self, limit: RateLimit, now: float) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self._rate = limit.executions / limit.period  # tokens per second
        self._tokens = float(limit.executions)  # a fresh bucket allows a full burst
        self._stamp = now

    @property
    def tokens(self) -> float:
        return self._tokens

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0.0: one is there now)."""
        self._refill(now)
        missing = 1.0 - self._tokens
        # Float dust (0.9999999...) counts as a whole token: a wait of 1e-17 s would spin.
        return 0.0 if missing <= _EPSILON else missing / self._rate

    def take(self, now: float) -> None:
        """Take one token, going into debt when there is none (a forced execution).

        The debt is bounded by one full bucket, so a stream of forced executions (a blocking
        hook) delays the others sharing the bucket by at most about one period, never for ever.
        """
        self._refill(now)
        self._tokens = max(self._tokens - 1.0, -float(self.limit.executions))

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._stamp)
        self._tokens = min(float(self.limit.executions), self._tokens + elapsed * self._rate)
        self._stamp = max(self._stamp, now)


class RateGate:
    """The buckets one hook's executions draw from: its own and, for HTTP hooks, the shared one."""

    def __init__(self, buckets: Sequence[TokenBucket]) -> None:
        # One lock order for every gate, so two workers sharing a bucket never deadlock.
        self.buckets = tuple(sorted(buckets, key=id))

    def admit(self, now: float, *, force: bool = False) -> float:
        """Take a token from every bucket and return 0.0, or return how many seconds to wait
        before asking again (nothing taken). `force` takes them even into debt: the execution
        runs now and is still counted against the limit."""
        with ExitStack() as locks:
            for bucket in self.buckets:
                locks.enter_context(bucket.lock)
            wait = max(bucket.wait(now) for bucket in self.buckets)
            if wait > 0.0 and not force:
                return wait
            for bucket in self.buckets:
                bucket.take(now)
            return 0.0


def gates_for(template: Template, now: float) -> dict[str, RateGate]:
    """The gate of every rate-limited hook of `template`, by hook name (others have none)."""
    shared = TokenBucket(template.hook_rate_limit, now) if template.hook_rate_limit else None
    gates: dict[str, RateGate] = {}
    for hook in template.hooks:
        buckets = [TokenBucket(hook.rate_limit, now)] if hook.rate_limit else []
        if shared is not None and hook.action.is_http:
            buckets.append(shared)
        if buckets:
            gates[hook.name] = RateGate(buckets)
    return gates
