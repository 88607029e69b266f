"""Re-sending failed deliveries from the journal (`otel-lifecycle-hooks replay`).

A failed or timed-out HTTP/webhook execution stays in the journal with its rendered request,
redacted. A replay sends that request again, once, with the SAME idempotency key
(`X-Scion-Hook-ID`, and the Standard Webhooks `webhook-id` derived from it), so a receiver
that saw the first delivery can tell it is the same one, and records the outcome as a new
journal row whose `replayed_from` names the row it re-sent.

Only a template the operator names renders a replay (`--template`, or
`$LIFECYCLE_HOOKS_TEMPLATE`). The journal is written beside the agent, which may write it too:
a session row's `template_files` (or the template text it stores) could name the agent's own
template, whose hook would send the operator's credential wherever it says. So what the
journal names is only a hint: without a named template each row is refused with a message
naming the journal's template and the command that would name it, and nothing is loaded.

Secrets were never journaled, so they are resolved again at send time from the hook's
definition in the named template and the current environment:

- auth headers (`bearer-token`, `api-key-header`, `gcp-*`) and webhook signatures come from
  `auth.Credentials`, as for a live attempt;
- a url, header or body that the journal holds as `[REDACTED]` is rendered again from the
  template; the result, redacted, must equal what the journal holds, so a replay never sends
  anything but the original request with its secrets filled in (a template or event value
  that changed since makes the replay refuse, naming the part);
- the stored request never chooses where the credentials go either: its url, method, header
  names and body must be ones the template renders, only the event's own values (which are
  not journaled apart) standing where the template puts them; anything else is refused;
- nor does the session's journaled metadata: a variable that decides where the request goes
  takes this command's value (`engine/destination.py`), and a row needing one that this
  environment and the template do not set is refused, naming it.

Scripts are not replayed: the event they read on stdin is not journaled, and running a command
with a made-up event could do harm.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, TraceFlags

from . import events as ev
from .actions.base import AttemptResult
from .actions.http import make_client, send
from .auth import AuthError, Credentials, check_transport
from .engine.attempt_log import attempt_row
from .engine.destination import journaled_metadata, operator_metadata, unsupplied
from .engine.hook_span import end_span, hex_id
from .engine.model import Execution, LifecycleEvent
from .engine.policies import outcome_of
from .errors import LifecycleHooksError
from .journal import FAILED_OUTCOMES, ExecutionRow
from .journal.base import Journal
from .journal.views import visible_executions
from .redact import MIN_SECRET_LENGTH, REDACTED, Redactor, encoded_forms
from .render import (
    FORM_CONTENT_TYPE,
    HOOK_ID_HEADER,
    RenderedRequest,
    RenderError,
    is_json_body,
    json_string_state,
    render_action,
    render_body,
    render_headers,
    render_url,
)
from .systems import load_templates
from .telemetry.metrics import HookMetrics
from .template.model import HookSpec, Template
from .template.problems import TemplateError
from .template.secrets import secret_names_for
from .variables import Variables, parse_template

log = logging.getLogger("otel_lifecycle_hooks.replay")

# A path the journal names is shown to the operator, never loaded: at most this much of it.
_HINT_PATH_LIMIT = 300


class ReplayRefused(LifecycleHooksError):
    """Nothing was sent: the message says why and what to do."""


@dataclass(frozen=True)
class ReplayOutcome:
    """What replaying one journal row did. `outcome` is success, failed, timeout, refused
    (nothing sent) or dry-run (nothing sent, `request` shows what would be)."""

    source_id: int
    hook: str
    event: str
    idempotency_key: str
    outcome: str
    status_code: int | None = None
    error_type: str | None = None
    message: str = ""
    new_id: int | None = None  # the journal row recording this replay
    request: Mapping[str, Any] | None = None  # redacted

    @property
    def delivered(self) -> bool:
        return self.outcome == "success"

    def as_dict(self) -> dict[str, Any]:
        return {
            "replayed_from": self.source_id,
            "hook": self.hook,
            "event": self.event,
            "idempotency_key": self.idempotency_key,
            "outcome": self.outcome,
            "status_code": self.status_code,
            "error_type": self.error_type,
            "message": self.message,
            "id": self.new_id,
            "request": dict(self.request) if self.request is not None else None,
        }


@dataclass
class _Prepared:
    request: RenderedRequest
    extra_headers: dict[str, str]
    timeout: float
    redactor: Redactor


def replay_command(execution_id: int, journal_args: Sequence[str], templates: Sequence[str]) -> str:
    """The `replay` command line that re-sends `execution_id` with `templates`, quoted for a
    shell (the paths may come from the journal: pasted as shown, each is one word)."""

    words = ["otel-lifecycle-hooks", "replay", str(execution_id), *journal_args]
    for path in templates or ("FILE",):
        words += ["--template", path]
    return " ".join(word if word == "FILE" else shlex.quote(word) for word in words)


def restart_ui_advice(journal_args: Sequence[str], hint: Sequence[str]) -> str:
    """What a Redeliver refused for want of a template tells the operator: restart `ui` with
    one (`hint`: the templates the journal names, shown quoted, never loaded)."""

    words = ["otel-lifecycle-hooks", "ui", *journal_args]
    command = " ".join(shlex.quote(word) for word in words)
    for path in hint or ("FILE",):
        command += " --template " + (path if path == "FILE" else shlex.quote(path))
    if hint:
        return f"if that is your template, restart this page with it: {command}"
    return f"restart this page with the template its session ran: {command}"


def journal_template_hint(session: Any) -> tuple[str, ...]:
    """The template files a session row says it ran: for the operator to read, never to load.
    Control characters are shown as `?` and each path is cut at a bound (it is the agent's
    to write)."""
    if session is None:
        return ()
    named = list(session.template_files or ())
    if not named:
        named = [str(entry.get("path", "")) for entry in session.templates or ()]
    shown = []
    for path in named[:8]:
        text = "".join(c if c.isprintable() else "?" for c in str(path))[:_HINT_PATH_LIMIT]
        if text:
            shown.append(text)
    return tuple(shown)


@dataclass
class Replayer:
    """Replays journal rows. `templates`: the files the operator named (`--template`,
    `$LIFECYCLE_HOOKS_TEMPLATE`), parent first, the only ones a replay renders from;
    `environ`: where secrets are read now; `advice(row, hint)`: what to tell an operator who
    named none, `hint` being the templates the journal names (default: the `replay` command
    with `journal_args`); `http_client` / `credentials` default to the ones live hooks use.
    `tracer_provider` / `meter_provider` (the global ones by default) get each replay's hook
    span and delivery metrics, as a live delivery's."""

    journal: Journal
    templates: Sequence[str] = ()
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    advice: Callable[[ExecutionRow, tuple[str, ...]], str] | None = None
    journal_args: Sequence[str] = ()
    http_client: Any = None
    credentials: Any = None
    wall_clock: Callable[[], float] = time.time
    tracer_provider: Any = None
    meter_provider: Any = None
    _metrics: HookMetrics | None = None
    _loaded: dict[tuple[str, ...], Template | str] = field(default_factory=dict)
    _owned: list[Any] = field(default_factory=list)

    # -- what to replay --

    def select(
        self,
        ids: Sequence[int] = (),
        all_failed: bool = False,
        since: float | None = None,
        *,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
        hook: str | None = None,
        event: str | None = None,
        outcomes: Sequence[str] | None = None,
        last: int | None = None,
        retention: Any = None,
    ) -> list[ExecutionRow | int]:
        """The rows to replay, oldest first: the given ids (an id not in the journal stays an
        int, reported as refused), and with `all_failed` every failed original delivery not
        yet delivered by an earlier replay and within the journal's retention; of the agents,
        sessions, hook, event and failed outcomes given; with `last`, only the newest that
        many of them."""

        chosen: list[ExecutionRow | int] = []
        for execution_id in ids:
            row = self.journal.get(execution_id)
            chosen.append(row if row is not None else execution_id)
        if all_failed:
            delivered = self.journal.delivered_by_replay()
            given = {row.id for row in chosen if isinstance(row, ExecutionRow)}
            wanted = tuple(o for o in outcomes or FAILED_OUTCOMES if o in FAILED_OUTCOMES)
            rows = visible_executions(
                self.journal, retention=retention, since=since, agent_id=agent,
                session_id=session, hook=hook, event=event, outcomes=wanted or ("-",),
                oldest_first=True,
            )  # fmt: skip
            for row in rows:
                if row.replayed_from is None and row.id not in delivered and row.id not in given:
                    chosen.append(row)
        if since is not None:
            chosen = [r for r in chosen if not isinstance(r, ExecutionRow) or r.started_at >= since]
        checks: list[tuple[str, Any]] = [
            ("agent_id", agent), ("session_id", session), ("hook", hook), ("event", event),
            ("outcome", tuple(outcomes) if outcomes else None),
        ]  # fmt: skip
        selected = [
            r
            for r in chosen
            if not isinstance(r, ExecutionRow)
            or all(_matches(getattr(r, name), value) for name, value in checks)
        ]
        return selected[-last:] if last is not None else selected

    # -- replaying --

    def replay(self, row: ExecutionRow | int, *, dry_run: bool = False) -> ReplayOutcome:
        """Re-send one row's request (or show it, with `dry_run`); never raises."""
        if not isinstance(row, ExecutionRow):
            return ReplayOutcome(
                row, "?", "?", "", "refused", message=f"no execution {row} in the journal"
            )
        key = row.idempotency_key or ""
        try:
            self._check_replayable(row)
            hook_and_template = self._hook_for(row)
            prepared = self._prepare(row, hook_and_template)
        except ReplayRefused as refusal:
            return self._outcome(row, "refused", message=str(refusal))
        shown = _shown_request(prepared, key)
        if dry_run:
            return self._outcome(row, "dry-run", request=shown)

        hook = hook_and_template[0]
        started_wall = self.wall_clock()
        span = self._start_span(row, hook)
        # The hook span is current while sending: the CLIENT span and the request's
        # `traceparent` are its children, as for a live delivery.
        with trace.use_span(span, end_on_exit=False):
            result = send(
                self._client(),
                prepared.request,
                prepared.timeout,
                extra_headers=prepared.extra_headers,
            )
        outcome = outcome_of(result)
        message = prepared.redactor.redact_text(result.message)
        span_context = span.get_span_context()
        self._record_telemetry(span, row, hook, result, outcome, message, started_wall)
        new_id = self.journal.record_execution(
            ExecutionRow(
                hook=row.hook,
                event=row.event,
                outcome=outcome,
                started_at=started_wall,
                attempts=1,
                duration_ms=result.duration * 1000.0,
                session_id=row.session_id,
                agent_id=row.agent_id,
                http_status=result.status_code,
                error_type=result.error_type,
                message=message,
                idempotency_key=row.idempotency_key,
                request=row.request,
                replayed_from=row.id,
                trace_id=hex_id(span_context.trace_id, 32),
                span_id=hex_id(span_context.span_id, 16),
            ),
            [attempt_row(1, started_wall, result, prepared.redactor)],
        )
        log.info("replayed execution %s (%s/%s): %s", row.id, row.hook, row.event, outcome)
        return self._outcome(
            row, outcome, status_code=result.status_code, error_type=result.error_type,
            message=message, new_id=new_id, request=shown,
        )  # fmt: skip

    def close(self) -> None:
        """Release the HTTP client and credentials this replayer built."""
        for owned in self._owned:
            owned.close()
        self._owned.clear()

    # -- telemetry --

    def _start_span(self, row: ExecutionRow, hook: HookSpec) -> Span:
        """The replay's hook span: a delivery's attributes, the replayed row's id, and a link
        to the original delivery's span (a replay starts a trace of its own)."""
        provider = self.tracer_provider or trace.get_tracer_provider()
        original = _journaled_span_context(row)
        try:
            return provider.get_tracer("otel_lifecycle_hooks").start_span(
                ev.hook_span_name(hook.name),
                kind=SpanKind.INTERNAL,
                attributes={
                    ev.HOOK_ATTR_NAME: hook.name,
                    ev.HOOK_ATTR_EVENT: row.event,
                    ev.ATTR_EVENT: row.event,
                    ev.HOOK_ATTR_ACTION: hook.action.type,
                    ev.HOOK_ATTR_BLOCKING: hook.blocking,
                    ev.HOOK_ATTR_ON_ERROR: hook.on_error,
                    ev.HOOK_ATTR_INTERNAL: True,
                    ev.HOOK_ATTR_REPLAYED_FROM: row.id or 0,
                },
                links=[Link(original)] if original is not None else (),
            )
        except Exception:  # telemetry never stops a replay
            log.debug("could not start the replay's span", exc_info=True)
            return trace.INVALID_SPAN

    def _record_telemetry(
        self,
        span: Span,
        row: ExecutionRow,
        hook: HookSpec,
        result: AttemptResult,
        outcome: str,
        message: str,
        started_wall: float,
    ) -> None:
        """End the hook span with the outcome and record the delivery metrics."""
        execution = Execution(
            hook=hook, event=LifecycleEvent(row.event, timestamp=started_wall),
            session_id=row.session_id or "", outcome=outcome, attempts=1,
            duration=result.duration, started_at=started_wall,
            idempotency_key=row.idempotency_key or "", status_code=result.status_code,
            error_type=result.error_type, message=message, replayed_from=row.id,
        )  # fmt: skip
        end_span(span, execution)
        if self._metrics is None:
            self._metrics = HookMetrics(self.meter_provider)
        self._metrics.record_execution(
            hook.name, row.event, hook.action.type, outcome, result.duration
        )

    # -- the steps --

    def _check_replayable(self, row: ExecutionRow) -> None:
        if row.outcome not in FAILED_OUTCOMES:
            raise ReplayRefused(
                f"execution {row.id} ended {row.outcome}; only failed, timed-out, dropped or "
                "interrupted deliveries are replayed"
            )
        if row.id in self.journal.delivered_by_replay():
            raise ReplayRefused(f"execution {row.id} was already delivered by an earlier replay")
        request = row.request or {}
        if "argv" in request:
            raise ReplayRefused(
                f"hook {row.hook!r} is a script: scripts are not replayed, as the event they read "
                "on stdin is not journaled; fire the event again with "
                "`otel-lifecycle-hooks test --execute`"
            )
        if "method" not in request or "url" not in request:
            raise ReplayRefused(f"execution {row.id} has no journaled HTTP request to re-send")
        if not row.idempotency_key:
            raise ReplayRefused(
                f"execution {row.id} has no idempotency key; "
                "a replay could not be told from a new delivery"
            )

    def _hook_for(self, row: ExecutionRow) -> tuple[HookSpec, Template]:
        """The hook's definition in the operator's templates; refused when none was named,
        when they do not load, or when they have no hook of the row's name."""
        paths = tuple(self.templates)
        if not paths:
            raise ReplayRefused(self._name_a_template(row))
        template = self._template(paths)
        if isinstance(template, str):
            raise ReplayRefused(f"{template}. Nothing was sent.")
        hook = next((hook for hook in template.hooks if hook.name == row.hook), None)
        if hook is None:
            raise ReplayRefused(
                f"hook {row.hook!r} is not in the template you named ({', '.join(paths)}); name "
                "the template its session ran. Nothing was sent."
            )
        return hook, template

    def _name_a_template(self, row: ExecutionRow) -> str:
        session = self.journal.session(row.session_id) if row.session_id else None
        hint = journal_template_hint(session)
        if self.advice is not None:
            advice = self.advice(row, hint)
        else:
            command = replay_command(row.id or 0, self.journal_args, hint)
            advice = (
                f"if that is your template, run: {command}"
                if hint
                else f"name the template its session ran: {command}"
            )
        said = (
            f"the journal names {', '.join(hint)}, which is not loaded, as the agent can write "
            "the journal; "
            if hint
            else ""
        )
        return (
            f"hook {row.hook!r}: only a template you name (--template, or "
            f"$LIFECYCLE_HOOKS_TEMPLATE) renders a replay, and none was named; {said}{advice}. "
            "Nothing was sent."
        )

    def _template(self, paths: tuple[str, ...]) -> Template | str:
        if paths not in self._loaded:
            try:
                self._loaded[paths] = load_templates([Path(p) for p in paths])
            except (TemplateError, OSError) as exc:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self._loaded[paths] = f"template {', '.join(paths)} does not load: {first}"
        return self._loaded[paths]

    def _prepare(self, row: ExecutionRow, found: tuple[HookSpec, Template]) -> _Prepared:
        stored = dict(row.request or {})
        hook, template = found
        if not hook.action.is_http:
            raise ReplayRefused(
                f"hook {row.hook!r} is now a {hook.action.type} action; "
                "only http and webhook deliveries are replayed"
            )

        # The journal is the agent's to write: what decides where the request goes (and with
        # which credential) comes from this command's side only, or the row is refused.
        operator = operator_metadata(template, self.environ)
        missing = unsupplied(hook, template, self.environ, operator)
        if missing:
            raise ReplayRefused(
                "; ".join(item.message() for item in missing)
                + f". Nothing was sent; execution {row.id} stays journaled, "
                "to replay once it is set."
            )
        metadata = journaled_metadata(self._session_metadata(row), operator, template)

        def variables() -> Variables:
            return _replay_variables(row, hook, template, metadata, self.environ)

        request = _restore_secrets(stored, hook, variables)
        _check_template_shape(request, hook, variables())
        extra = {HOOK_ID_HEADER: row.idempotency_key or ""}
        extra.update(self._auth_headers(hook, request, template, row.idempotency_key or ""))
        secrets = variables().secret_values() | set(self._credentials().secret_values())
        return _Prepared(request, extra, hook.timeout, Redactor(secrets))

    def _session_metadata(self, row: ExecutionRow) -> dict[str, str]:
        session = self.journal.session(row.session_id) if row.session_id else None
        metadata = dict(session.metadata) if session is not None and session.metadata else {}
        metadata.update({"AGENT_ID": row.agent_id, "SESSION_ID": row.session_id})
        if session is not None and session.agent_name:
            metadata["AGENT_NAME"] = session.agent_name
        return {k: v for k, v in metadata.items() if v}

    def _auth_headers(
        self, hook: HookSpec, request: RenderedRequest, template: Template, key: str
    ) -> dict[str, str]:

        environ = {**template.env, **self.environ}
        action = hook.action
        headers: dict[str, str] = {}
        try:
            has_written = "authorization" in {name.lower() for name in request.headers}
            check_transport(request.url, action.auth, has_credentials=has_written)
            if action.type == "http":
                headers.update(self._credentials().headers_for(action.auth, request.url, environ))
            if action.signing_secret_env:
                headers.update(
                    self._credentials().signing_headers(
                        action, key, request.body or b"", environ, timestamp=int(self.wall_clock())
                    )
                )
        except AuthError as exc:
            raise ReplayRefused(f"hook {hook.name!r}: {exc}. Nothing was sent.") from None
        return headers

    def _client(self) -> Any:
        if self.http_client is None:
            self.http_client = make_client(self.tracer_provider, self.meter_provider)
            self._owned.append(self.http_client)
        return self.http_client

    def _credentials(self) -> Any:
        if self.credentials is None:
            self.credentials = Credentials()
            self._owned.append(self.credentials)
        return self.credentials

    def _outcome(self, row: ExecutionRow, outcome: str, **details: Any) -> ReplayOutcome:
        return ReplayOutcome(
            source_id=row.id or 0, hook=row.hook, event=row.event,
            idempotency_key=row.idempotency_key or "", outcome=outcome, **details,
        )  # fmt: skip


