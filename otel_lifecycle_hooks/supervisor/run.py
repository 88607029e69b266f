"""`Supervisor`: owns one agent process through its phases and fires every hook, as Scion's
`sciontool init` does.

    created -> provisioning -> [pre-start] -> starting -> running -> [post-start]
            ... runtime events from the event socket, activity changes, limits ...
    SIGTERM/SIGINT or a limit -> stopping -> [pre-stop] -> TERM, grace, KILL
    child exits -> stopped (or error) -> [session-end]

The grace period is shared, as Kubernetes shares terminationGracePeriodSeconds: blocking
pre-stop hooks spend from it, and the child gets what is left before KILL.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import confinement
from .. import events as ev
from ..agent_env import agent_environment
from ..engine.dispatch import DispatchResult
from ..engine.engine import HookEngine
from ..engine.model import Execution
from ..engine.recording import ExecutionWatcher
from ..engine.session import AgentSession
from ..template.model import RETRIED_EVENTS, Template
from ..template.trust import is_loader_variable
from ..variables import JOURNAL_KEY_ENV, JOURNAL_KEY_FILE_ENV, JOURNAL_SETTINGS, METADATA_ENV
from .admission import Admission, Admitted, IngressCounts
from .channel import SessionChannel, wants_http_route
from .deferred import DeferredJournal
from .legacy import run_legacy_hooks
from .limits import Limits
from .processes import AGENT_TAG_ENV, AgentProcesses, die_with_parent, is_subreaper, set_subreaper
from .server import STOPPING, EventServer

# The session row's column holding the moment a claim fixes, by owed event.
_CLAIMED_COLUMNS = {"pre-stop": "pre_stop_at", "session-end": "session_end_at"}

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

EXIT_LIMITS = 10
EXIT_SUPERVISOR_FAILURE = 1
DEFAULT_GRACE_PERIOD = 10.0
# Socket messages waiting for the main loop; past this the socket reader waits (backpressure
# on the senders) instead of growing memory: every event still reaches the activity tracker.
MAX_PENDING_MESSAGES = 1024
# How often the main loop collects the agent's exited orphans (re-parented to the supervisor).
REAP_INTERVAL = 1.0
# How long the agent's exit waits for its last events still unread in the event socket.
LAST_MESSAGES_BOUND = 1.0  # seconds


class RunInterrupted(Exception):
    """Raised in the main thread by a second stop signal, out of the hook it waits on."""


class SupervisorOptions:
    """What one `run` supervises, and how."""

    # A plain class: a dataclass costs about half a millisecond at import, paid by every `run`.
    def __init__(
        self,
        command: Sequence[str],
        template: Template,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        metadata: Mapping[str, str] | None = None,  # from flags; wins over the rest
        environ: Mapping[str, str] | None = None,  # default: a copy of os.environ
        journal: Any = None,  # a Journal, a path, None for the default, False for none
        hook_log: Any = None,
        user: str | None = None,
        on_running: Callable[[], None] | None = None,  # called once post-start is done
        watchers: Sequence[Any] = (),  # ExecutionWatchers: told of every execution (the report)
    ) -> None:
        self.command = command
        self.template = template
        self.grace_period = grace_period
        self.metadata: Mapping[str, str] = {} if metadata is None else metadata
        self.environ: Mapping[str, str] = dict(os.environ) if environ is None else environ
        self.journal = journal
        self.hook_log = hook_log
        self.user = user
        self.on_running = on_running
        self.watchers = watchers


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
    def __init__(self, options: SupervisorOptions) -> None:
        self.options = options
        _keep_journal_settings_from_children(options.environ)
        self.metadata = agent_metadata(options)
        self.limits = Limits.from_sources(options.template.limits, options.environ)
        self.phase = "created"
        self.activity = "idle"
        self.exit_code: int | None = None
        # SimpleQueue: its put may be called from the signal handler (it is reentrant), and
        # each event crosses it, at a fraction of queue.Queue's locking.
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._message_slots = threading.BoundedSemaphore(MAX_PENDING_MESSAGES)
        self._stop_requested: str | None = None
        self._stop_signal: int | None = None  # a stop signal that arrived before the agent started
        self._limit_hit: tuple[str, int] | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._telemetry: Any = None
        self.engine: HookEngine | None = None
        self.session: AgentSession | None = None
        self._tracker: Any = None
        self._server: EventServer | None = None
        # Every message from the agent passes here, whatever route it came by (admission.py).
        self.ingress = IngressCounts()
        self._admission = Admission(self.ingress)
        self._channel: SessionChannel | None = None
        self._journal: Any = None
        self._heartbeat: Any = None  # recovery.Heartbeat, once the session is journaled
        self._retention: Any = None  # journal.retention.RetentionKeeper, from the start
        self._child_started = time.monotonic()
        self._child_signal: int | None = None  # the signal the agent died of, if any
        self._ended = False  # session-end fired
        self._dispatching = False  # the main thread is firing hooks
        self._interrupted = False  # a second stop signal came
        self._stop_signals = 0  # SIGINT/SIGTERM received, counted in the handler
        self._harness_session_id = ""
        self._processes: AgentProcesses | None = None  # set once the agent is started
        # The agent's cgroup, where processes can be confined (confinement.py): what stop and
        # the end kill whole, wherever the agent's processes went.
        self._agent_group: confinement.Cgroup | None = None
        self._cgroups: confinement.CgroupHome | None = None
        self._stop_deadline: float | None = None
        self._agent_tag = f"{os.getpid()}-{uuid.uuid4().hex[:16]}"
        self._set_subreaper = False  # this run made the process a subreaper: undo at the end
        self._session_journaled = False  # recovery, the session row, heartbeat and retention
        # What the journal could not make durable in time (reported in the run's summary).
        self._durability_notes: list[str] = []
        self._recovery_failed = 0  # owed hooks of earlier runs that failed when recovered
        # pre-stop/session-end hooks with a retry horizon that failed: the session stays owed.
        self._owed_failures = _OwedFailures()
        self._close_session_at_exit = False  # close_session waits for their outcome
        self._exit_code: int | None = None
        # The key this run seals its session row with (read with the row, after the agent's
        # start), and the row as this run wrote it: the seal is computed from what the run
        # knows, never from what it reads back.
        self._journal_key: bytes | None = None
        self._sealed_row: Any = None  # journal.rows.SessionRow, once sealed
        # This session's row as read at its first of pre-stop and session-end when a recoverer
        # had claimed it (False: not claimed, or unread); see _claimed_moment.
        self._claimed_row: Any = None
        # The owed events' moments the journal took, by event (see _unjournaled_moment).
        self._journaled_moments: dict[str, float] = {}
        self._exit_deadline: float | None = None  # the grace deadline from the agent's exit

    # -- the run --

    def run(self) -> int:
        previous_handlers = self._install_signal_handlers()
        try:
            return self._run()
        finally:
            for signum, handler in previous_handlers.items():
                signal.signal(signum, handler)

    def _run(self) -> int:
        from ..telemetry.metrics import JournalLosses
        from ..telemetry.setup import configure_telemetry

        options = self.options
        resource = {
            attr: self.metadata[name]
            for name, attr in ev.METADATA_ATTRIBUTES.items()
            if self.metadata.get(name)
        }
        self._telemetry = configure_telemetry(
            options.template.env,
            options.environ,
            resource_attributes=resource,
            session_id=self.metadata["AGENT_SLUG"],
            metrics_later=True,  # made once the agent has started (start_metrics)
        )
        self._telemetry.quiet_session_export_failures()
        self.engine = HookEngine(
            options.template,
            tracer_provider=self._telemetry.tracer_provider,
            meter_provider=self._telemetry.meter_provider,
            environ=options.environ,
            journal=_deferred(options.journal, options.environ),
            hook_log=options.hook_log,
            script_user=options.user,
        )
        self._journal = self.engine.recorders.journal
        for watcher in options.watchers:
            self.engine.recorders.watch(watcher)
        self.engine.recorders.watch(self._owed_failures)
        self.ingress = IngressCounts(self._telemetry.meter_provider)
        JournalLosses(self._journal_losses, self._telemetry.meter_provider)
        self._admission = Admission(self.ingress)
        self.session = AgentSession(
            self.engine,
            agent_name=self.metadata["AGENT_NAME"],
            metadata=self.metadata,
            tracer_provider=self._telemetry.tracer_provider,
        )
        # The first phases' log records wait for the agent's start (their timestamps kept).
        self.session.hold_event_records()
        try:
            code = self._lifecycle()
        except Exception as exc:  # the supervisor's own failure
            log.exception("supervisor failed")
            code = self._fail(f"supervisor failure: {exc}", type(exc).__name__)
        finally:
            self._close()
        return code

    def _lifecycle(self) -> int:
        options = self.options
        self._set_phase("provisioning")
        http = wants_http_route(options.command, self.metadata, options.environ)
        self._channel = SessionChannel(
            self._deliver, _socket_owner(options.user), http, refuse=self.ingress.refuse
        )
        self._server = EventServer(
            self._channel.deliver,
            owner=_socket_owner(options.user),
            refuse=self.ingress.refuse,
            undelivered=self.ingress.sender_losses,
        ).start()
        self._legacy("pre-start")
        result = self._record("pre-start")
        if self._stop_signal is not None:
            # Stopped during pre-start: what pre-start set up is undone, the agent never starts.
            self._begin_stop(f"signal {signal.Signals(self._stop_signal).name}")
            return self._finish(exit_code=128 + self._stop_signal, error=None)
        if not result.ok:
            return self._fail_transition("pre-start", result)
        self._set_phase("starting")
        # Orphans of the agent's tools come to us, not to init, so that stop can reach them.
        if not is_subreaper():
            self._set_subreaper = set_subreaper(True)
        try:
            self._child = self._spawn(options.command)
        except (OSError, LookupError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            message = f"could not start {options.command[0]!r}: {reason}"
            print(f"otel-lifecycle-hooks: {message}", file=sys.stderr)
            return self._fail(message, type(exc).__name__)
        self._child_started = time.monotonic()
        if self.session is not None:
            self.session.release_event_records()
        self._telemetry.start_metrics()
        self._processes = AgentProcesses(self._child.pid, self._agent_tag)
        self._processes.scan()
        threading.Thread(target=self._wait_child, name="child-wait", daemon=True).start()
        self._journal_session()
        self._journal_agent(self._child.pid)
        self._set_phase("running")
        self._legacy("post-start")
        result = self._record_owed("post-start")
        self._journal_call("mark_post_start", self.session.session_id if self.session else "")
        if not result.ok:
            self._stop_child(self._grace_deadline())
            return self._fail_transition("post-start", result)
        if self.options.on_running is not None:
            self.options.on_running()
        return self._main_loop()

    def _main_loop(self) -> int:
        duration_deadline = (
            self._child_started + self.limits.max_duration
            if self.limits.max_duration is not None
            else None
        )
        stop_deadline: float | None = None
        next_reap = time.monotonic() + REAP_INTERVAL
        while True:
            timeout = 0.2
            if duration_deadline is not None and self._stop_requested is None:
                timeout = max(0.0, min(timeout, duration_deadline - time.monotonic()))
            try:
                kind, value = self._inbox.get(timeout=timeout)
            except queue.Empty:
                kind, value = "tick", None
            if kind == "message":
                self._message_slots.release()
            if time.monotonic() >= next_reap:
                self._reap_orphans()
                next_reap = time.monotonic() + REAP_INTERVAL
            if kind == "exit":
                self._take_last_messages()
                return self._finish(exit_code=value, error=self._crash_message(value))
            if kind == "signal":
                if value == signal.SIGHUP:
                    self._forward(signal.SIGHUP)
                elif self._stop_requested is None:
                    stop_deadline = self._begin_stop(f"signal {signal.Signals(value).name}")
                else:
                    log.warning("second %s ignored: already stopping", signal.Signals(value).name)
            elif kind == "message" and self._stop_requested is None:
                try:
                    self._handle_message(value)
                except Exception:  # nothing the agent sends may end the session
                    log.exception("handling an agent message failed")
                    self.ingress.refuse("handler_failed")
            elif kind == "message":
                self.ingress.refuse(STOPPING)  # the session is ending: not acted on, counted
            if (
                duration_deadline is not None
                and self._stop_requested is None
                and time.monotonic() >= duration_deadline
            ):
                self._limit_exceeded("max_duration", int(time.monotonic() - self._child_started))
            if self._limit_hit is not None and self._stop_requested is None:
                stop_deadline = self._begin_stop("limits exceeded")
            if stop_deadline is not None and time.monotonic() >= stop_deadline:
                self._kill_child()
                stop_deadline = None

    # -- stopping --

    def _begin_stop(self, reason: str) -> float:
        """pre-stop (legacy scripts, then hooks), then TERM; returns when to KILL."""
        self._stop_requested = reason
        deadline = self._grace_deadline()
        self._stop_deadline = deadline
        self._set_phase("stopping")
        self._legacy("pre-stop", deadline=deadline)
        self._record_owed("pre-stop", deadline=deadline)
        self._forward(signal.SIGTERM)
        return deadline

    def _grace_deadline(self) -> float:
        return time.monotonic() + self.options.grace_period

    def _stop_child(self, deadline: float) -> None:
        self._forward(signal.SIGTERM)
        while (
            self._child is not None and self._child.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        self._kill_child()

    def _kill_child(self) -> None:
        if self._child is not None and self._child.poll() is None:
            log.warning("grace period spent: killing the agent")
            self._signal_group(signal.SIGKILL)
        if self._processes is not None and self._processes.signal(signal.SIGKILL):
            log.warning("grace period spent: killed the processes the agent left")
        if self._agent_group is not None:
            self._agent_group.kill()  # also those that left its session and its tag

    def _forward(self, signum: int) -> None:
        if self._child is not None and self._child.poll() is None:
            self._signal_group(signum)
        sent: list[int] = []
        if signum != signal.SIGHUP and self._processes is not None:
            # Those that left the agent's group or session (setsid) are signalled one by one.
            sent = self._processes.signal(signum)
        if signum != signal.SIGHUP and self._agent_group is not None:
            # And those the scan never saw; none twice (the group's were signalled above).
            self._agent_group.signal(signum, skip=self._signalled_already(sent))

    def _end_leftovers(self) -> None:
        """After the agent exited: TERM what it left running, KILL it at the grace deadline,
        and reap it, so that nothing the agent started outlives `run`."""
        if self._processes is None:
            return
        group = self._agent_group
        deadline = self._stop_deadline
        if deadline is None:
            deadline = self._exit_deadline or self._grace_deadline()
            signalled = self._processes.signal(signal.SIGTERM)
            if group is not None:
                signalled += group.signal(signal.SIGTERM, skip=self._signalled_already(signalled))
            if signalled:
                log.warning("the agent exited and left processes running: stopping them")
        while self._leftovers() and time.monotonic() < deadline:
            self._reap_orphans()
            time.sleep(0.05)
        in_group = group.pids() if group is not None else []
        if self._processes.signal(signal.SIGKILL) or in_group:
            log.warning("grace period spent: killed the processes the agent left")
        if group is not None:
            group.kill()
        for _ in range(100):  # a killed process takes a moment to become a zombie
            self._reap_orphans(in_group)
            if not self._leftovers():
                break
            time.sleep(0.01)
        self._reap_orphans(in_group)  # one that became a zombie after the last reap above

    def _signalled_already(self, sent: Sequence[int]) -> set[int]:
        """`sent`, the agent, and the members of its process group (a killpg reached them)."""
        skip = set(sent)
        if self._child is not None:
            skip.add(self._child.pid)
            if self._processes is not None:
                skip.update(p.pid for p in self._processes.scan() if p.pgid == self._child.pid)
        return skip

    def _leftovers(self) -> bool:
        """Whether any process of the agent's still runs (a zombie has ended)."""
        if self._processes is not None and self._processes.alive():
            return True
        group = self._agent_group
        # Zombies leave their cgroup: what it lists still runs (the agent itself included,
        # while Popen has not reaped it).
        return group is not None and any(
            pid != getattr(self._child, "pid", None) for pid in group.pids()
        )

    def _reap_orphans(self, pids: Sequence[int] = ()) -> None:
        """Collect the agent's exited orphans: those the scan knows, and `pids` (processes of
        the agent's cgroup, which the scan may never have seen)."""
        if self._processes is not None:
            self._processes.reap()
            self._processes.reap_pids(pids)

    def _signal_group(self, signum: int) -> None:
        assert self._child is not None
        try:
            os.killpg(self._child.pid, signum)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                self._child.send_signal(signum)

    # -- the end --

    def _take_last_messages(self) -> None:
        """The agent's last events (a `status` just before it exits) may still be unread in
        the socket when its exit is seen: read them and handle them before the session ends,
        within a short bound (a descendant still sending cannot hold the exit)."""
        if self._server is None:
            return
        deadline = time.monotonic() + LAST_MESSAGES_BOUND
        while True:
            settled = self._server.settle(timeout=max(0.0, deadline - time.monotonic()))
            handled = False
            while True:
                try:
                    kind, value = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if kind == "message":
                    self._message_slots.release()
                    handled = True
                    if self._stop_requested is None:
                        try:
                            self._handle_message(value)
                        except Exception:  # nothing the agent sends may end the session
                            log.exception("handling an agent message failed")
                            self.ingress.refuse("handler_failed")
                    else:
                        self.ingress.refuse(STOPPING)
                # Anything else (a signal, a tick) changes nothing: the agent has exited and
                # the session ends next.
            if (settled and not handled) or time.monotonic() >= deadline:
                return

    def _finish(self, exit_code: int, error: str | None) -> int:
        # From the agent's exit, the grace period bounds the rest: what it left running, and
        # the deliveries still queued (session-end's own hooks get their timeout after it).
        self._exit_deadline = self._stop_deadline or self._grace_deadline()
        self._end_leftovers()
        if error:
            self._set_phase("error")
            self._record(
                "error",
                {"ERROR_MESSAGE": error, "ERROR_TYPE": "AgentCrash", "EXIT_CODE": str(exit_code)},
            )
        elif self.phase != "error":
            if self.phase != "stopping":
                self._set_phase("stopping")
            self._set_phase("stopped")
        self._end_session(exit_code)
        if self._limit_hit is not None:
            return EXIT_LIMITS
        return exit_code

    def _fail_transition(self, event: str, result: DispatchResult) -> int:
        failed = result.failed
        name = failed.hook.name if failed else "?"
        detail = failed.message if failed else ""
        message = f"hook {name!r} failed at {event} with on_error: fail: {detail}"
        print(f"otel-lifecycle-hooks: {message}", file=sys.stderr)
        return self._fail(message, (failed.error_type if failed else None) or "HookFailed")

    def _fail(self, message: str, error_type: str) -> int:
        """The supervisor's own failure: phase error, `error`, then session-end; exit 1."""
        if self._child is not None and self._child.poll() is None:
            self._stop_child(self._grace_deadline())  # an agent is never left unsupervised
        if self._child is not None:
            self._end_leftovers()
        if self.phase != "error":
            self._set_phase("error")
            self._record("error", {"ERROR_MESSAGE": message, "ERROR_TYPE": error_type})
        if not self._ended:
            self._end_session(EXIT_SUPERVISOR_FAILURE)
        return EXIT_SUPERVISOR_FAILURE

    def _end_session(self, exit_code: int) -> None:
        self._ended = True
        if self.engine is not None:
            # session-end follows the session's earlier events; what the grace period left
            # queued is journaled as dropped instead of holding the exit.
            self.engine.dispatcher.settle(self._exit_deadline or self._grace_deadline())
        self._legacy("session-end")
        self._record_owed("session-end", {"EXIT_CODE": str(exit_code)})
        if any(hook.retry_horizon for hook in self.options.template.hooks):
            # Closed once its owed hooks finished (non-blocking ones drain at exit): one with
            # a retry horizon that failed leaves the session owed, for the next run or
            # `reconcile` to send again with the same id.
            self._close_session_at_exit = True
            self._exit_code = exit_code
        else:
            self._journal_call(
                "close_session", self.session.session_id if self.session else "", exit_code
            )
        if self._heartbeat is not None:
            self._heartbeat.stop()

    def _drain_timeout(self) -> float:
        """How long the engine may take to finish at exit: what is left of the grace period,
        then the session-end hooks' own timeout (their deliveries are owed)."""
        if self._exit_deadline is None:
            return max(self.options.grace_period, 5.0)
        session_end = self.options.template.hooks_for("session-end")
        budget = max((hook.timeout for hook in session_end), default=0.0)
        return max(0.0, self._exit_deadline - time.monotonic()) + budget + 0.5

    def _crash_message(self, exit_code: int) -> str | None:
        """An agent killed by a signal nobody asked for has crashed."""
        if self._stop_requested is None and self._child_signal is not None:
            signum = self._child_signal
            try:
                name = signal.Signals(signum).name
            except ValueError:
                name = str(signum)
            return f"agent terminated by {name}"
        return None

    def _close(self) -> None:
        if self._set_subreaper:
            set_subreaper(False)  # the process may live on (a library caller, a test)
        if self._channel is not None:
            self._channel.close()
        if self._server is not None:
            self._server.close()
        self._count_unhandled()
        if self.ingress.total:
            log.warning("agent input: %s", self.ingress.summary())
        if self.session is not None:
            self.session.end()
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if self._retention is not None:
            self._retention.stop()
        if self.engine is not None:
            self.engine.shutdown(0.5 if self._interrupted else self._drain_timeout())
        if self._close_session_at_exit:
            self._close_or_keep_owed()
        self._report_journal_losses()
        if isinstance(self._journal, DeferredJournal):
            self._journal.close()  # the engine's recorders close only what they opened
        if self._telemetry is not None:
            self._telemetry.shutdown()
        # Last, once the agent is gone and its session ended: nothing of it outlives the run.
        if self._cgroups is not None:
            self._cgroups.close()

    def _close_or_keep_owed(self) -> None:
        """Close the session, unless an owed hook with a retry horizon failed: then it stays
        unfinished in the journal, and the next run or `reconcile` sends what did not
        deliver (only that), with the same X-Scion-Hook-IDs, until its horizon."""
        session_id = self.session.session_id if self.session else ""
        failed = self._owed_failures.taken()
        if not failed:
            self._journal_call("close_session", session_id, self._exit_code)
            return
        log.warning(
            "session %s: %s failed; it stays owed in the journal and is retried by the next run"
            " or `reconcile` until its retry horizon",
            session_id, ", ".join(failed),
        )  # fmt: skip

    def _report_journal_losses(self) -> None:
        """One line in the run's summary when the journal lost, spilled or could not confirm
        writes (what the metric counts), and each registration sent before it was durable."""
        for note in self._durability_notes:
            log.warning("journal: %s", note)
        try:
            counts = self._journal_losses()
        except Exception:  # the journal reports its own failures
            log.debug("reading the journal's loss counts failed", exc_info=True)
            return
        shown = {k: v for k, v in counts.items() if v and k not in ("adopted", "pending")}
        if shown:
            log.warning(
                "journal losses this run: %s",
                ", ".join(f"{kind} {count}" for kind, count in sorted(shown.items())),
            )

    def _count_unhandled(self) -> None:
        """Messages admitted but still in the inbox when the session ends are never acted on:
        each is counted (reason `session_stopping`), so that no loss goes unseen."""
        while True:
            try:
                kind, _ = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "message":
                self.ingress.refuse(STOPPING)

    # -- events --

    def _record(
        self, event: str, fields: Mapping[str, str] | None = None, *, deadline: float | None = None
    ) -> DispatchResult:
        assert self.session is not None
        values = {"PHASE": self.phase, "ACTIVITY": self.activity}
        values.update(fields or {})
        self._dispatching = True
        try:
            return self.session.record(event, values, deadline=deadline)
        finally:
            self._dispatching = False

    def _set_phase(self, phase: str) -> None:
        previous, self.phase = self.phase, phase
        if previous != phase:
            self._record("phase-change", {"PREVIOUS_PHASE": previous})

    def _deliver(self, message: dict[str, Any]) -> None:
        """Take one message from the agent (any route): refused and counted unless admitted."""
        admitted = self._admission.admit(message)
        if admitted is None:
            return
        self._message_slots.acquire()  # signals and exits bypass the bound: never blocked
        self._inbox.put(("message", admitted))

    def _handle_message(self, message: Admitted) -> None:
        if self._tracker is None:
            # Made with the first message: an agent that never reports its activity (no
            # harness hooks) does not pay for the tracker's rules at start-up.
            from ..harness.activity import ActivityTracker, turn_end_completes_task

            self._tracker = ActivityTracker(
                turn_end_completes_task=turn_end_completes_task(
                    self.options.environ, self.options.template.env
                )
            )
        if message.kind == "status":
            derived = self._tracker.signal(message.status, message.message)
        elif message.event is not None:
            derived = self._tracker.observe(message.event)
            self._note_harness_session(message.event.session_id)
        else:
            return
        for item in derived:
            fields = dict(item.fields)
            if item.event == ev.ACTIVITY_CHANGE:
                self.activity = fields.get("ACTIVITY", self.activity)
            self._record(item.event, fields)
        hit = self.limits.exceeded(self._tracker.turns, self._tracker.model_calls)
        if hit is not None:
            self._limit_exceeded(*hit)

    def _note_harness_session(self, harness_session_id: str) -> None:
        """The harness's own id for this session, kept on the session span: SESSION_ID (and
        `gen_ai.conversation.id`) stay the supervisor's, one for every hook of the run."""
        if harness_session_id and harness_session_id != self._harness_session_id:
            self._harness_session_id = harness_session_id
            if self.session is not None:
                self.session.set_attribute(ev.ATTR_HARNESS_SESSION_ID, harness_session_id)

    def _limit_exceeded(self, name: str, count: int) -> None:
        if self._limit_hit is not None:
            return
        self._limit_hit = (name, count)
        previous, self.activity = self.activity, "limits_exceeded"
        self._record("activity-change", {"PREVIOUS_ACTIVITY": previous})
        self._record("limits-exceeded", {"LIMIT_NAME": name, "LIMIT_COUNT": str(count)})

    # -- processes --

    def _spawn(self, command: Sequence[str]) -> subprocess.Popen[bytes]:
        env = dict(self.options.environ)
        for key, value in self.options.template.env.items():
            env.setdefault(key, value)
        if self._telemetry is not None:
            for key, value in self._telemetry.otel_env.items():
                env.setdefault(key, value)
        env[AGENT_TAG_ENV] = self._agent_tag
        traceparent = self._traceparent()
        if traceparent:
            env["TRACEPARENT"] = traceparent
        for name, variable in METADATA_ENV.items():
            if self.metadata.get(name):
                env.setdefault(variable, self.metadata[name])
        # The journal's credentials and the hooks' own stay with the supervisor (agent_env.py).
        env = agent_environment(env, self.options.template)
        kwargs: dict[str, Any] = {}
        if self.options.user:
            from ..actions.script import user_process_options

            kwargs.update(user_process_options(self.options.user, env))
        if self._server is not None and self._channel is not None:  # HOME is the agent's now
            env.update(self._channel.open(self._server.path, env))
        if self.options.user:
            env, command = self._loaders_after_drop(env, command)
        # The agent dies with a killed supervisor, instead of running on unsupervised.
        argv, identity = die_with_parent(command, env, kwargs)
        group = self._confine_agent(identity)
        if group is not None:
            # Joined as root, before the launcher drops to the agent's user and before any of
            # the agent's own code runs: nothing it starts is ever outside the group.
            argv = group.join_argv(argv)
        return subprocess.Popen(argv, env=env, start_new_session=True, **identity)

    @staticmethod
    def _loaders_after_drop(
        env: dict[str, str], command: Sequence[str]
    ) -> tuple[dict[str, str], Sequence[str]]:
        """The environment for the root stages that start an agent of another user (the
        cgroup join, the launcher that drops to its user), and the command: the variables
        that make the loader or a shell load code (`LD_PRELOAD` in the template's `env:`) are
        given to the agent after the drop (`confinement.after_drop`), never seen as root."""
        loaders = {k: v for k, v in env.items() if k != "PATH" and is_loader_variable(k)}
        if not loaders:
            return env, command
        command, carrier = confinement.after_drop(command, loaders)
        return {k: v for k, v in env.items() if k not in loaders} | carrier, command

    def _confine_agent(self, identity: Mapping[str, Any]) -> confinement.Cgroup | None:
        """The agent's cgroup (made now, after the groups of dead supervisors are swept); None
        where processes cannot be confined, or where the user would be changed by Popen
        itself (no launcher), after the stage that joins the group would have run as root."""
        if identity:
            return None
        self._cgroups = confinement.CgroupHome.create(self.options.environ)
        if self._cgroups is not None:
            self._agent_group = self._cgroups.leaf("agent")
        return self._agent_group

    def _traceparent(self) -> str | None:
        from ..tracecontext import traceparent

        if self.session is None:
            return None
        return traceparent(self.session.span.get_span_context())

    def _wait_child(self) -> None:
        assert self._child is not None
        code = self._child.wait()
        if code < 0:
            self._child_signal = -code
        # A shell's convention: 128 + N for a process that died of signal N.
        self._inbox.put(("exit", code if code >= 0 else 128 - code))

    def _legacy(self, event: str, deadline: float | None = None) -> None:
        run_legacy_hooks(event, self.options.environ, deadline=deadline, user=self.options.user)

    def _install_signal_handlers(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return previous

        def on_signal(signum: int, frame: Any) -> None:
            if signum != signal.SIGHUP:
                self._stop_signals += 1
            if signum != signal.SIGHUP and (
                self._stop_requested is not None
                or self.phase in ("stopped", "error")
                # Asked twice while a blocking hook holds the main loop (post-start): the
                # first is still waiting in the inbox, so only this count knows of it.
                or self._stop_signals > 1
            ):
                self._interrupt(signum)  # asked again while stopping: end now
            if (
                signum != signal.SIGHUP
                and self._stop_signal is None
                and self.phase in ("created", "provisioning")
            ):
                self._stop_signal = signum  # read once pre-start is over
            self._inbox.put(("signal", signum))

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            previous[signum] = signal.signal(signum, on_signal)
        return previous

    def _interrupt(self, signum: int) -> None:
        """A second SIGINT/SIGTERM: no further attempts (what is left is journaled as
        interrupted, replayable), the agent killed, and a hook the main thread waits on
        abandoned by raising out of it."""
        if self.engine is not None:
            self.engine.executor.interrupted.set()
            self.engine.executor.stopping.set()
        if self._child is not None and self._child.poll() is None:
            self._signal_group(signal.SIGKILL)
        if self._agent_group is not None:
            self._agent_group.kill()
        if self._dispatching and not self._interrupted:
            self._interrupted = True
            raise RunInterrupted(f"interrupted by a second {signal.Signals(signum).name}")
        self._interrupted = True

    # -- journal and crash recovery --

    def _session_row(self) -> dict[str, Any]:
        from ..journal.rows import SessionRow
        from .recovery import session_fields

        assert self.session is not None
        row: dict[str, Any] = {
            "session_id": self.session.session_id,
            "agent_id": self.metadata["AGENT_ID"],
            "agent_name": self.metadata["AGENT_NAME"],
            "template_files": [os.path.abspath(f) for f in self.options.template.files],
            "pid": os.getpid(),
            "started_at": time.time(),
            **session_fields(self.options.template, self.options.environ, self.session.metadata),
        }
        if self._journal_key is not None:
            from ..journal.seal import seal

            self._sealed_row = SessionRow(
                session_id=row["session_id"],
                agent_id=row["agent_id"],
                agent_name=row["agent_name"],
                template_files=tuple(row["template_files"]),
                pid=row["pid"],
                started_at=row["started_at"],
                templates=tuple(row["templates"]),
                metadata=row["metadata"],
                variables=row["variables"],
                host=row["host"],
            )
            row["seal"] = seal(self._journal_key, self._sealed_row)
        return row

    def _seal_moment(self, event: str, moment: float) -> str | None:
        """The session row's seal once `event` began at `moment` (None: this run seals not)."""
        if self._journal_key is None or self._sealed_row is None:
            return None
        from ..journal.seal import seal

        column = {"post-start": "post_start_at", "pre-stop": "pre_stop_at"}.get(
            event, "session_end_at"
        )
        if getattr(self._sealed_row, column) is None:  # the journal keeps a first moment
            self._sealed_row = self._sealed_row._replace(**{column: moment})
        return seal(self._journal_key, self._sealed_row)

    def _journal_session(self) -> None:
        """Crash recovery of earlier runs, this session's row, its heartbeat and the journal's
        retention: once, right after the agent started (none of them decides whether it may),
        or before the first journal call of a session that ends before its agent starts."""
        if self._session_journaled:
            return
        self._session_journaled = True
        self._journal_key = _read_journal_key(self.options.environ)
        self._check_journal_placement()
        self._recover_earlier_runs()
        self._journal_call("open_session", **self._session_row())
        self._start_heartbeat()
        self._keep_retention()

    def _journal_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._journal is None:
            return None
        if not self._session_journaled:  # a session's row comes before anything said of it
            try:
                self._journal_session()
            except Exception:  # a session ending before its agent started: its end goes on
                log.exception("journaling the session failed")
        try:
            return getattr(self._journal, method)(*args, **kwargs)
        except Exception:
            log.exception("journal %s failed", method)
            return None

    def _record_owed(
        self, event: str, fields: Mapping[str, str] | None = None, *, deadline: float | None = None
    ) -> DispatchResult:
        """An event a killed session would still owe (or, for post-start, that makes the rest
        owed): its moment is journaled before any hook is sent, and is its ${TIMESTAMP}, so
        that recovery sends the same X-Scion-Hook-IDs (recovery.py)."""
        assert self.session is not None and self.engine is not None
        moment = self.session.info.next_moment(self.engine.clock.wall())
        if self._journal is not None and not self._session_journaled:
            try:  # the row and its seal first: the moment's seal extends them
                self._journal_session()
            except Exception:
                log.exception("journaling the session failed")
        moment = self._claimed_moment(event, moment)
        sealed_before = self._sealed_row
        sealed = self._seal_moment(event, moment)
        if event == "post-start":
            kept = self._begin_registration(moment, sealed)
        else:
            kept = self._journal_call("begin_event", self.session.session_id, event, moment, sealed)
        if self._journal is not None and not kept:
            # Not journaled (a full disk): the moment a recoverer's claim will fix instead,
            # so that what it sends later carries the ids sent now.
            self._sealed_row = sealed_before
            moment = self.session.info.keep_moment(self._unjournaled_moment(event, moment))
        else:
            self._journaled_moments[event] = moment
            # The moments recovery would derive from this one (journal.rows.unjournaled_moments:
            # a microsecond on for pre-stop, two for session-end) go to no other event.
            reserved = 0.000002 if event == "post-start" else 0.000001
            self.session.info.keep_moment(moment + reserved)
        values = {"PHASE": self.phase, "ACTIVITY": self.activity}
        values.update(fields or {})
        self._dispatching = True  # a second stop signal may abandon these hooks too
        try:
            return self.session.record(event, values, deadline=deadline, timestamp=moment)
        finally:
            self._dispatching = False

    def _unjournaled_moment(self, event: str, moment: float) -> float:
        """The moment of owed `event` when it could not be journaled: the one a claim fixes
        from the row (journal.rows.unjournaled_moments), which holds this run's journaled
        post-start and pre-stop moments. Post-start's own is `moment`: a session whose row
        lacks it is never recovered."""
        post_start = self._journaled_moments.get("post-start")
        if event not in _CLAIMED_COLUMNS or post_start is None:
            return moment
        # Here, not at the top: the journal is imported after the agent started (start-up).
        from ..journal.rows import unjournaled_moments

        pre_stop, session_end = unjournaled_moments(
            post_start, self._journaled_moments.get("pre-stop"), moment
        )
        log.warning(
            "the journal did not take the moment %s began: its hooks carry the moment "
            "recovery would fix for it, so that a recovered delivery keeps their ids", event,
        )  # fmt: skip
        return pre_stop if event == "pre-stop" else session_end

    def _claimed_moment(self, event: str, moment: float) -> float:
        """The moment a recoverer's claim fixed for `event` (pre-stop, session-end) while this
        supervisor was taken for dead (a frozen node, a long SIGSTOP), else `moment`: the
        journal keeps the first moment, and the hooks must carry the X-Scion-Hook-ID it gives,
        the one the recoverer sent. Read once, when the first of those events begins."""
        column = _CLAIMED_COLUMNS.get(event)
        if column is None or self._journal is None or self.session is None:
            return moment
        if self._claimed_row is None:
            row = self._journal_call("session", self.session.session_id)
            self._claimed_row = row if row is not None and row.claimed_by else False
            if self._claimed_row and self._sealed_row is not None:
                # The claim re-sealed the row with both moments: this run's seals cover them too.
                self._sealed_row = self._sealed_row._replace(
                    pre_stop_at=self._sealed_row.pre_stop_at or row.pre_stop_at,
                    session_end_at=self._sealed_row.session_end_at or row.session_end_at,
                )
        if not self._claimed_row:
            return moment
        claimed: float | None = getattr(self._claimed_row, column)
        if claimed is None:
            return moment
        log.warning(
            "session %s was claimed for recovery by %s while this supervisor was taken for "
            "dead: its %s hooks keep the moment the claim fixed (%s), and so their ids",
            self.session.session_id, self._claimed_row.claimed_by, event, claimed,
        )  # fmt: skip
        return self.session.info.keep_moment(claimed)

    def _begin_registration(self, moment: float, sealed: str | None) -> bool | None:
        """post-start's moment, and the session row before it, reach the journal before its
        hooks (a registration) are sent, so that a reconciler can find the session: waited
        for up to $LIFECYCLE_HOOKS_REGISTRATION_WAIT even while a shared database refuses.
        Past that the hooks go, and the row kept only on this disk is counted and reported.
        What begin_event returns: whether the moment is the journal's."""
        from .recovery import registration_wait

        assert self.session is not None
        session_id = self.session.session_id
        wait = registration_wait(self.options.environ)
        unconfirmed = self._journal_losses().get("unconfirmed", 0)
        kept: bool | None = self._journal_call(
            "begin_event", session_id, "post-start", moment, sealed, wait=wait
        )
        if self._journal_losses().get("unconfirmed", 0) > unconfirmed:
            self._durability_notes.append(
                f"session {session_id}'s row was not in the journal when post-start's hooks"
                f" were sent (waited {wait:g}s); it is kept in the local spill file"
            )
        return kept

    def _journal_losses(self) -> dict[str, int]:
        """The journal's loss counts (none until it is opened) and the owed hooks of earlier
        runs that failed in recovery: what `agent.lifecycle.journal.losses` reports."""
        journal = self._journal
        counts: dict[str, int] = {}
        opened = not isinstance(journal, DeferredJournal) or journal.is_open
        if journal is not None and opened:
            stats = getattr(journal, "stats", None)
            if stats is not None:
                counts.update(stats())
        counts["recovery_failed"] = self._recovery_failed
        return counts

    def _journal_agent(self, pid: int) -> None:
        from .recovery import process_start_time

        if self.session is not None:
            started = process_start_time(pid)
            self._journal_call("mark_agent", self.session.session_id, pid, started)

    def _start_heartbeat(self) -> None:
        from .recovery import Heartbeat, heartbeat_interval, session_lock_dir

        if self._journal is not None and self.session is not None:
            environ = self.options.environ
            self._heartbeat = Heartbeat(
                self._journal,
                self.session.session_id,
                heartbeat_interval(environ),
                session_lock_dir(environ),
            )

    def _keep_retention(self) -> None:
        """Old journal rows go at start, hourly, and every so many executions written, on a
        thread of their own (retention.py)."""
        if self._journal is not None and hasattr(self._journal, "apply_retention"):
            from ..journal.retention import RetentionKeeper, apply_every_rows, retention_from

            environ = self.options.environ
            self._retention = RetentionKeeper(
                self._journal, retention_from(environ), every_rows=apply_every_rows(environ)
            )
            if self.engine is not None:
                self.engine.recorders.watch(_RowsWritten(self._retention))

    def _check_journal_placement(self) -> None:
        """Warn when the agent's user can replace the SQLite journal (journal/placement.py):
        then every row is the agent's, and only sealed ones are worth recovering."""
        owner = _socket_owner(self.options.user)
        path = getattr(self._journal, "path", None) if self._journal is not None else None
        if owner is None or not isinstance(path, os.PathLike):
            return
        from ..journal.placement import replaceable_by

        through = replaceable_by(Path(path), *owner)
        if through is not None:
            log.warning(
                "the journal %s can be replaced by the agent's user %s (through %s): keep it "
                "in a directory only the supervisor writes%s",
                path, self.options.user, through,
                "" if self._journal_key else ", and set LIFECYCLE_HOOKS_JOURNAL_KEY so that "
                "recovery acts only on sealed rows",
            )  # fmt: skip

    def _recover_earlier_runs(self) -> None:
        """Fire the owed hooks of earlier runs of this agent that were killed (recovery.py)."""
        from .recovery import recover_orphaned_sessions, session_lock_dir

        assert self.engine is not None
        executor = self.engine.executor
        # Each owed event of a recovered session gets the grace period of its own, as a live
        # session's would: a slow pre-stop never starves its session-end.
        failures: list[str] = []
        recover_orphaned_sessions(
            self._journal,
            self.metadata["AGENT_ID"],
            self.metadata,
            executor.run,
            self.options.template,
            key=self._journal_key,
            budget=self.options.grace_period,
            lock_dir=session_lock_dir(self.options.environ),
            failures=failures,
        )
        self._recovery_failed += len(failures)


class _OwedFailures(ExecutionWatcher):
    """Notes this session's pre-stop and session-end hooks that have a retry horizon and did
    not deliver ("event/hook"); recovered hooks of earlier sessions are not this session's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed: list[str] = []

    def recorded(self, execution: Execution, history_id: int | None) -> None:
        event = execution.event
        if not execution.hook.retry_horizon:
            return
        # Here, not at the top: the journal's modules come after the agent's start.
        from ..journal.rows import FAILED_OUTCOMES

        if (
            event.name in RETRIED_EVENTS
            and not event.recovered
            and execution.outcome in FAILED_OUTCOMES
        ):
            with self._lock:
                self._failed.append(f"{event.name}/{execution.hook.name}")

    def taken(self) -> list[str]:
        with self._lock:
            return list(self._failed)


class _RowsWritten(ExecutionWatcher):
    """Tells the journal's retention keeper of each execution journaled, so that its row
    bound holds while a flood writes (not only at the hourly pass)."""

    def __init__(self, keeper: Any) -> None:
        self._keeper = keeper  # journal.retention.RetentionKeeper

    def recorded(self, execution: Execution, history_id: int | None) -> None:
        # Every execution is journaled; its id may come later (the journal writes behind).
        self._keeper.written()


def _deferred(journal: Any, environ: Mapping[str, str]) -> Any:
    """The journal for the engine: a path or None is opened at its first use (deferred.py),
    not before the agent starts; an instance or False as it is."""
    if journal is None or isinstance(journal, (str, bytes)) or hasattr(journal, "__fspath__"):
        return DeferredJournal(journal, environ)
    return journal


def _keep_journal_settings_from_children(environ: Mapping[str, str]) -> None:
    """Take the journal's settings (its location, its key) out of this process's environment
    once the run holds its own copy (`environ`): scripts and legacy hooks start from this
    process's environment, some as the agent's user, who can read a process's environment
    of its own uid (/proc/PID/environ)."""
    if environ is os.environ:
        return  # the caller renders from the process environment itself: nothing to take
    for name in (*JOURNAL_SETTINGS, JOURNAL_KEY_ENV, JOURNAL_KEY_FILE_ENV):
        os.environ.pop(name, None)


def _read_journal_key(environ: Mapping[str, str]) -> bytes | None:
    """The journal key (journal/seal.py); a key setting that cannot be used is reported and
    the session's row left unsealed (no recoverer will act on it)."""
    if not (environ.get(JOURNAL_KEY_ENV) or environ.get(JOURNAL_KEY_FILE_ENV)):
        return None  # hashlib's OpenSSL bindings (~4 ms of each run) only for a key
    from ..journal.seal import JournalKeyError, journal_key

    try:
        return journal_key(environ)
    except JournalKeyError as exc:
        log.error("%s; this session's row is not sealed, so it will not be recovered", exc)
        return None


def _socket_owner(user: str | None) -> tuple[int, int] | None:
    """The uid and gid that must own the event socket so that the agent, run as `user`, can
    reach it; None when the agent runs as this process's user."""
    if not user or os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None  # the spawn reports the unknown user
    return entry.pw_uid, entry.pw_gid


def _stable_agent_id(slug: str) -> str:
    """`uuid5(NAMESPACE_URL, "agent:" + slug)`, hashed with the `_sha1` module: `uuid.uuid5`
    imports `hashlib`, whose OpenSSL bindings would cost every start-up about 4 ms."""
    try:
        from _sha1 import sha1  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # an interpreter built without it
        return str(uuid.uuid5(uuid.NAMESPACE_URL, "agent:" + slug))
    digest = sha1(uuid.NAMESPACE_URL.bytes + ("agent:" + slug).encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=5))


def _slug(name: str) -> str:
    slug = "".join(c.lower() if c.isalnum() else "-" for c in name).strip("-")
    while "--" in slug:
        slug = slug.replace("--", "-")
    return slug or "agent"
