"""One execution of one hook: resolve variables, check the condition, render, make the
attempts the retry policy allows, and record what happened in a hook span.

What one attempt does depends on the action type and is its runner's (engine/runners/); who
hears of it, the observers' (engine/observers.py). Everything here runs on the hook's own
worker thread (or the caller's, for a blocking hook); nothing in it raises into the caller:
every failure becomes an `Execution` with an outcome.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.metrics import MeterProvider

from ..agent_env import agent_environment
from ..redact import Redactor
from ..render import RenderError, hook_id_header, render_action
from ..template.model import HookSpec, Template
from ..template.secrets import secret_names_for
from ..variables import EVENT_VARIABLES, Variables, format_unix_timestamp
from .attempts import AttemptLoop, frame_of
from .capture import capture
from .clock import SYSTEM_CLOCK, Clock
from .gates import BadDecision, answer_of, decide, is_gate
from .hook_span import HookSpans, end_span, hex_id
from .model import Execution, LifecycleEvent, SessionInfo
from .observers import ExecutionObserver, Observers
from .policies import INTERRUPTED, outcome_of
from .request_record import request_record
from .runners import RUNNERS, ActionRegistry, Refusal
from .runners.base import OutputListener
from .warning_limit import warn_unresolved

if TYPE_CHECKING:
    from ..actions.base import AttemptResult
    from ..actions.http import HttpClient
    from ..auth.credentials import Credentials

log = logging.getLogger("otel_lifecycle_hooks.engine")


class HookExecutor:
    """Runs hook executions for one template; shared by every hook's worker."""

    def __init__(
        self,
        template: Template,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        observers: Sequence[ExecutionObserver] = (),
        credentials: Credentials | None = None,
        http_client: HttpClient | None = None,
        script_user: str | None = None,
        runners: ActionRegistry = RUNNERS,
    ) -> None:
        self.template = template
        self._secret_names = secret_names_for(template)
        self._tracer_provider = tracer_provider
        # The CLIENT spans' `http.client.request.duration` goes where the hook metrics go.
        self._meter_provider = meter_provider
        self.spans = HookSpans(tracer_provider)
        self._environ = environ
        self.clock = clock
        self.observers = Observers(observers)
        self.runners = runners
        self._credentials = credentials
        self._http_client = http_client
        # Idle connections the HTTP client keeps per origin (the engine sizes it to its pool).
        self.http_keep_alive = 20
        self._lazy_lock = threading.Lock()
        self._last_redactor: tuple[frozenset[str], Redactor] | None = None
        # The last event's context variables: an event's hooks share them (read only).
        self._last_context: tuple[LifecycleEvent, Mapping[str, str]] | None = None
        # Scripts run as the agent's user by default: the one `run` was given (`--user`), else
        # the template's `user:`, for every caller (`run`, recovery, `test --execute`,
        # `reconcile`); a hook that must run as root says `run_as: root`. Without root no
        # user can be switched to, and none needs to be: scripts run as this process.
        if script_user is None and os.geteuid() == 0:
            script_user = template.user
        self.script_user = script_user
        # Set during shutdown: retry waits end early, so draining stays within its deadline.
        self.stopping = threading.Event()
        # Set when `run` is interrupted: executions still end (and are journaled, replayable)
        # but make no attempt.
        self.interrupted = threading.Event()

    # -- what runners share: made at first use, so a template of scripts builds no HTTP client --

    @property
    def environ(self) -> Mapping[str, str]:
        """The environment variables render from (the process's unless one was given)."""
        return os.environ if self._environ is None else self._environ

    def http_client(self) -> HttpClient:
        """The HTTP client every attempt shares, made at its first use."""
        client = self._http_client
        if client is not None:  # made once; every attempt asks for it
            return client
        with self._lazy_lock:
            if self._http_client is None:
                # httpx only with the first HTTP attempt: with its instrumentation, 180 ms or
                # more of `run`'s start (engine/runners/http.py).
                from ..actions.http import make_client

                self._http_client = make_client(
                    tracer_provider=self._tracer_provider,
                    meter_provider=self._meter_provider,
                    keep_alive=self.http_keep_alive,
                )
            return self._http_client

    def credentials(self) -> Credentials:
        """The token cache every attempt shares, made at its first use."""
        with self._lazy_lock:
            if self._credentials is None:
                # auth's strategies when one is used: about 1 ms before the spawn (-X importtime)
                from ..auth.credentials import Credentials

                self._credentials = Credentials()
            return self._credentials

    def close(self) -> None:
        """Release the HTTP client and the credentials' token cache."""
        with self._lazy_lock:
            if self._http_client is not None:
                self._http_client.close()
            if self._credentials is not None and hasattr(self._credentials, "close"):
                self._credentials.close()

    def variables_for(
        self, hook: HookSpec, event: LifecycleEvent, session: SessionInfo
    ) -> Variables:
        """The variables `hook` renders from for `event` in `session`."""
        metadata = dict(session.metadata)
        metadata.setdefault("SESSION_ID", session.session_id)
        metadata["HOOK_NAME"] = hook.name
        return Variables(
            event=self._event_context(event),
            metadata=metadata,
            captured=session.captured_snapshot(),
            template_env=self.template.env,
            environ=self.environ,
            secret_names=self._secret_names,
        )

    def _event_context(self, event: LifecycleEvent) -> Mapping[str, str]:
        """The event's context variables, made once for all the hooks of the event (a
        thousand hooks on one event would each format its timestamp); nothing writes to it."""
        last = self._last_context
        if last is not None and last[0] is event:
            return last[1]
        context = dict(event.fields)
        context["EVENT"] = event.name
        context.setdefault("TIMESTAMP", format_unix_timestamp(event.timestamp))
        self._last_context = (event, context)
        return context

    def redactor(self, variables: Variables | None) -> Redactor:
        """A redactor for every secret known now: the variables' and the tokens handed out."""
        values: set[str] = set()
        if variables is not None:
            values |= variables.secret_values()
        if self._credentials is not None:
            values |= set(self._credentials.secret_values())
        # Executions mostly see the same secrets: reuse the last redactor (its pattern is
        # compiled once) while they do; a new token or value builds a new one.
        key = frozenset(values)
        cached = self._last_redactor
        if cached is not None and cached[0] == key:
            return cached[1]
        redactor = Redactor(key)
        self._last_redactor = (key, redactor)
        return redactor

    def output_listener(
        self, hook: HookSpec, redactor: Redactor | None = None
    ) -> OutputListener | None:
        """Where a script's output lines go (the observers that read them), secrets taken out
        by `redactor`: a script may well print the token it was given."""
        observers = self.observers
        if not observers.take_output:
            return None
        if redactor is None:
            return lambda stream, line: observers.output(hook, stream, line)
        return lambda stream, line: observers.output(hook, stream, redactor.redact_text(line))

    def script_identity(self, hook: HookSpec) -> tuple[str | None, bool]:
        """Who runs `hook`'s script (None: this process's user) and whether it is confined:
        the agent's user unless the hook says `run_as: root`, which runs as this process,
        confined (see actions/script.py `run_script`)."""
        if hook.action.run_as == "root":
            return None, True
        return self.script_user, False

    def inherited_env(self, user: str | None) -> dict[str, str] | None:
        """What a script inherits (None: this process's whole environment). A script run as
        the agent's user is the agent's to read (/proc/PID/environ), so it inherits what the
        agent does: no journal setting and no credential the hooks name, unless the template
        shares it. What its own `env:` gives it, it still gets."""
        if user is None or os.geteuid() != 0:
            return None
        return agent_environment(os.environ, self.template)

    # -- the execution --

    def run(
        self,
        hook: HookSpec,
        event: LifecycleEvent,
        session: SessionInfo,
        deadline: float | None = None,
        not_run: str | None = None,
        claim: Callable[[], bool] | None = None,
    ) -> Execution:
        """Execute `hook` for `event`; `deadline` (monotonic) cuts attempts and retries short.
        With `not_run` (why), it is recorded as skipped without running, as every execution is
        recorded: its span, the metrics, the hook log and the journal. `claim`, asked as the
        run ends, says whether the run records its end: False when the dispatcher's shutdown
        recorded it as interrupted meanwhile (engine/dispatch.py)."""
        started_wall = self.clock.wall()
        started = self.clock.monotonic()
        variables = self.variables_for(hook, event, session)
        hook_id = hook_id_header(variables, hook.name, event.name)[1]
        span = self.spans.start(hook, event, session)
        frame = frame_of(hook, event, session, hook_id, span, variables)
        loop = AttemptLoop(self, self.observers, self.stopping, self.interrupted, frame, deadline)
        last: AttemptResult | None = None
        gate = is_gate(hook, event.name)
        answered: tuple[str, str] | None = None
        outcome, error_type, message = "failed", None, ""
        request: dict[str, object] | None = None
        try:
            with trace.use_span(span, end_on_exit=False):
                if not_run is not None:
                    outcome, message = "skipped", not_run
                elif hook.condition is not None and not hook.condition.evaluate(
                    lambda name: variables.get(name, record=False)
                ):
                    outcome, message = "skipped", f"condition false: {hook.condition.source}"
                else:
                    runner = self.runners.runner_for(hook.action)
                    rendered = render_action(hook.action, variables) if runner.renders else None
                    request = request_record(hook, rendered, self.redactor(variables))
                    last = loop.run(runner, rendered)
                    outcome, error_type, message = outcome_of(last), last.error_type, last.message
                    if gate and outcome == "success":
                        try:
                            answered = answer_of(hook, last)
                        except BadDecision as exc:
                            outcome, error_type = "failed", "BadDecision"
                            message = f"gate answer refused: {exc}"
                    if last.ok and (hook.action.is_http or last.response_body is not None):
                        capture(hook.name, session, last)
        except Refusal as refusal:
            outcome, error_type, message = "refused", refusal.error_type, refusal.message
        except RenderError as exc:
            outcome, error_type, message = "refused", "RenderError", str(exc)
        except Exception as exc:  # a hook never takes the agent down
            if self.interrupted.is_set():
                # The operator's second signal, raised out of what the main thread was doing
                # for a blocking hook (a retry wait): interrupted, replayable, not a fault.
                outcome, error_type = INTERRUPTED, INTERRUPTED
                message = f"run interrupted after attempt {len(loop.rows)}"
            else:
                log.exception("hook %s failed unexpectedly", hook.name)
                outcome, error_type, message = "failed", type(exc).__name__, str(exc)
        # An event context variable this event does not carry is simply empty (TOOL_NAME on
        # an activity change to idle): only a name no event could define is worth a warning.
        unresolved = sorted(
            name for name in variables.unresolved if name.partition(".")[0] not in EVENT_VARIABLES
        )
        if unresolved:  # at most once per hook and variable a minute, with a suppressed count
            warn_unresolved(log, hook.name, unresolved)
        span_context = span.get_span_context()
        decision = decide(hook, outcome, answered, error_type or "", event.name) if gate else None
        if decision is not None and decision.reason:
            # The reason reaches the harness (and the model), the spans and the journal: a
            # policy may echo the token it was sent.
            reason = self.redactor(variables).redact_text(decision.reason)
            decision = decision._replace(reason=reason)
        if decision is not None:  # the journal's message says what the gate decided, and why
            said = f"decision {decision.verdict}" + (
                f": {decision.reason}" if decision.reason else ""
            )
            message = f"{said}; {message}" if message else said
        execution = Execution(
            hook=hook,
            event=event,
            session_id=session.session_id,
            outcome=outcome,
            # Those made before an exception count too.
            attempts=max(loop.attempts, len(loop.rows)),
            duration=self.clock.monotonic() - started,
            started_at=started_wall,
            idempotency_key=hook_id,
            status_code=last.status_code if last else None,
            exit_code=last.exit_code if last else None,
            error_type=error_type,
            message=self.redactor(variables).redact_text(message),
            request=request,
            trace_id=hex_id(span_context.trace_id, 32),
            span_id=hex_id(span_context.span_id, 16),
            agent_id=session.metadata.get("AGENT_ID"),
            attempt_log=tuple(loop.rows),
            decision=decision,
        )
        end_span(span, execution)
        if claim is None or claim():
            self.observers.execution(execution)
        else:
            self.observers.ended_late(execution)
        return execution