# -- pure helpers ---------------------------------------------------------------------------


def _journaled_span_context(row: ExecutionRow) -> SpanContext | None:
    """The original delivery's span, from the ids its row holds; None when it has none (or
    they are not W3C hex: the journal is the agent's to write)."""
    try:
        trace_id = int(row.trace_id or "", 16)
        span_id = int(row.span_id or "", 16)
    except ValueError:
        return None
    if len(row.trace_id or "") != 32 or len(row.span_id or "") != 16:
        return None
    context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(1))
    return context if context.is_valid else None


def _matches(value: str, wanted: str | Sequence[str] | None) -> bool:
    if wanted is None:
        return True
    return value == wanted if isinstance(wanted, str) else value in wanted


def _replay_variables(
    row: ExecutionRow,
    hook: HookSpec,
    template: Template,
    metadata: Mapping[str, str],
    environ: Mapping[str, str],
) -> Variables:
    """What a replay knows of the original event: its name and timestamp (from the
    idempotency key), the agent and session ids; the rest of the event is not journaled.
    `metadata` is the session's, with the names that decide a destination already the
    operator's (`destination.journaled_metadata`)."""
    event = {"EVENT": row.event}
    prefix = f"{row.agent_id}:{row.hook}:{row.event}:"
    if row.idempotency_key and row.idempotency_key.startswith(prefix):
        event["TIMESTAMP"] = row.idempotency_key[len(prefix) :]
    return Variables(
        event=event,
        metadata={**template.metadata, **metadata, "HOOK_NAME": hook.name},
        template_env=template.env,
        environ=environ,
        secret_names=secret_names_for(template),
    )


