"""`otel-lifecycle-hooks test`: the exact requests and commands an event's hooks would make.

Nothing is sent unless `--execute` is given. Agent metadata and event context get example values
(AGENT_NAME `example-agent`, TIMESTAMP now, PHASE fitting the event ...), each overridable with
`--set VAR=value`. Secrets are redacted as everywhere else: credential headers, auth tokens, and
the values of variables named under `secrets:` or looking like credentials.

Exit codes: 0 rendered; 1 the templates do not load or a hook does not render; 2 a usage error
(unknown event, malformed `--set`, `--execute` unavailable).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from .. import events
from ..redact import DEFAULT_SECRET_HEADERS, REDACTED, Redactor
from ..render import (
    RenderedCommand,
    RenderedRequest,
    RenderError,
    hook_id_header,
    render_action,
)
from ..systems import load_templates
from ..template.checks import script_problem
from ..template.model import AuthSpec, HookSpec, Template
from ..template.problems import TemplateError, did_you_mean
from ..template.secrets import secret_names_for
from ..variables import (
    EVENT_VARIABLES,
    METADATA_VARIABLES,
    Reference,
    Variables,
    format_timestamp,
    parse_template,
)

EXIT_OK = 0
EXIT_TEMPLATE_ERROR = 1
EXIT_USAGE = 2
EXIT_HOOK_FAILED = 3  # --execute: a hook did not succeed

# Placeholders for a dry run, standing in for what the supervisor knows about a real agent.
EXAMPLE_METADATA: dict[str, str] = {
    "AGENT_NAME": "example-agent",
    "AGENT_SLUG": "example-agent",
    "AGENT_ID": "00000000-0000-4000-8000-000000000001",
    "TEMPLATE_NAME": "example-template",
    "HARNESS_NAME": "example-harness",
    "HARNESS_CONFIG": "example-harness-config",
    "GROVE_NAME": "example-grove",
    "GROVE_ID": "00000000-0000-4000-8000-000000000002",
    "GROVE_PATH": "/workspace",
    "CONTAINER_ID": "example-container",
    "IMAGE": "example-image:latest",
    "SESSION_ID": "00000000-0000-4000-8000-000000000003",
}

# Event context a real event of each kind would carry.
EXAMPLE_EVENT_CONTEXT: dict[str, dict[str, str]] = {
    events.PRE_START: {"PHASE": "starting", "PREVIOUS_PHASE": "provisioning"},
    events.POST_START: {"PHASE": "running", "PREVIOUS_PHASE": "starting", "ACTIVITY": "idle"},
    events.PRE_STOP: {"PHASE": "stopping", "PREVIOUS_PHASE": "running", "ACTIVITY": "idle"},
    events.SESSION_END: {
        "PHASE": "stopped",
        "PREVIOUS_PHASE": "stopping",
        "ACTIVITY": "completed",
        "EXIT_CODE": "0",
    },
    events.PHASE_CHANGE: {"PHASE": "running", "PREVIOUS_PHASE": "starting"},
    events.ACTIVITY_CHANGE: {
        "PHASE": "running",
        "ACTIVITY": "thinking",
        "PREVIOUS_ACTIVITY": "idle",
    },
    events.TASK_COMPLETED: {
        "PHASE": "running",
        "ACTIVITY": "completed",
        "PREVIOUS_ACTIVITY": "thinking",
        "TASK_SUMMARY": "Example task summary",
        "ASSISTANT_TEXT": "Example assistant text.",
    },
    events.LIMITS_EXCEEDED: {
        "PHASE": "running",
        "ACTIVITY": "limits_exceeded",
        "LIMIT_NAME": "max_turns",
        "LIMIT_COUNT": "50",
    },
    events.ERROR: {
        "PHASE": "error",
        "PREVIOUS_PHASE": "running",
        "ERROR_MESSAGE": "Example error message",
    },
    "tool-start": {"PHASE": "running", "ACTIVITY": "executing", "TOOL_NAME": "example_tool"},
    "tool-end": {"PHASE": "running", "ACTIVITY": "idle", "TOOL_NAME": "example_tool"},
}

_SET_ARGUMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)\Z", re.DOTALL)
_CAPTURED_NAME = re.compile(r"HOOK_[A-Z0-9_]+_(RESPONSE|STATUS)\Z")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "test",
        help="dry run: show the requests and commands the hooks of an event would make",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("templates", nargs="+", metavar="TEMPLATE", help="scion-agent.yaml files")
    parser.add_argument("--event", required=True, metavar="E", help="the event to simulate")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        dest="assignments",
        metavar="VAR=value",
        help="give a variable a value (repeatable); overrides every other source",
    )
    parser.add_argument("--json", action="store_true", help="print a machine-readable list")
    parser.add_argument(
        "--execute",
        action="store_true",
        help="actually send the requests and report each outcome (exit 3 when a hook fails)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    return dry_run(
        args.templates,
        args.event,
        args.assignments,
        as_json=args.json,
        execute=args.execute,
        environ=os.environ,
        out=sys.stdout,
        err=sys.stderr,
    )


def dry_run(
    template_paths: Sequence[str],
    event: str,
    assignments: Sequence[str],
    *,
    as_json: bool = False,
    execute: bool = False,
    environ: Mapping[str, str],
    out: TextIO,
    err: TextIO,
) -> int:
    """Render what `event` would make the templates' hooks do; see the module docstring."""
    if event not in events.ALL_EVENTS:
        hint = did_you_mean(event, events.TEMPLATE_EVENTS + events.RUNTIME_EVENTS)
        err.write(
            f"error: unknown event {event!r}{hint}\n"
            f"  template events: {', '.join(events.TEMPLATE_EVENTS)}\n"
            f"  runtime events: {', '.join(events.RUNTIME_EVENTS)}\n"
        )
        return EXIT_USAGE
    overrides: dict[str, str] = {}
    for assignment in assignments:
        match = _SET_ARGUMENT.match(assignment)
        if match is None:
            err.write(f"error: --set expects VAR=value, got {assignment!r}\n")
            return EXIT_USAGE
        overrides[match.group(1)] = match.group(2)
    if execute:
        # Not at the top: only --execute needs the engine, and without it a dry run still
        # renders (test_execute_exits_2_when_the_engine_cannot_be_loaded).
        try:
            import otel_lifecycle_hooks.engine  # noqa: F401
        except ImportError as exc:
            err.write(f"error: --execute needs the hook engine, which cannot be loaded: {exc}\n")
            return EXIT_USAGE

    try:
        template = load_templates(list(template_paths))
    except TemplateError as exc:
        err.write(f"{exc}\n")
        return EXIT_TEMPLATE_ERROR
    except OSError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_TEMPLATE_ERROR

    context = DryRunContext.build(template, event, overrides, environ)
    previews = [preview_hook(hook, context) for hook in template.hooks_for(event)]
    _warn_unresolved(previews, event, err)
    if as_json:
        json.dump([p.as_json() for p in previews], out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        _print_previews(previews, event, out)
    if any(p.status == "error" for p in previews):
        return EXIT_TEMPLATE_ERROR
    if execute:
        return _execute(template, context, err)
    return EXIT_OK


# --- building the variables -----------------------------------------------------------------


@dataclass
class DryRunContext:
    """The variable layers of a dry run: examples, the template, `--set` and the environment."""

    template: Template
    event: str
    event_context: dict[str, str]
    metadata: dict[str, str]
    captured: dict[str, str]
    template_env: dict[str, str]
    environ: Mapping[str, str]
    secret_names: frozenset[str]
    set_names: frozenset[str] = frozenset()  # given with --set

    @classmethod
    def build(
        cls,
        template: Template,
        event: str,
        overrides: Mapping[str, str],
        environ: Mapping[str, str],
        now: datetime | None = None,
    ) -> DryRunContext:
        moment = now or datetime.now(UTC)
        event_context = {"PHASE": "running", **EXAMPLE_EVENT_CONTEXT.get(event, {})}
        event_context.update(EVENT=event, TIMESTAMP=format_timestamp(moment))
        metadata = {**EXAMPLE_METADATA, **template.metadata}
        captured: dict[str, str] = {}
        template_env = dict(template.env)
        environ = dict(environ)
        # Each --set goes to the layer its name belongs to, so it is rendered as a real one would;
        # any other name is set as the environment would set it, which beats `env:` defaults.
        for name, value in overrides.items():
            if name in EVENT_VARIABLES:
                event_context[name] = value
            elif name in METADATA_VARIABLES:
                metadata[name] = value
            elif _CAPTURED_NAME.match(name):
                captured[name] = value
            else:
                environ[name] = value
                template_env.pop(name, None)  # --set overrides every other source
        return cls(
            template=template,
            event=event,
            event_context=event_context,
            metadata=metadata,
            captured=captured,
            template_env=template_env,
            environ=environ,
            secret_names=secret_names_for(template),
            set_names=frozenset(overrides),
        )

    def source_of(self, name: str, layer: str | None) -> str:
        """Where a variable's value came from, in words, for `test`'s output."""
        if name in self.set_names:
            return "--set"
        if layer == "metadata" and name in self.template.metadata:
            return "the template"
        return {
            "event": "example event context",
            "metadata": "example metadata" if name != "HOOK_NAME" else "the hook",
            "captured": "captured response",
            "env": "the template's env:",
            "environ": "the environment",
            "default": "its :- default",
            None: "unset",
        }.get(layer, str(layer))

    def variables_for(self, hook: HookSpec) -> Variables:
        metadata = {"HOOK_NAME": hook.name, **self.metadata}
        return Variables(
            event=self.event_context,
            metadata=metadata,
            captured=self.captured,
            template_env=self.template_env,
            environ=self.environ,
            secret_names=self.secret_names,
        )


# --- one hook's preview ----------------------------------------------------------------------


@dataclass
class HookPreview:
    """What one hook would do, already redacted."""

    hook: HookSpec
    event: str
    status: str  # would-run | skipped | error
    reason: str = ""
    method: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    argv: list[str] | None = None
    env: dict[str, Any] = field(default_factory=dict)
    auth_note: str | None = None
    unresolved: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # variable -> where its value came from

    def as_json(self) -> dict[str, Any]:
        hook = self.hook
        entry: dict[str, Any] = {
            "hook": hook.name,
            "event": self.event,
            "action": hook.action.type,
            "status": self.status,
            "blocking": hook.blocking,
            "on_error": hook.on_error,
            "timeout": hook.timeout,
            "debounce": hook.debounce,
            "condition": hook.condition.source if hook.condition else None,
        }
        if self.reason:
            entry["reason"] = self.reason
        if self.method is not None:
            entry["request"] = {
                "method": self.method,
                "url": self.url,
                "headers": self.headers,
                "body": _parsed_or_text(self.body),
            }
        if self.argv is not None:
            entry["command"] = {"argv": self.argv, "env": self.env}
        if hook.action.auth.type != "none" and hook.action.is_http:
            entry["auth"] = {"type": hook.action.auth.type, "note": self.auth_note}
        entry["unresolved"] = self.unresolved
        entry["warnings"] = self.warnings
        entry["sources"] = self.sources
        return entry


def preview_hook(hook: HookSpec, context: DryRunContext) -> HookPreview:
    """Evaluate the condition and render the action of `hook`, redacting every secret."""
    variables = context.variables_for(hook)
    preview = HookPreview(hook=hook, event=context.event, status="would-run")
    if hook.condition is not None and not hook.condition.evaluate(
        lambda name: variables.get(name, record=False)
    ):
        preview.status = "skipped"
        preview.reason = f"condition is false: {hook.condition.source}"
        return preview
    if hook.action.type == "python":
        # An in-process executor: nothing is rendered or sent, its method is called.
        action = hook.action
        target = action.module or action.path or "?"
        preview.reason = f"calls {target}" + (f":{action.executor}" if action.executor else "")
        return preview
    preview.sources = _sources(hook, variables, context)
    try:
        rendered = render_action(hook.action, variables)
        headers = dict(rendered.headers) if isinstance(rendered, RenderedRequest) else {}
        if isinstance(rendered, RenderedRequest):
            name, value = hook_id_header(variables, hook.name, context.event)
            headers[name] = value
    except RenderError as exc:
        preview.status = "error"
        preview.reason = str(exc)
        preview.unresolved = sorted(variables.unresolved)
        return preview
    auth = hook.action.auth if hook.action.type == "http" else AuthSpec()
    redactor = Redactor(variables.secret_values(), _secret_header_names(auth))
    if isinstance(rendered, RenderedRequest):
        preview.method = rendered.method
        preview.url = redactor.redact_url(rendered.url)
        preview.headers = redactor.redact_headers(headers)
        preview.body = _pretty_body(rendered, redactor)
        preview.auth_note = _describe_auth(auth, headers, variables, preview)
        if preview.auth_note is not None:
            preview.headers[_auth_header_name(auth)] = f"{REDACTED} ({preview.auth_note})"
    else:
        assert isinstance(rendered, RenderedCommand)
        preview.argv = [redactor.redact_text(arg) for arg in rendered.argv]
        preview.env = redactor.redact_mapping(dict(rendered.env))
        script_problem = _script_problem(hook)
        if script_problem is not None:  # `validate` warns; testing the event is an error
            preview.status = "error"
            preview.reason = script_problem
    preview.unresolved = sorted(variables.unresolved)
    return preview


def _sources(hook: HookSpec, variables: Variables, context: DryRunContext) -> dict[str, str]:
    """Every variable the action references, and where its value would come from."""
    action = hook.action
    texts = [action.url or "", action.body or "", *action.headers.values()]
    texts += [*action.command, *action.env.values()]
    sources: dict[str, str] = {}
    for text in texts:
        for piece in parse_template(text):
            if isinstance(piece, Reference) and piece.text not in sources:
                resolved = variables.resolve_reference(piece)
                layer = resolved.layer if resolved is not None else None
                sources[piece.text] = context.source_of(piece.name, layer)
    variables.unresolved.clear()  # rendering below records what is missing, once
    return sources


def _script_problem(hook: HookSpec) -> str | None:
    if hook.action.type != "script":
        return None

    return script_problem(hook.action.command)


def _secret_header_names(auth: AuthSpec) -> set[str]:
    names = set(DEFAULT_SECRET_HEADERS)
    if auth.type == "api-key-header":
        names.add(auth.header)
    return names


def _auth_header_name(auth: AuthSpec) -> str:
    return auth.header if auth.type == "api-key-header" else "Authorization"


def _describe_auth(
    auth: AuthSpec, headers: Mapping[str, str], variables: Variables, preview: HookPreview
) -> str | None:
    """How the credential header will be filled at send time; None when there is none to add."""
    if auth.type == "none":
        return None
    header = _auth_header_name(auth)
    if any(name.lower() == header.lower() for name in headers):
        return None  # the template writes the header itself; it is shown redacted
    if auth.type == "gcp-default":
        return "gcp-default token, fetched at send time"
    if auth.type == "gcp-service-account":
        source = auth.credentials_file or "$GOOGLE_APPLICATION_CREDENTIALS"
        return f"gcp-service-account token from {source}, fetched at send time"
    kind = "bearer token" if auth.type == "bearer-token" else "API key"
    if auth.token_env is None:
        return f"{kind} from the environment"
    if not variables.get(auth.token_env, record=False):
        preview.warnings.append(f"auth: ${auth.token_env} is not set; the request would be refused")
    return f"{kind} from ${auth.token_env}"


def _pretty_body(request: RenderedRequest, redactor: Redactor) -> str | None:
    if request.body is None:
        return None
    text = request.body.decode("utf-8", "replace")
    content_type = next((v for k, v in request.headers.items() if k.lower() == "content-type"), "")
    if "json" in content_type.lower():
        # Shown as written when the template's own JSON is malformed.
        with contextlib.suppress(ValueError):
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    return redactor.redact_text(text)


def _parsed_or_text(body: str | None) -> Any:
    if body is None:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body


# --- output ----------------------------------------------------------------------------------


def _warn_unresolved(previews: Sequence[HookPreview], event: str, err: TextIO) -> None:
    users: dict[str, list[str]] = {}
    for preview in previews:
        for name in preview.unresolved:
            users.setdefault(name, []).append(preview.hook.name)
        err.writelines(
            f"warning: hook {preview.hook.name}: {warning}\n" for warning in preview.warnings
        )
    for name, hooks in sorted(users.items()):
        if name.partition(".")[0] in EVENT_VARIABLES:
            # As at run time: an event variable this event does not carry (TOOL_NAME on a
            # change to idle) is simply empty, not a mistake in the template.
            err.write(
                f"note: ${{{name}}} is empty in this sample of {event} (used by"
                f" {', '.join(hooks)}); try another value with --set {name}=...\n"
            )
            continue
        err.write(
            f"warning: ${{{name}}} is not set (used by {', '.join(hooks)});"
            " it renders as an empty string\n"
        )


def _print_previews(previews: Sequence[HookPreview], event: str, out: TextIO) -> None:
    if not previews:
        out.write(f"no enabled hooks for {event}\n")
        return
    for index, preview in enumerate(previews):
        if index:
            out.write("\n")
        hook = preview.hook
        traits = [
            event,
            hook.action.type,
            f"on_error={hook.on_error}",
            f"timeout {hook.timeout:g}s",
        ]
        if hook.blocking:
            traits.insert(2, "blocking")
        if hook.debounce:
            traits.append(f"debounce {hook.debounce:g}s")
        out.write(f"hook {hook.name}  ({', '.join(traits)})\n")
        if preview.sources:
            shown = ", ".join(
                f"{name} unset" if source == "unset" else f"{name} from {source}"
                for name, source in preview.sources.items()
            )
            out.write(f"  variables: {shown}\n")
        if preview.status == "skipped":
            out.write(f"  skipped: {preview.reason}\n")
        elif preview.status == "error" and preview.argv is None:
            out.write(f"  error: {preview.reason}\n")
        elif hook.action.type == "python":
            out.write(f"  in-process executor: {preview.reason}\n")
        elif preview.argv is not None:
            out.write(f"  argv: {json.dumps(preview.argv, ensure_ascii=False)}\n")
            out.writelines(f"  env {name}={value}\n" for name, value in preview.env.items())
            out.write("  stdin: the event as one JSON object; env TRACEPARENT set at run time\n")
            if preview.status == "error":
                out.write(f"  error: {preview.reason}\n")
        else:
            out.write(f"  {preview.method} {preview.url}\n")
            out.writelines(f"  {name}: {value}\n" for name, value in preview.headers.items())
            out.write("  traceparent: (the attempt's W3C trace context, set at send time)\n")
            if preview.body is not None:
                out.write("\n")
                out.writelines(f"    {line}\n" for line in preview.body.splitlines())


# --- --execute ---------------------------------------------------------------------------


def _execute(template: Template, context: DryRunContext, err: TextIO) -> int:
    """Fire the event once through the real engine, with the dry run's variables, and report
    each hook's outcome (also recorded in the hook log and the journal)."""
    try:
        # --execute only, as above: the engine's executor, dispatcher and HTTP stack.
        from ..engine import HookEngine, SessionInfo
        from ..engine.model import Execution
        from ..engine.observers import ExecutionCallback

        # The engine reads `env:` from the template: give it the one with the --set values.
        engine = HookEngine(template._replace(env=context.template_env), environ=context.environ)
    except ImportError as exc:
        err.write(f"error: --execute needs the hook engine, which cannot be loaded: {exc}\n")
        return EXIT_USAGE
    executions: list[Execution] = []
    engine.executor.observers.add(ExecutionCallback(executions.append))
    session = SessionInfo(
        session_id=context.metadata["SESSION_ID"],
        metadata=context.metadata,
        captured=dict(context.captured),
    )
    try:
        engine.fire(context.event, session, context.event_context)
    finally:
        engine.shutdown()
    for execution in executions:
        detail = execution.error_type or (
            f"http {execution.status_code}"
            if execution.status_code is not None
            else f"exit {execution.exit_code}"
            if execution.exit_code is not None
            else ""
        )
        err.write(
            f"executed {execution.hook.name}: {execution.outcome} after {execution.attempts} "
            f"attempt(s) in {execution.duration * 1000:.0f}ms {detail} {execution.message}".rstrip()
            + "\n"
        )
    return (
        EXIT_OK
        if all(e.outcome in ("success", "skipped") for e in executions)
        else EXIT_HOOK_FAILED
    )
