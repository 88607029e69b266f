"""One execution of one hook: resolve variables, check the condition, render, authenticate,
make the attempts the retry policy allows, and record what happened in a hook span.

Everything here runs on the hook's own worker thread (or the caller's, for a blocking hook);
nothing in it raises into the caller: every failure becomes an `Execution` with an outcome.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind, Status, StatusCode

from .. import events as ev
from ..actions.base import AttemptResult
from ..actions.root_guard import unsafe_code_file_as_root
from ..agent_env import agent_environment
from ..redact import Redactor
from ..render import RenderedCommand, RenderedRequest, RenderError, hook_id_header, render_action
from ..template.model import HookSpec, Template
from ..template.secrets import secret_names_for
from ..tracecontext import traceparent as to_traceparent
from ..variables import EVENT_VARIABLES, Variables, format_unix_timestamp
from .clock import SYSTEM_CLOCK, Clock
from .model import Execution, LifecycleEvent, SessionInfo
from .policies import attempt_timeout, outcome_of, retry_policy_for

log = logging.getLogger("otel_lifecycle_hooks.engine")

# Bound on a captured response body, for ${HOOK_<NAME>_RESPONSE}.
CAPTURE_LIMIT = 64 * 1024
# Stateless, so built once: encodes every script's stdin.
_STDIN_ENCODER = json.JSONEncoder(ensure_ascii=False)

ExecutionSink = Callable[[Execution], None]
_STATUS_OK = Status(StatusCode.OK)  # immutable: one for every successful execution


class _Refusal(Exception):
    """The execution is refused before any attempt: nothing is sent."""

    # Not a dataclass: creating one costs every `run` about 0.2 ms at import.
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(error_type, message)
        self.error_type = error_type
        self.message = message


@functools.lru_cache(maxsize=4096)  # a hook's name is the same on every execution
def capture_prefix(hook_name: str) -> str:
    """`register-agent` -> `HOOK_REGISTER_AGENT` (seed 000's `${HOOK_<NAME>_RESPONSE}`)."""
    return "HOOK_" + "".join(c if c.isalnum() else "_" for c in hook_name.upper())


class HookExecutor:
    """Runs hook executions for one template; shared by every hook's worker."""

    def __init__(
        self,
        template: Template,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: Any = None,
        environ: Mapping[str, str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        sinks: Sequence[ExecutionSink] = (),
        credentials: Any = None,
        http_client: Any = None,
        script_user: str | None = None,
    ) -> None:
        self.template = template
        self._secret_names = secret_names_for(template)
        self._tracer_provider = tracer_provider
        # The CLIENT spans' `http.client.request.duration` goes where the hook metrics go.
        self._meter_provider = meter_provider
        self._tracer: trace.Tracer | None = None
        self._environ = environ
        self.clock = clock
        self.sinks: list[ExecutionSink] = list(sinks)
        self._credentials = credentials
        self._http_client = http_client
        # Idle connections the HTTP client keeps per origin (the engine sizes it to its pool).
        self.http_keep_alive = 20
        self._lazy_lock = threading.Lock()
        self._last_redactor: tuple[frozenset[str], Redactor] | None = None
        # The hook span's parent, made once per session span (not once per execution).
        self._last_parent: tuple[trace.SpanContext, Any] | None = None
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
        # Told of every retry (metrics), and of every line a script prints (the hook log).
        self.retry_listeners: list[Callable[[HookSpec, LifecycleEvent], None]] = []
        # Told of every retry with its detail: (hook, event, attempt, of, delay, result).
        self.retry_waits: list[Callable[..., None]] = []
        # Told of an execution about to wait for its next attempt, with what it made so far:
        # (hook, event, session, idempotency key, attempt rows, max attempts, delay).
        self.in_flight: list[Callable[..., None]] = []
        self.output_sink: Callable[[HookSpec, str, str], None] | None = None

    # -- lazily built collaborators: a template with only scripts never builds an HTTP client --

    @property
    def tracer(self) -> trace.Tracer:
        if self._tracer is None:
            provider = self._tracer_provider or trace.get_tracer_provider()
            self._tracer = provider.get_tracer("otel_lifecycle_hooks")
        return self._tracer

    @property
    def environ(self) -> Mapping[str, str]:
        return os.environ if self._environ is None else self._environ

    def http_client(self) -> Any:
        client = self._http_client
        if client is not None:  # made once; every attempt asks for it
            return client
        with self._lazy_lock:
            if self._http_client is None:
                from ..actions.http import make_client

                self._http_client = make_client(
                    tracer_provider=self._tracer_provider,
                    meter_provider=self._meter_provider,
                    keep_alive=self.http_keep_alive,
                )
            return self._http_client

    def credentials(self) -> Any:
        with self._lazy_lock:
            if self._credentials is None:
                from ..auth import Credentials

                self._credentials = Credentials()
            return self._credentials

    def close(self) -> None:
        with self._lazy_lock:
            if self._http_client is not None:
                self._http_client.close()
            if self._credentials is not None and hasattr(self._credentials, "close"):
                self._credentials.close()

    # -- the execution --

    def variables_for(
        self, hook: HookSpec, event: LifecycleEvent, session: SessionInfo
    ) -> Variables:
        return Variables(
            event=self._event_context(event),
            metadata=_hook_metadata(session, hook.name),
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

    def run(
        self,
        hook: HookSpec,
        event: LifecycleEvent,
        session: SessionInfo,
        deadline: float | None = None,
    ) -> Execution:
        """Execute `hook` for `event`; `deadline` (monotonic) cuts attempts and retries short."""
        started_wall = self.clock.wall()
        started = self.clock.monotonic()
        variables = self.variables_for(hook, event, session)
        hook_id = hook_id_header(variables, hook.name, event.name)[1]
        span = self._start_span(hook, event, session)
        attempts = 0
        last: AttemptResult | None = None
        outcome = "failed"
        error_type: str | None = None
        message = ""
        request_record: dict[str, Any] | None = None
        attempt_log: list[Any] = []  # journal AttemptRows, one per attempt made
        try:
            with trace.use_span(span, end_on_exit=False):
                if hook.condition is not None and not hook.condition.evaluate(
                    lambda name: variables.get(name, record=False)
                ):
                    outcome, message = "skipped", f"condition false: {hook.condition.source}"
                else:
                    # An in-process executor has no request to render.
                    rendered = (
                        None
                        if hook.action.type == "python"
                        else render_action(hook.action, variables)
                    )
                    request_record = _request_record(hook, rendered, self.redactor(variables))
                    attempts, last = self._attempts(
                        hook, event, session, rendered, hook_id, span, deadline, variables,
                        attempt_log,
                    )  # fmt: skip
                    outcome = outcome_of(last)
                    error_type = last.error_type
                    message = last.message
                    if last.ok and (hook.action.is_http or last.response_body is not None):
                        self._capture(hook, session, last)
        except _Refusal as refusal:
            outcome, error_type, message = "refused", refusal.error_type, refusal.message
        except RenderError as exc:
            outcome, error_type, message = "refused", "RenderError", str(exc)
        except Exception as exc:  # a hook never takes the agent down
            if self.interrupted.is_set():
                # The operator's second signal, raised out of what the main thread was doing
                # for a blocking hook (a retry wait): interrupted, replayable, not a fault.
                outcome, error_type = "failed", "interrupted"
                message = f"run interrupted after attempt {len(attempt_log)}"
            else:
                log.exception("hook %s failed unexpectedly", hook.name)
                outcome, error_type, message = "failed", type(exc).__name__, str(exc)
        attempts = max(attempts, len(attempt_log))  # those made before an exception too
        # An event context variable this event does not carry is simply empty (TOOL_NAME on
        # an activity change to idle): only a name no event could define is worth a warning.
        unresolved = sorted(
            name
            for name in getattr(variables, "unresolved", ()) or ()
            if name.partition(".")[0] not in EVENT_VARIABLES
        )
        if unresolved:  # at most once per hook and variable a minute, with a suppressed count
            from .warning_limit import warn_unresolved

            warn_unresolved(log, hook.name, unresolved)
        redactor = self.redactor(variables)
        message = redactor.redact_text(message)
        duration = self.clock.monotonic() - started
        execution = Execution(
            hook=hook,
            event=event,
            session_id=session.session_id,
            outcome=outcome,
            attempts=attempts,
            duration=duration,
            started_at=started_wall,
            idempotency_key=hook_id,
            status_code=last.status_code if last else None,
            exit_code=last.exit_code if last else None,
            error_type=error_type,
            message=message,
            request=request_record,
            trace_id=_hex(span.get_span_context().trace_id, 32),
            span_id=_hex(span.get_span_context().span_id, 16),
            agent_id=session.metadata.get("AGENT_ID"),
            attempt_log=tuple(attempt_log),
        )
        self._end_span(span, execution)
        for sink in self.sinks:
            try:
                sink(execution)
            except Exception:  # a broken sink must not stop the others
                log.exception("recording hook execution of %s failed", hook.name)
        return execution

    def _attempts(
        self,
        hook: HookSpec,
        event: LifecycleEvent,
        session: SessionInfo,
        rendered: RenderedRequest | RenderedCommand | None,
        hook_id: str,
        span: Span,
        deadline: float | None,
        variables: Variables,
        attempt_log: list[Any],
    ) -> tuple[int, AttemptResult]:
        policy = retry_policy_for(hook)
        waited = 0.0
        attempt = 0
        while True:
            attempt += 1
            attempt_started = self.clock.wall()
            timeout = attempt_timeout(hook, self.clock.monotonic(), deadline)
            if self.interrupted.is_set():  # the operator asked twice: no new attempt
                result = AttemptResult(
                    "timeout", 0.0, error_type="interrupted", message="run interrupted"
                )
            elif timeout <= 0:
                result = AttemptResult(
                    "timeout", 0.0, error_type="timeout", message="deadline passed"
                )
            elif hook.action.type == "python":
                result = self._python_attempt(hook, event, session, timeout)
            elif hook.action.type == "jsonrpc":
                assert isinstance(rendered, RenderedRequest)
                result = self._jsonrpc_attempt(
                    hook, event, session, rendered, hook_id, timeout, variables
                )
            elif isinstance(rendered, RenderedRequest):
                result = self._http_attempt(hook, rendered, hook_id, timeout, variables)
            else:
                assert rendered is not None
                result = self._script_attempt(
                    hook, event, session, rendered, span, timeout, variables
                )
            if self.interrupted.is_set() and result.kind != "ok":
                # Cut short by the operator's second signal (a blocking hook on the main
                # thread is abandoned by an exception): interrupted, not the hook's failure.
                result = AttemptResult(
                    "transient", result.duration, error_type="interrupted",
                    message=f"run interrupted during attempt {attempt}",
                )  # fmt: skip
            self._log_attempt(attempt_log, attempt, attempt_started, result, rendered, variables)
            if result.error_type == "interrupted":
                return attempt, result
            decision = policy.decide(attempt, result, waited)
            if not decision.retry:
                return attempt, result
            delay = float(decision.delay or 0.0)
            if deadline is not None and self.clock.monotonic() + delay >= deadline:
                return attempt, result
            span.add_event(
                ev.HOOK_RETRY_EVENT,
                {"attempt": attempt + 1, "delay": delay, "reason": decision.reason},
            )
            for sink in self.retry_listeners:
                sink(hook, event)
            for wait_sink in self.retry_waits:
                wait_sink(hook, event, attempt, policy.max_attempts, delay, result)
            for in_flight in self.in_flight:
                in_flight(hook, event, session, hook_id, attempt_log, policy.max_attempts, delay)
            if self.clock.sleep(delay, self.stopping):
                if self.interrupted.is_set():  # the operator's doing, not the endpoint's
                    reason = f"run interrupted before attempt {attempt + 1} of "
                    result = result._replace(
                        message=f"{reason}{policy.max_attempts}: {result.message}"
                    )
                return attempt, result
            waited += delay

    def _log_attempt(
        self,
        attempt_log: list[Any],
        number: int,
        started_at: float,
        result: AttemptResult,
        rendered: RenderedRequest | RenderedCommand | None,
        variables: Variables,
    ) -> None:
        """The attempt's row for the delivery history: redacted with the secrets known now
        (a token fetched for this attempt among them)."""
        from .attempt_log import attempt_row

        try:
            argv = rendered.argv if isinstance(rendered, RenderedCommand) else None
            redactor = self.redactor(variables)
            attempt_log.append(attempt_row(number, started_at, result, redactor, argv=argv))
        except Exception:  # the history is a record: a hook never fails for it
            log.exception("could not record attempt %d of hook execution", number)

    def _http_attempt(
        self,
        hook: HookSpec,
        request: RenderedRequest,
        hook_id: str,
        timeout: float,
        variables: Variables,
    ) -> AttemptResult:
        from ..actions.http import origin_of, send
        from ..auth import AuthError, check_transport
        from ..auth.errors import ORIGIN_REFUSED

        headers: dict[str, str] = {"X-Scion-Hook-ID": hook_id}
        action = hook.action
        has_written_credentials = "authorization" in {k.lower() for k in request.headers}
        # Where the template's own text says the request goes; checked before any token is
        # made, and again by `send` on the request as httpx is about to send it.
        fixed = _fixed_origin(action.url)
        origin = None
        if fixed is not None:
            literal, origin = fixed
            # A rendered URL that begins with the template's literal text (the whole
            # authority) has that text's origin: it is parsed again only when it does not.
            if not request.url.startswith(literal) and origin_of(request.url) != origin:
                raise _Refusal(
                    ORIGIN_REFUSED,
                    f"the rendered URL leaves {origin.scheme}://{origin.host}:{origin.port}, "
                    "the origin the template's URL fixes; nothing was sent",
                )
        try:
            # Credentials only over https (loopback excepted), checked on the rendered URL:
            # a URL from a variable cannot be checked at load time.
            check_transport(request.url, action.auth, has_credentials=has_written_credentials)
            if action.type in ("http", "jsonrpc") and action.auth.type != "none":
                environ = self._env_for_auth(variables)
                headers.update(self.credentials().headers_for(action.auth, request.url, environ))
            if action.signing_secret_env:
                headers.update(
                    self.credentials().signing_headers(
                        action,
                        hook_id,
                        request.body or b"",
                        self._env_for_auth(variables),
                        timestamp=int(self.clock.wall()),
                    )
                )
        except AuthError as exc:
            raise _Refusal(getattr(exc, "error_type", "AuthError"), str(exc)) from None
        redact_url = self.redactor(variables).redact_url
        return send(
            self.http_client(),
            request,
            timeout,
            extra_headers=headers,
            redact_url=redact_url,
            credentialed=action.auth.type != "none" or has_written_credentials,
            origin=origin,
        )

    def _env_for_auth(self, variables: Variables) -> Mapping[str, str]:
        """Secrets named by `token_env` come from the template's env, then the process's."""
        merged = dict(self.template.env)
        merged.update(self.environ)
        return merged

    def _script_attempt(
        self,
        hook: HookSpec,
        event: LifecycleEvent,
        session: SessionInfo,
        command: RenderedCommand,
        span: Span,
        timeout: float,
        variables: Variables,
    ) -> AttemptResult:
        from ..actions.script import CONFINED_CWD, confined_env, run_script, unsafe_as_root

        env = dict(command.env)
        user, confined = self.script_identity(hook)
        # Resolved on the PATH run_script will use: the hook's, else this process's (looked
        # up only when needed, as root, so the whole environment is not merged for it).
        search: Mapping[str, str] = ChainMap(env, os.environ)
        if confined:
            search = confined_env(search)
        cwd = CONFINED_CWD if confined else None
        refusal = unsafe_as_root(command.argv, search, user, cwd)
        if refusal is not None:  # a script others can rewrite never runs as root
            raise _Refusal("UnsafeScript", refusal)
        traceparent = to_traceparent(span.get_span_context()) or to_traceparent(
            session.span_context
        )
        if traceparent is not None:
            env["TRACEPARENT"] = traceparent
        # The secrets known now (the script path fetches no token meanwhile) hide in its output.
        redactor = self.redactor(variables)
        if hook.action.protocol == "host-v1":
            return self._host_script_attempt(hook, event, session, command, env, timeout, redactor)
        if hook.action.protocol == "core-agent":
            from ..systems.core_agent import envelope

            payload = envelope(event.name, session.session_id, dict(event.fields))
        else:
            payload = script_payload(hook, event, session)
        stdin = _STDIN_ENCODER.encode(payload).encode()
        outcome = run_script(
            RenderedCommand(argv=command.argv, env=env, stdin=stdin),
            timeout,
            user=user,
            on_output=self.output_listener(hook, redactor),
            root_checked=True,  # refused above
            confined=confined,
            base_env=self.inherited_env(user),
        )
        return outcome.result._replace(output=(outcome.stdout_tail, outcome.stderr_tail))

    def inherited_env(self, user: str | None) -> dict[str, str] | None:
        """What a script inherits (None: this process's whole environment). A script run as
        the agent's user is the agent's to read (/proc/PID/environ), so it inherits what the
        agent does: no journal setting and no credential the hooks name, unless the template
        shares it. What its own `env:` gives it, it still gets."""
        if user is None or os.geteuid() != 0:
            return None
        return agent_environment(os.environ, self.template)

    def script_identity(self, hook: HookSpec) -> tuple[str | None, bool]:
        """Who runs `hook`'s script (None: this process's user) and whether it is confined:
        the agent's user unless the hook says `run_as: root`, which runs as this process,
        confined (see actions/script.py `run_script`)."""
        if hook.action.run_as == "root":
            return None, True
        return self.script_user, False

    def _host_script_attempt(
        self,
        hook: HookSpec,
        event: LifecycleEvent,
        session: SessionInfo,
        command: RenderedCommand,
        env: dict[str, str],
        timeout: float,
        redactor: Redactor,
    ) -> AttemptResult:
        """Seed 003: `<script> <stage>`, the request on stdin, JSONL responses and logs on
        stdout (systems/host_protocol.py runs the stages of the event)."""
        from ..actions.script import run_script
        from ..systems import host_protocol

        user, confined = self.script_identity(hook)

        def run(
            stage: str, stdin: bytes, left: float, on_output: Callable[[str, str], None]
        ) -> AttemptResult:
            argv = (*command.argv, stage)
            return run_script(
                RenderedCommand(argv=argv, env=env, stdin=stdin),
                left,
                user=user,
                on_output=on_output,
                root_checked=True,  # refused in _script_attempt
                confined=confined,
                base_env=self.inherited_env(user),
            ).result

        log_line = self.output_listener(hook, redactor) or (lambda stream, line: None)
        context = self._system_context(hook, event, session)
        return host_protocol.run_event(hook.name, event, session, context, run, log_line, timeout)

    def _python_attempt(
        self, hook: HookSpec, event: LifecycleEvent, session: SessionInfo, timeout: float
    ) -> AttemptResult:
        """the-loop's local executor: its methods for this event's points, in-process."""
        from ..systems.the_loop import call_local

        if hook.action.path:
            # In-process: the supervisor's rights, root's when it is root. A file the agent's
            # user could write would be the agent's code run as root.
            refusal = unsafe_code_file_as_root(hook.action.path)
            if refusal is not None:
                return AttemptResult("permanent", 0.0, error_type="UnsafeScript", message=refusal)
        return call_local(
            hook.action, event.name, self._system_context(hook, event, session), timeout
        )

    def _jsonrpc_attempt(
        self,
        hook: HookSpec,
        event: LifecycleEvent,
        session: SessionInfo,
        request: RenderedRequest,
        hook_id: str,
        timeout: float,
        variables: Variables,
    ) -> AttemptResult:
        """the-loop's remote executor: one JSON-RPC 2.0 call per point of this event."""
        from ..actions.jsonrpc import read_answer, request_body
        from ..systems.the_loop import decide

        started = time.monotonic()
        context = self._system_context(hook, event, session)
        answers: list[tuple[str, object]] = []
        exchange = None  # the last call's, for the delivery history
        for request_id, point in enumerate(hook.action.points.get(event.name, ()), start=1):
            left = timeout - (time.monotonic() - started)
            if left <= 0:
                return AttemptResult(
                    "timeout",
                    time.monotonic() - started,
                    error_type="timeout",
                    message="deadline passed",
                )
            call = RenderedRequest(
                method="POST",
                url=request.url,
                headers={**request.headers, "Content-Type": "application/json"},
                body=request_body(point, {**context, "point": point}, request_id),
            )
            answer = read_answer(
                self._http_attempt(hook, call, hook_id, left, variables), request_id
            )
            if not answer.result.ok:
                return answer.result
            exchange = answer.result.exchange
            answers.append((point, answer.value))
        if not answers:
            return AttemptResult("ok", 0.0, skipped=True, message=f"no point of {event.name}")
        return decide(answers, time.monotonic() - started)._replace(exchange=exchange)

    def _system_context(
        self, hook: HookSpec, event: LifecycleEvent, session: SessionInfo
    ) -> dict[str, Any]:
        from ..systems.wire import hook_context

        context = hook_context(
            event.name, session.session_id, event.fields, session.metadata, event.timestamp
        )
        context["hook_name"] = hook.name
        return context

    def output_listener(
        self, hook: HookSpec, redactor: Redactor | None = None
    ) -> Callable[[str, str], None] | None:
        """Where a script's output lines go (the hook log), secrets taken out by `redactor`:
        a script may well print the token it was given."""
        sink = self.output_sink
        if sink is None:
            return None
        if redactor is None:
            return lambda stream, line: sink(hook, stream, line)
        return lambda stream, line: sink(hook, stream, redactor.redact_text(line))

    def _capture(self, hook: HookSpec, session: SessionInfo, result: AttemptResult) -> None:
        prefix = capture_prefix(hook.name)
        values: dict[str, Any] = {f"{prefix}_STATUS": str(result.status_code or "")}
        body = result.response_body
        if body is not None:
            values[f"{prefix}_RESPONSE"] = body[:CAPTURE_LIMIT].decode("utf-8", "replace")
        session.capture(values)

    # -- spans --

    def _start_span(self, hook: HookSpec, event: LifecycleEvent, session: SessionInfo) -> Span:
        parent = self._parent_context(session.span_context)
        try:
            return self.tracer.start_span(
                ev.HOOK_SPAN_NAME,
                context=parent,
                kind=SpanKind.INTERNAL,
                attributes={
                    ev.HOOK_ATTR_NAME: hook.name,
                    ev.HOOK_ATTR_EVENT: event.name,
                    ev.ATTR_EVENT: event.name,
                    ev.HOOK_ATTR_ACTION: hook.action.type,
                    ev.HOOK_ATTR_BLOCKING: hook.blocking,
                    ev.HOOK_ATTR_ON_ERROR: hook.on_error,
                    ev.HOOK_ATTR_INTERNAL: True,
                },
            )
        except Exception:  # telemetry never stops a hook
            log.debug("could not start hook span", exc_info=True)
            return NonRecordingSpan(session.span_context or trace.INVALID_SPAN_CONTEXT)

    def _parent_context(self, span_context: trace.SpanContext | None) -> Any:
        """The context whose span is the session's: the same for every execution of a
        session, so made once (a context is immutable)."""
        if span_context is None or not span_context.is_valid:
            return None
        last = self._last_parent
        if last is not None and last[0] is span_context:
            return last[1]
        parent = trace.set_span_in_context(NonRecordingSpan(span_context))
        self._last_parent = (span_context, parent)
        return parent

    def _end_span(self, span: Span, execution: Execution) -> None:
        try:
            # Set together: one call (and one lock of the span's) instead of one for each.
            attributes: dict[str, Any] = {
                ev.HOOK_ATTR_ATTEMPTS: execution.attempts,
                ev.HOOK_ATTR_OUTCOME: execution.outcome,
            }
            if execution.status_code is not None:
                attributes["http.response.status_code"] = execution.status_code
            if execution.exit_code is not None:
                attributes["process.exit.code"] = execution.exit_code
            if execution.hook.action.type == "script":
                attributes["process.command"] = execution.hook.action.command[0]
            failed = execution.outcome in ("failed", "timeout", "refused")
            if failed:
                attributes["error.type"] = execution.error_type or execution.outcome
            span.set_attributes(attributes)
            if failed:
                span.set_status(Status(StatusCode.ERROR, execution.message[:256]))
            elif execution.outcome == "success":
                span.set_status(_STATUS_OK)
            span.end()
        except Exception:
            log.debug("could not end hook span", exc_info=True)


@functools.lru_cache(maxsize=1024)
def _fixed_origin(url_template: str | None) -> tuple[str, Any] | None:
    """(the literal text before the URL template's first `${`, the origin it fixes), once per
    template: every execution of a hook checks its rendered URL against it."""
    origin = literal_origin(url_template)
    if origin is None or url_template is None:
        return None
    return url_template.partition("${")[0], origin


def literal_origin(url_template: str | None) -> Any:
    """The origin (scheme, host, port) a URL template's literal text fixes: everything before
    its first `${` when that already holds the whole authority; None when a variable forms
    part of the scheme, host or port (validate decides which variables may)."""
    if not url_template:
        return None
    from ..actions.http import origin_of

    literal, variable, _ = url_template.partition("${")
    if not variable:
        return origin_of(literal)
    _, separator, rest = literal.partition("://")
    if not separator or not any(mark in rest for mark in "/?#"):
        return None
    return origin_of(literal)


def _hook_metadata(session: SessionInfo, hook_name: str) -> dict[str, str]:
    metadata = dict(session.metadata)
    metadata.setdefault("SESSION_ID", session.session_id)
    metadata["HOOK_NAME"] = hook_name
    return metadata


def script_payload(hook: HookSpec, event: LifecycleEvent, session: SessionInfo) -> dict[str, Any]:
    """The JSON object a script reads on stdin (`hook_event_name` as seeds 001 and 003 have it)."""
    return {
        "hook_event_name": event.name,
        "hook_name": hook.name,
        "session_id": session.session_id,
        "timestamp": format_unix_timestamp(event.timestamp),
        "context": dict(event.fields),
        "agent": dict(session.metadata),
        "recovered": event.recovered,
    }


def _request_record(
    hook: HookSpec, rendered: RenderedRequest | RenderedCommand | None, redactor: Redactor
) -> dict[str, Any]:
    if rendered is None:
        return {
            "executor": hook.action.module or hook.action.path,
            "attribute": hook.action.executor,
        }
    if isinstance(rendered, RenderedRequest):
        return {
            "method": rendered.method,
            "url": redactor.redact_url(rendered.url),
            "headers": redactor.redact_headers(dict(rendered.headers)),
            "body": redactor.redact_text(rendered.body.decode("utf-8", "replace"))
            if rendered.body
            else None,
            # What a replay must add again at send time (secrets are never stored).
            "auth": hook.action.auth.type,
            "signed": bool(hook.action.signing_secret_env),
        }
    return {
        "argv": [redactor.redact_text(a) for a in rendered.argv],
        "env": {k: redactor.redact_text(v) for k, v in rendered.env.items()},
    }


def _hex(value: int, width: int) -> str | None:
    return format(value, f"0{width}x") if value else None
