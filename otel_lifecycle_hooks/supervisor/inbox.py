"""What the supervisor's main loop acts on, in the order it arrived: the agent's admitted
messages, the signals the supervisor received, and the agent's exit.

Messages are bounded (`MAX_PENDING_MESSAGES`): past the bound, the thread that delivers one
waits (backpressure on the senders) instead of growing memory. Signals and the exit bypass the
bound, so that neither is ever held behind a flood.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import NamedTuple

from .admission import Admitted

# Socket messages waiting for the main loop; past this the socket reader waits (backpressure
# on the senders) instead of growing memory: every event still reaches the activity tracker.
MAX_PENDING_MESSAGES = 1024


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class SignalReceived(NamedTuple):
    """SIGTERM, SIGINT or SIGHUP, as the supervisor's handler saw it."""

    signum: int


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class AgentExited(NamedTuple):
    """The agent's exit code (128 + N for a death by signal N, as a shell reports it)."""

    code: int


# What the loop acts on: a message from the agent that admission let through, a signal, the exit.
Item = Admitted | SignalReceived | AgentExited


class Inbox:
    """The main loop's queue. Its `put_*` methods are called from other threads and from the
    signal handler; `get` only from the main loop."""

    def __init__(self, limit: int = MAX_PENDING_MESSAGES) -> None:
        # SimpleQueue: its put may be called from the signal handler (it is reentrant), and
        # each event crosses it, at a fraction of queue.Queue's locking.
        self._queue: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self._message_slots = threading.BoundedSemaphore(limit)

    def put_message(self, message: Admitted) -> None:
        """Queue an admitted message, waiting for room when the loop is behind."""
        self._message_slots.acquire()
        self._queue.put(message)

    def put_signal(self, signum: int) -> None:
        """Queue a signal (never waits: safe in a signal handler)."""
        self._queue.put(SignalReceived(signum))

    def put_exit(self, code: int) -> None:
        """Queue the agent's exit (never waits)."""
        self._queue.put(AgentExited(code))

    def get(self, timeout: float) -> Item | None:
        """The next item, or None when nothing came within `timeout` seconds."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        return self._taken(item)

    def get_nowait(self) -> Item | None:
        """The next item if one is waiting, else None."""
        try:
            return self._taken(self._queue.get_nowait())
        except queue.Empty:
            return None

    def drain(self) -> Iterator[Item]:
        """Every item still queued, at the session's end (a sender still waiting for room
        stays waiting: nothing it holds is acted on)."""
        while True:
            try:
                yield self._queue.get_nowait()
            except queue.Empty:
                return

    def _taken(self, item: Item) -> Item:
        if isinstance(item, Admitted):
            self._message_slots.release()
        return item