def _restore_secrets(
    stored: Mapping[str, Any], hook: HookSpec, variables: Callable[[], Variables]
) -> RenderedRequest:
    """The journaled request, with every `[REDACTED]` filled in again from the template;
    raises `ReplayRefused` when a part cannot be rebuilt exactly."""
    headers = {str(k): str(v) for k, v in (stored.get("headers") or {}).items()}
    url = str(stored["url"])
    body_text = stored.get("body")
    action = hook.action
    if REDACTED in url:
        url = _rebuild(
            "url", url, lambda v: render_url(action.url or "", v), variables, hook, is_url=True
        )
    for name, value in list(headers.items()):
        if REDACTED in value:
            template = next(
                (t for k, t in action.headers.items() if k.lower() == name.lower()), None
            )
            if template is None:
                raise ReplayRefused(
                    f"hook {hook.name!r}: header {name} is no longer in its template. "
                    "Nothing was sent."
                )
            headers[name] = _rebuild(
                f"header {name}", value, _header_renderer(name, template), variables, hook
            )
    if body_text is not None and REDACTED in body_text:
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
        body_text = _rebuild(
            "body", body_text,
            lambda v: render_body(action.body or "", v, content_type=content_type).decode(
                "utf-8", "replace"),
            variables, hook,
        )  # fmt: skip
    body = body_text.encode("utf-8") if body_text is not None else None
    return RenderedRequest(method=str(stored["method"]), url=url, headers=headers, body=body)


