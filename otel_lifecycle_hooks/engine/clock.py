"""Time as the engine sees it, so that retry and debounce timing can be tested without sleeping."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...

    def sleep(self, seconds: float, interrupt: threading.Event | None = None) -> bool:
        """Wait `seconds`; return True when `interrupt` was set before they passed."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float, interrupt: threading.Event | None = None) -> bool:
        if interrupt is None:
            time.sleep(max(0.0, seconds))
            return False
        return interrupt.wait(max(0.0, seconds))


class FakeClock:
    """A clock whose sleeps return at once and move time forward; records every sleep."""

    def __init__(self, start: float = 1_000.0, wall_start: float = 1_790_000_000.0) -> None:
        self._now = start
        self._wall_offset = wall_start - start
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def wall(self) -> float:
        with self._lock:
            return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float, interrupt: threading.Event | None = None) -> bool:
        self.sleeps.append(seconds)
        self.advance(max(0.0, seconds))
        return bool(interrupt and interrupt.is_set())


SYSTEM_CLOCK = SystemClock()
