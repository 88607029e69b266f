"""`Supervisor`: owns one agent process through its phases and fires every hook, as Scion's
`sciontool init` does.

    created -> provisioning -> [pre-start] -> starting -> running -> [post-start]
            ... runtime events from the event socket, activity changes, limits ...
    SIGTERM/SIGINT or a limit -> stopping -> [pre-stop] -> TERM, grace, KILL
    child exits -> stopped (or error) -> [session-end]

The supervisor coordinates parts that each own one concern: the phase, the activity and hook
firing (phases.py), the agent's process tree (agent_tree.py), signals and the stop's grace
period (shutdown.py), what the agent reports (agent_events.py, through inbox.py to the main
loop here), and this session in the journal with the recovery of earlier runs
(journaling.py, recovery.py).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..telemetry.otel_env import merge_otel_env, samples_every_session
from ..tracecontext import SpanIds, traceparent
from ..variables import JOURNAL_KEY_ENV, JOURNAL_KEY_FILE_ENV, JOURNAL_SETTINGS, METADATA_ENV
from .admission import Admitted
from .agent_events import AgentEvents
from .agent_tree import AgentTree, spawn_environment
from .inbox import AgentExited, Inbox, SignalReceived
from .limits import Limits
from .options import DEFAULT_GRACE_PERIOD, SupervisorOptions
from .phases import Phases
from .shutdown import RunInterrupted, Shutdown
from .watchers import OwedFailures

if TYPE_CHECKING:
    from ..engine.dispatch import DispatchResult
    from ..engine.engine import HookEngine
    from ..engine.session import AgentSession
    from ..telemetry.setup import Telemetry
    from .journaling import SessionJournal
    from .owed_moments import JournalLike

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "EXIT_LIMITS",
    "EXIT_SUPERVISOR_FAILURE",
    "RunInterrupted",
    "Supervisor",
    "SupervisorOptions",
    "agent_metadata",
]

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

EXIT_LIMITS = 10
EXIT_SUPERVISOR_FAILURE = 1
# The agent's command could not be started, as shells and `docker run` tell it apart.
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
# How often the main loop collects the agent's exited orphans (re-parented to the supervisor).
REAP_INTERVAL = 1.0


def agent_metadata(options: SupervisorOptions) -> dict[str, str]:
    """Flags, then `SCION_*` variables, then the template; AGENT_ID stable per agent name.
    Without a name from any of them, the agent is named after its template (or harness)."""
    metadata: dict[str, str] = dict(options.template.metadata)
    for name, variable in METADATA_ENV.items():
        if options.environ.get(variable):
            metadata[name] = options.environ[variable]
    metadata.update({k: v for k, v in options.metadata.items() if v})
    # Not the command's name ("python3", "true"): what the template says the agent is.
    metadata.setdefault(
        "AGENT_NAME", metadata.get("TEMPLATE_NAME") or metadata.get("HARNESS_NAME") or "agent"
    )
    metadata.setdefault("AGENT_SLUG", _slug(metadata["AGENT_NAME"]))
    # Stable across runs of the same agent, so that crash recovery can find the earlier run.
    metadata.setdefault("AGENT_ID", _stable_agent_id(metadata["AGENT_SLUG"]))
    if not metadata.get("CONTAINER_ID") and options.environ.get("HOSTNAME"):
        metadata["CONTAINER_ID"] = options.environ["HOSTNAME"]
    return metadata


class Supervisor:
    """Runs one agent from `created` to its session's end: makes the engine and the parts
    (each owns one concern) and holds the main loop that joins them."""

    def __init__(self, options: SupervisorOptions) -> None:
        self.options = options
        _keep_journal_settings_from_children(options.environ)
        self.metadata = agent_metadata(options)
        self.limits = Limits.from_sources(options.template.limits, options.environ)
        self.inbox = Inbox()
        self.phases = Phases(options.environ, options.user, options.template)
        self.phases.make_session = self._make_session
        self.phases.owed_moment = self._owed_moment
        self.agent = AgentTree(options.environ, on_exit=self.inbox.put_exit)
        self.shutdown = Shutdown(options.grace_period, self.inbox, self.agent, self.phases)
        self.events = AgentEvents(
            self.inbox, self.phases, self.limits, options.environ, options.template.env
        )
        # pre-stop/session-end hooks with a retry horizon that failed: the session stays owed.
        self.owed_failures = OwedFailures()
        # The OTel settings the agent is given (the SDK's providers are built from the same).
        self.otel_env = merge_otel_env(options.template.env, options.environ)
        # Made with the session (`_make_session`), at its first hook or after the spawn.
        self.telemetry: Telemetry | None = None
        self.engine: HookEngine | None = None
        # The session span's start and ids, chosen now: the agent may be started, and given
        # them, before the span is made.
        self._started = time.time_ns()
        self._session_ids = SpanIds.new()
        self._journal: JournalLike | None = None  # the engine's
        self._session_journal: SessionJournal | None = None  # made at its first use
        self._journal_lock = threading.Lock()  # the metrics' thread reads its losses
        self._ended = False  # session-end fired

    # -- the run --

    def run(self) -> int:
        """Supervise the agent to the end of its session; returns `run`'s exit code."""
        with self.shutdown.handling_signals():
            return self._run()

    def _run(self) -> int:
        try:
            code = self._lifecycle()
        except Exception as exc:  # the supervisor's own failure
            log.exception("supervisor failed")
            code = self._fail(f"supervisor failure: {exc}", type(exc).__name__)
        finally:
            self._close()
        return code

    def _make_session(self) -> AgentSession:
        """Telemetry, the engine and the session span, made when the first event fires a hook,
        or right after the agent's spawn when nothing before it needed them."""
        # Here, not at the top: the OTel SDK and the engine's modules, 94M instructions (a
        # fifth of `run`'s start, callgrind with bench_startup.py's judged template) that an
        # agent whose template fires nothing before its start does not wait for
        # (tests/test_startup_imports.py).
        from .session_parts import make_session_parts

        parts = make_session_parts(
            self.options, self.metadata, self._session_ids, self._started, self._journal_losses
        )
        self.telemetry, self.engine = parts.telemetry, parts.engine
        self.shutdown.engine = parts.engine
        self._journal = parts.engine.recorders.journal
        parts.engine.recorders.watch(self.owed_failures)
        self.events.count_with(parts.telemetry.meter_provider)
        return parts.session

    def _lifecycle(self) -> int:
        options, phases = self.options, self.phases
        phases.set_phase("provisioning")
        self.events.open(options.command, self.metadata, options.user)
        phases.legacy("pre-start")
        result = phases.record("pre-start")
        early = self.shutdown.early_signal
        if early is not None:
            # Stopped during pre-start: what pre-start set up is undone, the agent never starts.
            self.shutdown.begin(f"signal {signal.Signals(early).name}")
            return self._finish(exit_code=128 + early, error=None)
        if result is not None and not result.ok:
            return self._fail_transition("pre-start", result)
        phases.set_phase("starting")
        self.agent.become_subreaper()
        try:
            pid = self._spawn()
        except (OSError, LookupError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            message = f"could not start {options.command[0]!r}: {reason}"
            print(f"otel-lifecycle-hooks: {message}", file=sys.stderr)
            return self._fail(message, type(exc).__name__, exit_code=_spawn_exit_code(exc))
        # What the agent's start did not need, from here on: the session (when no hook before
        # needed it), its events read, the held log records, the meter provider, the journal
        # and recovery (test_startup_imports.py).
        session = phases.start_session()
        telemetry = self.telemetry
        assert telemetry is not None
        self.events.serve()
        session.release_event_records()
        telemetry.start_metrics()
        self.agent.follow()
        journaling = self._journaling()
        journaling.open()
        journaling.mark_agent(pid)
        phases.set_phase("running")
        phases.legacy("post-start")
        result = phases.record_owed("post-start")
        journaling.mark_post_start()
        if not result.ok:
            self.agent.stop(self.shutdown.grace_deadline())
            return self._fail_transition("post-start", result)
        if options.on_running is not None:
            options.on_running()
        return self._main_loop()

    def _spawn(self) -> int:
        """Start the agent with its environment (the channel's variables included); its pid."""
        options = self.options
        session = self.phases.session
        if session is None and not samples_every_session(self.otel_env, os.environ):
            session = self.phases.start_session()  # the sampler decides the agent's flags
        env = spawn_environment(
            options.environ,
            options.template,
            self.otel_env,
            self.metadata,
            self.agent.tag,
            (
                self._session_ids.traceparent()
                if session is None
                else traceparent(session.span.get_span_context())
            ),
        )
        identity: dict[str, Any] = {}
        if options.user:
            # Here, not at the top: the script module (about 1.2 ms before the agent's start,
            # -X importtime) only for an agent of another user.
            from ..actions.script import user_process_options

            identity.update(user_process_options(options.user, env))
        env.update(self.events.agent_variables(env))  # after the user's: HOME is the agent's
        return self.agent.spawn(options.command, env, identity, other_user=bool(options.user))

    def _main_loop(self) -> int:
        shutdown, agent, phases = self.shutdown, self.agent, self.phases
        max_duration = self.limits.max_duration
        duration_deadline = agent.started + max_duration if max_duration is not None else None
        kill_at: float | None = None  # the stop's grace deadline
        next_reap = time.monotonic() + REAP_INTERVAL
        while True:
            timeout = 0.2
            if duration_deadline is not None and not shutdown.requested:
                timeout = max(0.0, min(timeout, duration_deadline - time.monotonic()))
            item = self.inbox.get(timeout)
            if time.monotonic() >= next_reap:
                agent.reap_orphans()
                next_reap = time.monotonic() + REAP_INTERVAL
            if isinstance(item, AgentExited):
                # From the agent's exit, the grace period bounds the rest (see _finish).
                shutdown.exit_deadline = (
                    shutdown.exit_deadline or shutdown.deadline or shutdown.grace_deadline()
                )
                self.events.take_last(
                    stopping=shutdown.requested,
                    senders_running=agent.senders_running,
                    until=shutdown.exit_deadline,
                )
                return self._finish(exit_code=item.code, error=shutdown.crash_message())
            if isinstance(item, SignalReceived):
                name = signal.Signals(item.signum).name
                if item.signum == signal.SIGHUP:
                    agent.forward(signal.SIGHUP)
                elif not shutdown.requested:
                    kill_at = shutdown.begin(f"signal {name}")
                else:
                    log.warning("second %s ignored: already stopping", name)
            elif isinstance(item, Admitted):
                self.events.act_on(item, stopping=shutdown.requested)
            now = time.monotonic()
            if (
                duration_deadline is not None
                and not shutdown.requested
                and now >= duration_deadline
            ):
                phases.limit_exceeded("max_duration", int(now - agent.started))
            if phases.limit_hit is not None and not shutdown.requested:
                kill_at = shutdown.begin("limits exceeded")
            if kill_at is not None and time.monotonic() >= kill_at:
                agent.kill()
                kill_at = None

    # -- the end --

    def _finish(self, exit_code: int, error: str | None) -> int:
        # From the agent's exit, the grace period bounds the rest: what it left running, and
        # the deliveries still queued (session-end's own hooks get their timeout after it).
        shutdown = self.shutdown
        shutdown.exit_deadline = (
            shutdown.exit_deadline or shutdown.deadline or shutdown.grace_deadline()
        )
        shutdown.end_leftovers()
        phases = self.phases
        if error:
            phases.set_phase("error")
            phases.record(
                "error",
                {"ERROR_MESSAGE": error, "ERROR_TYPE": "AgentCrash", "EXIT_CODE": str(exit_code)},
            )
        elif phases.phase != "error":
            if phases.phase != "stopping":
                phases.set_phase("stopping")
            phases.set_phase("stopped")
        self._end_session(exit_code)
        return EXIT_LIMITS if phases.limit_hit is not None else exit_code

    def _fail_transition(self, event: str, result: DispatchResult) -> int:
        failed = result.failed
        name = failed.hook.name if failed else "?"
        reason = failed.message if failed else ""
        message = f"hook {name!r} failed at {event} with on_error: fail: {reason}"
        print(f"otel-lifecycle-hooks: {message}", file=sys.stderr)
        return self._fail(message, (failed.error_type if failed else None) or "HookFailed")

    def _fail(
        self, message: str, error_type: str, *, exit_code: int = EXIT_SUPERVISOR_FAILURE
    ) -> int:
        """The supervisor's own failure: phase error, `error`, then session-end; `exit_code`
        (1, or 127/126 for an agent command not found / not executable)."""
        if self.agent.running:
            self.agent.stop(self.shutdown.grace_deadline())  # never left unsupervised
        if self.agent.child is not None:
            self.shutdown.end_leftovers()
        if self.phases.phase != "error":
            self.phases.set_phase("error")
            self.phases.record("error", {"ERROR_MESSAGE": message, "ERROR_TYPE": error_type})
        if not self._ended:
            self._end_session(exit_code)
        return exit_code

    def _end_session(self, exit_code: int) -> None:
        self._ended = True
        if self.engine is not None:
            # session-end follows the session's earlier events; what the grace period left
            # queued is journaled as dropped instead of holding the exit.
            deadline = self.shutdown.exit_deadline or self.shutdown.grace_deadline()
            self.engine.dispatcher.settle(deadline)
        self.phases.legacy("session-end")
        self.phases.record_owed("session-end", {"EXIT_CODE": str(exit_code)})
        self._journaling().end(exit_code)

    def _close(self) -> None:
        self.agent.stop_being_subreaper()  # the process may live on (a library caller, a test)
        self.events.close()
        if self.phases.session is not None:
            self.phases.session.end()
        if self._session_journal is not None:
            self._session_journal.stop_heartbeat()
            self._session_journal.stop_retention()
        if self.engine is not None:
            interrupted = self.shutdown.interrupted
            timeout = 0.5 if interrupted else self.shutdown.drain_timeout(self.options.template)
            self.engine.shutdown(timeout)
        if self.phases.session is not None:
            self._journaling().close()
        if self.telemetry is not None:
            self.telemetry.shutdown()
        # Last, once the agent is gone and its session ended: nothing of it outlives the run.
        self.agent.release_cgroups()

    # -- the journal --

    def _journaling(self) -> SessionJournal:
        """This session's part of the journal, made at its first use (with the session)."""
        session = self.phases.start_session()
        with self._journal_lock:
            if self._session_journal is None:
                # Here, not at the top: the journal's modules, SQLite and crash recovery (about
                # 6 ms, -X importtime) come after the agent's start (test_startup_imports.py).
                from .journaling import SessionJournal

                assert self.engine is not None
                options = self.options
                self._session_journal = SessionJournal(
                    self._journal,
                    self.engine,
                    session,
                    options.template,
                    options.environ,
                    self.metadata,
                    options.grace_period,
                    options.user,
                    self.owed_failures,
                )
            return self._session_journal

    def _owed_moment(self, event: str) -> float:
        return self._journaling().owed_moment(event)

    def _journal_losses(self) -> dict[str, int]:
        if self.phases.session is None:  # read by the metrics' thread: never makes it
            return {}
        return self._journaling().losses()


def _keep_journal_settings_from_children(environ: Mapping[str, str]) -> None:
    """Take the journal's settings (its location, its key) out of this process's environment
    once the run holds its own copy (`environ`): scripts and legacy hooks start from this
    process's environment, some as the agent's user, who can read a process's environment
    of its own uid (/proc/PID/environ)."""
    if environ is os.environ:
        return  # the caller renders from the process environment itself: nothing to take
    for name in (*JOURNAL_SETTINGS, JOURNAL_KEY_ENV, JOURNAL_KEY_FILE_ENV):
        os.environ.pop(name, None)


def _stable_agent_id(slug: str) -> str:
    """The agent's id, the same for every run of an agent of this name."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "agent:" + slug))


def _slug(name: str) -> str:
    slug = "".join(c.lower() if c.isalnum() else "-" for c in name).strip("-")
    while "--" in slug:
        slug = slug.replace("--", "-")
    return slug or "agent"


def _spawn_exit_code(exc: Exception) -> int:
    """The exit code of a start that failed with `exc`: 127 not found, 126 not executable."""
    if isinstance(exc, FileNotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(exc, (PermissionError, IsADirectoryError)) or (
        isinstance(exc, OSError) and exc.errno == errno.ENOEXEC
    ):
        return EXIT_NOT_EXECUTABLE
    return EXIT_SUPERVISOR_FAILURE