def _check_template_shape(request: RenderedRequest, hook: HookSpec, variables: Variables) -> None:
    """Refuse a journaled request the hook's template could not have made. The journal file
    may be written by the agent, so its stored request never chooses where the hook's
    credential goes: the origin (scheme, userinfo, host, port) and the method must be the
    template's, every header must be one the template names, and a header the template writes
    as a constant must hold it."""

    try:
        fresh = render_action(hook.action, variables)
    except RenderError as exc:
        raise ReplayRefused(
            f"hook {hook.name!r}: rendering its request again failed: {exc}. Nothing was sent."
        ) from None
    assert isinstance(fresh, RenderedRequest)
    try:
        journaled = urlsplit(request.url)
    except ValueError:
        journaled = urlsplit("")
    current = urlsplit(fresh.url)
    if (journaled.scheme.lower(), journaled.netloc.lower()) != (
        current.scheme.lower(),
        current.netloc.lower(),
    ):
        raise ReplayRefused(
            f"hook {hook.name!r}: the journal's url does not point at its template's origin "
            f"({current.scheme}://{current.hostname}); the journal was changed, or the "
            "template's url was since. Nothing was sent."
        )
    if request.method.upper() != fresh.method:
        raise ReplayRefused(
            f"hook {hook.name!r}: the journal's method {request.method.upper()[:16]!r} is not its "
            f"template's {fresh.method}. Nothing was sent."
        )
    action = hook.action
    named = {name.lower(): name for name in fresh.headers}
    for name, value in request.headers.items():
        template_name = named.get(name.lower())
        template = action.headers.get(template_name or "")
        if template is None and template_name is not None:
            template = fresh.headers[template_name]  # the Content-Type a JSON body gets
        if template is None or not _could_render(
            template,
            value,
            "header",
            variables,
            _one_header(name, variables),
        ):
            raise ReplayRefused(
                f"hook {hook.name!r}: the journal's header {name[:64]!r} is not one its template "
                "writes. Nothing was sent."
            )
    if not _could_render(action.url or "", request.url, "url", variables,
                         lambda t: render_url(t, variables)):  # fmt: skip
        raise ReplayRefused(
            f"hook {hook.name!r}: the journal's url is not one its template makes. "
            "Nothing was sent."
        )
    content_type = next((v for k, v in fresh.headers.items() if k.lower() == "content-type"), None)
    body = (request.body or b"").decode("utf-8", "replace")
    kind = _body_kind(action.body or "", content_type)
    if not _could_render(action.body or "", body, kind, variables,
                         lambda t: render_body(t, variables, content_type=content_type)
                         .decode("utf-8", "replace")):  # fmt: skip
        raise ReplayRefused(
            f"hook {hook.name!r}: the journal's body is not one its template makes (the template's "
            "own text differs). Nothing was sent."
        )


