"""The clock a session's liveness is judged on.

A heartbeat is a moment, and "stale" compares two moments: both must come from one clock. On
PostgreSQL that is the database's own (heartbeats are written with its clock, and a
reconciler asks it for "now"), so that a skewed machine's clock never makes a live agent look
dead or a dead one alive. On SQLite, one machine, it is that machine's clock.

A supervisor can only show it is alive while it can write: a heartbeat missed while the
database was down, or while this reader could not reach it, says nothing. `alive_since` is
the moment from which every live supervisor could have written again: the database's start
(`pg_postmaster_start_time()`), or later, when this reader saw it unreachable and then reached
it again. A heartbeat is judged from whichever is later, itself or `alive_since`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

# Test-only: seconds added to this process's clock, to show that a decision on a shared
# database does not depend on it. Never set in production.
CLOCK_OFFSET_ENV = "LIFECYCLE_HOOKS_TEST_CLOCK_OFFSET"


@dataclass(frozen=True, slots=True)
class LivenessClock:
    """What staleness is measured against: the journal's `now` and the moment from which a
    live supervisor could have written (`alive_since`), both in unix seconds on one clock."""

    now: float
    alive_since: float = 0.0

    def age(self, beat: float) -> float:
        """How long ago a supervisor whose last sign of life is `beat` could have written
        and did not."""
        return self.now - max(beat, self.alive_since)


def local_clock() -> float:
    """This process's wall clock (unix seconds), shifted by `$LIFECYCLE_HOOKS_TEST_CLOCK_OFFSET`
    where a test sets it."""
    offset = os.environ.get(CLOCK_OFFSET_ENV, "")
    try:
        return time.time() + (float(offset) if offset else 0.0)
    except ValueError:
        return time.time()
