"""Signals and the stop: the handlers of SIGTERM, SIGINT and SIGHUP, the stop's reason and its
grace deadline, and the interruption a second stop signal makes.

The grace period is shared, as Kubernetes shares terminationGracePeriodSeconds: blocking
pre-stop hooks spend from it, and the agent gets what is left before KILL. SIGHUP is forwarded
to the agent and stops nothing.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

from ..template.model import Template
from .agent_tree import AgentTree
from .inbox import Inbox
from .phases import Phases

if TYPE_CHECKING:
    from ..engine.engine import HookEngine

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_Handler = Callable[[int, FrameType | None], object] | int | None


class RunInterrupted(Exception):
    """Raised in the main thread by a second stop signal, out of the hook it waits on."""


class Shutdown:
    """When and how the run stops: what asked for it, by when the agent must be gone, and
    what a second stop signal cuts short."""

    def __init__(self, grace_period: float, inbox: Inbox, agent: AgentTree, phases: Phases) -> None:
        self.grace_period = grace_period
        self._inbox = inbox
        self._agent = agent
        self._phases = phases
        self._engine: HookEngine | None = None  # once made: a second signal stops its attempts
        self.reason: str | None = None  # why the run stops, once it does
        self.deadline: float | None = None  # the stop's grace deadline: then KILL
        self.exit_deadline: float | None = None  # the grace deadline from the agent's exit
        self.early_signal: int | None = None  # a stop signal that came before the agent started
        self.interrupted = False  # a second stop signal came
        self._signals = 0  # SIGINT/SIGTERM received, counted in the handler

    @property
    def engine(self) -> HookEngine | None:
        """The run's engine, once made (with the session: it may come after the signals)."""
        return self._engine

    @engine.setter
    def engine(self, engine: HookEngine | None) -> None:
        self._engine = engine
        if engine is not None and self.interrupted:
            # A second signal came before the engine was made: it makes no attempt either.
            _stop_attempts(engine)

    @property
    def requested(self) -> bool:
        """Whether the run is stopping (a signal or a limit asked for it)."""
        return self.reason is not None

    def grace_deadline(self) -> float:
        """A full grace period from now."""
        return time.monotonic() + self.grace_period

    def begin(self, reason: str) -> float:
        """Debounce windows closed, pre-stop (legacy scripts, then hooks), then TERM; returns
        when to KILL."""
        self.reason = reason
        deadline = self.grace_deadline()
        self.deadline = deadline
        self._phases.set_phase("stopping")
        if self.engine is not None:
            # After phase-change to stopping (its window's latest state), before pre-stop
            # spends the grace period: the workers deliver them meanwhile.
            self.engine.dispatcher.close_windows()
        self._phases.legacy("pre-stop", deadline=deadline)
        self._phases.record_owed("pre-stop", deadline=deadline)
        self._agent.forward(signal.SIGTERM)
        return deadline

    def end_leftovers(self) -> None:
        """What the agent left running ends by the stop's deadline (TERM was sent with the
        stop), else by the exit's (TERM is sent now)."""
        if self.deadline is not None:
            self._agent.end_leftovers(self.deadline, terminate=False)
        else:
            deadline = self.exit_deadline or self.grace_deadline()
            self._agent.end_leftovers(deadline, terminate=True)

    def crash_message(self) -> str | None:
        """Why the agent crashed, when a signal nobody asked for killed it."""
        signum = self._agent.died_of
        if self.reason is not None or signum is None:
            return None
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = str(signum)
        return f"agent terminated by {name}"

    def drain_timeout(self, template: Template) -> float:
        """How long the engine may take to finish at exit: what is left of the grace period,
        then the session-end hooks' own timeout (their deliveries are owed)."""
        if self.exit_deadline is None:
            return max(self.grace_period, 5.0)
        session_end = template.hooks_for("session-end")
        budget = max((hook.timeout for hook in session_end), default=0.0)
        return max(0.0, self.exit_deadline - time.monotonic()) + budget + 0.5

    # -- the handlers --

    @contextmanager
    def handling_signals(self) -> Iterator[None]:
        """The run's signal handlers, in the main thread, restored when it ends."""
        previous: dict[int, _Handler] = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (*STOP_SIGNALS, signal.SIGHUP):
                previous[signum] = signal.signal(signum, self._on_signal)
        try:
            yield
        finally:
            for restored, handler in previous.items():
                signal.signal(restored, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum != signal.SIGHUP:
            self._signals += 1
        if signum != signal.SIGHUP and (
            self.reason is not None
            or self._phases.phase in ("stopped", "error")
            # Asked twice while a blocking hook holds the main loop (post-start): the first
            # is still waiting in the inbox, so only this count knows of it.
            or self._signals > 1
        ):
            self._interrupt(signum)  # asked again while stopping: end now
        if (
            signum != signal.SIGHUP
            and self.early_signal is None
            and self._phases.phase in ("created", "provisioning")
        ):
            self.early_signal = signum  # read once pre-start is over
        self._inbox.put_signal(signum)

    def _interrupt(self, signum: int) -> None:
        """A second SIGINT/SIGTERM: no further attempts (what is left is journaled as
        interrupted, replayable), the agent killed, and a hook the main thread waits on
        abandoned by raising out of it."""
        if self.engine is not None:
            _stop_attempts(self.engine)
        self._agent.kill_now()
        if self._phases.dispatching and not self.interrupted:
            self.interrupted = True
            raise RunInterrupted(f"interrupted by a second {signal.Signals(signum).name}")
        self.interrupted = True


def _stop_attempts(engine: HookEngine) -> None:
    """No further attempt of `engine`'s: what is left is journaled as interrupted."""
    engine.executor.interrupted.set()
    engine.executor.stopping.set()