# An event's value is not journaled: the journal's text stands where it did. The hole marks
# its place in a rendering; letters only, so that every encoder leaves it as it is.
_HOLE = "zqjournaledvalueqz"
# What an event's value can be once encoded for where it stands.
_HOLE_PATTERNS = {
    "url": r"[A-Za-z0-9_.~%+-]*",
    "header": r"[^\r\n]*",
    "form": r"[A-Za-z0-9_.~%+*-]*",
}


_JSON_IN_STRING = r'(?:[^"\\\x00-\x1f]|\\.)*'
_JSON_VALUE = rf'(?:"{_JSON_IN_STRING}"|-?[0-9][0-9.eE+-]*|true|false|null)'


def _one_header(name: str, variables: Variables) -> Callable[[str], str]:
    return lambda template: render_headers({name: template}, variables)[name]


def _body_kind(template: str, content_type: str | None) -> str:
    if is_json_body(template, content_type):
        return "json"
    if content_type is not None and content_type.lower().startswith(FORM_CONTENT_TYPE):
        return "form"
    return "text"


def _could_render(
    template: str,
    journaled: str,
    kind: str,
    variables: Variables,
    render: Callable[[str], str],
) -> bool:
    """True when `journaled` is what `template` renders to with the values known now (the
    template's own text, metadata, environment and secrets) and any event values in the
    places the template gives them."""
    holed: list[str] = []
    for piece in parse_template(template):
        if isinstance(piece, str):
            holed.append(piece.replace("${", "$${"))
            continue
        resolved = variables.resolve(piece.text, record=False)
        if resolved is not None and resolved.trusted and resolved.value != "":
            default = f":-{piece.default}" if piece.default is not None else ""
            holed.append("${" + piece.text + default + "}")
        else:
            holed.append(_HOLE)
    try:
        literals = render("".join(holed)).split(_HOLE)
    except RenderError:
        return False
    if kind == "text":
        return _glob_matches(literals, journaled)
    holes = _json_holes(literals) if kind == "json" else [_HOLE_PATTERNS[kind]] * len(literals)
    pattern = "".join(
        hole + re.escape(literal) for hole, literal in zip(["", *holes], literals, strict=False)
    )
    return re.fullmatch(pattern, journaled) is not None


