"""Repeated warnings, rate-limited: one line per key per interval, with a count of those held
back.

A warning that the agent's events can repeat (an unresolved variable, rendered on every tool
call) would otherwise write a line per event: 4,621 lines in 30 s under load. The first of a
key is written at once; later ones within `interval` seconds are counted, and the next one
written after the interval says how many were suppressed. Pure apart from the clock, which
is given.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable

DEFAULT_INTERVAL = 60.0  # seconds
_KEYS_LIMIT = 4096  # keys remembered; the least recently written go first


class WarningLimit:
    """Decides, per key, whether a warning may be written now."""

    def __init__(
        self, interval: float = DEFAULT_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        # key -> (when it was last written, how many were held back since)
        self._state: OrderedDict[Hashable, tuple[float, int]] = OrderedDict()

    def allow(self, key: Hashable) -> int | None:
        """None when this warning is to be held back; else how many of the same key were
        held back since the last one written (0 for the first)."""
        now = self._clock()
        with self._lock:
            state = self._state.get(key)
            if state is not None and now - state[0] < self.interval:
                self._state[key] = (state[0], state[1] + 1)
                return None
            self._state[key] = (now, 0)
            self._state.move_to_end(key)
            while len(self._state) > _KEYS_LIMIT:
                self._state.popitem(last=False)
            return 0 if state is None else state[1]


unresolved_variables = WarningLimit()


def warn_unresolved(
    logger: logging.Logger,
    hook: str,
    names: Iterable[str],
    limit: WarningLimit = unresolved_variables,
) -> None:
    """One warning for the variables of `hook` that rendered empty, each at most once per
    `limit.interval`, with the number suppressed since."""
    written: list[str] = []
    suppressed = 0
    for name in names:
        held_back = limit.allow((hook, name))
        if held_back is not None:
            written.append(name)
            suppressed += held_back
    if not written:
        return
    if suppressed:
        logger.warning(
            "hook %s: unresolved variables %s rendered empty (%d like it suppressed in the "
            "last %gs)",
            hook,
            ", ".join(written),
            suppressed,
            limit.interval,
        )
    else:
        logger.warning("hook %s: unresolved variables %s rendered empty", hook, ", ".join(written))