def _json_holes(literals: Sequence[str]) -> list[str]:
    """Each hole's pattern in a JSON body: inside a string, escaped string text; outside, a
    scalar or a whole string (as `render_body` writes a value there)."""

    holes: list[str] = []
    in_string = escaped = False
    for literal in literals[:-1]:
        in_string, escaped = json_string_state(literal, in_string, escaped)
        holes.append(_JSON_IN_STRING if in_string else _JSON_VALUE)
    return holes


def _glob_matches(literals: Sequence[str], text: str) -> bool:
    """`text` is the literals in order with anything between them (linear: no backtracking)."""
    if len(literals) == 1:
        return text == literals[0]
    first, *middle, last = literals
    if not text.startswith(first) or not text.endswith(last) or len(text) < len(first) + len(last):
        return False
    cursor, end = len(first), len(text) - len(last)
    for literal in middle:
        found = text.find(literal, cursor, end)
        if found < 0:
            return False
        cursor = found + len(literal)
    return True


def _header_renderer(name: str, template: str) -> Callable[[Variables], str]:
    return lambda variables: render_headers({name: template}, variables)[name]


def _rebuild(
    part: str,
    stored: str,
    render: Callable[[Variables], str],
    variables: Callable[[], Variables],
    hook: HookSpec,
    *,
    is_url: bool = False,
) -> str:
    """One journaled part with its secrets back in.

    The part is rendered again with what is known now (the event's own values are not
    journaled, so they render empty); each secret found in that rendering fills, in order, the
    place its redacted form holds in the journaled text, which keeps the event's values as
    journaled. A part redacted whole (a credential header, a secret query value) is taken from
    the new rendering, which must then need nothing the journal lacks and redact to the
    journaled text."""
    local = variables()
    try:
        fresh = render(local)
    except RenderError as exc:
        raise ReplayRefused(
            f"hook {hook.name!r}: rendering its {part} again failed: {exc}. Nothing was sent."
        ) from None
    redactor = Redactor(local.secret_values())
    spliced = _splice(stored, fresh, local.secret_values(), redactor)
    if spliced is not None:
        return spliced
    if local.unresolved:
        names = ", ".join(f"${{{name}}}" for name in sorted(local.unresolved))
        raise ReplayRefused(
            f"hook {hook.name!r}: its journaled {part} holds redacted values, and rendering it "
            f"again needs {names}, which the journal does not keep and the current environment "
            "does not set. Nothing was sent."
        )
    redacted = redactor.redact_url(fresh) if is_url else redactor.redact_text(fresh)
    if part.startswith("header ") and redactor.is_secret_header(part.split(" ", 1)[1]):
        redacted = REDACTED
    if redacted != stored:
        raise ReplayRefused(
            f"hook {hook.name!r}: its {part} renders differently now than when it was journaled "
            "(its template changed since), so the original request cannot be rebuilt. "
            "Nothing was sent."
        )
    return fresh


def _splice(stored: str, fresh: str, secrets: set[str], redactor: Redactor) -> str | None:
    """`stored` with each redaction marker replaced by the secret `fresh` holds at that place,
    in order; None when they do not pair up one to one."""
    forms = sorted(
        {
            form
            for value in secrets
            for form in encoded_forms(value)
            if len(form) >= MIN_SECRET_LENGTH
        },
        key=len,
        reverse=True,
    )
    if not forms:
        return None
    pieces: list[str] = []
    cursor = 0
    for match in re.finditer("|".join(map(re.escape, forms)), fresh):
        marker = redactor.redact_text(match.group(0))
        at = stored.find(marker, cursor)
        if at < 0:
            return None
        pieces += [stored[cursor:at], match.group(0)]
        cursor = at + len(marker)
    pieces.append(stored[cursor:])
    if REDACTED in stored[cursor:] or not pieces[:-1]:
        return None
    return "".join(pieces)


def _shown_request(prepared: _Prepared, key: str) -> dict[str, Any]:
    """The request as it is sent, fit to print: secrets redacted."""
    redactor = prepared.redactor
    headers = {**prepared.request.headers, **prepared.extra_headers}
    body = prepared.request.body
    return {
        "method": prepared.request.method,
        "url": redactor.redact_url(prepared.request.url),
        "headers": redactor.redact_headers(headers),
        "body": redactor.redact_text(body.decode("utf-8", "replace")) if body is not None else None,
    }
