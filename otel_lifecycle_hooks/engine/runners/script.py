"""One attempt of a script hook: refuse a script others could rewrite from running as root,
hand it the trace context, and run it once with its JSON payload on stdin (actions/script.py).

`ScriptRunner` is this package's wire protocol; the other seeds' script protocols subclass it
(systems/runners.py): a different payload, or a different exchange altogether.
"""

from __future__ import annotations

import json
import os
from collections import ChainMap
from collections.abc import Mapping
from typing import Any, NamedTuple

from ...actions.base import AttemptResult
from ...redact import Redactor
from ...render import RenderedCommand
from ...template.model import HookSpec
from ...tracecontext import traceparent as to_traceparent
from ...variables import format_unix_timestamp
from ..gates import BadDecision, is_gate, parse_decision
from ..model import LifecycleEvent, SessionInfo
from .base import ActionServices, Attempt, OutputListener, Refusal

# Stateless, so built once: encodes every script's stdin.
_STDIN_ENCODER = json.JSONEncoder(ensure_ascii=False)


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class PreparedScript(NamedTuple):
    """A script cleared to run: who runs it, with which environment and redactor."""

    command: RenderedCommand
    env: dict[str, str]  # the command's env with TRACEPARENT added
    user: str | None  # None: this process's user
    confined: bool
    redactor: Redactor  # the secrets known now, taken out of its output


class ScriptRunner:
    """Runs script actions of this package's protocol: the event as JSON on stdin."""

    renders = True

    def attempt(self, services: ActionServices, attempt: Attempt) -> AttemptResult:
        """Run the script once (raises `Refusal` when it may not run as root)."""
        assert isinstance(attempt.rendered, RenderedCommand)
        return self.run_prepared(services, attempt, prepare(services, attempt, attempt.rendered))

    def payload(self, attempt: Attempt) -> object:
        """What the script reads on stdin."""
        return script_payload(attempt.hook, attempt.event, attempt.session)

    def run_prepared(
        self, services: ActionServices, attempt: Attempt, script: PreparedScript
    ) -> AttemptResult:
        """Run the cleared script once with `payload` on stdin."""
        stdin = _STDIN_ENCODER.encode(self.payload(attempt)).encode()
        gate = is_gate(attempt.hook, attempt.event.name)
        result = run_command(
            services,
            script,
            script.command.argv,
            stdin,
            attempt.timeout,
            services.output_listener(attempt.hook, script.redactor),
            with_tails=True,
            with_stdout=gate,
        )
        return gate_answer(result) if gate else result


def prepare(services: ActionServices, attempt: Attempt, command: RenderedCommand) -> PreparedScript:
    """Clear `command` to run for `attempt`: raises `Refusal` when a script others can
    rewrite would run as root."""
    # Imported here, not above: a template may have no script, and the script module is
    # about 1.5 ms of `run`'s start before its agent's spawn (-X importtime).
    from ...actions.script import CONFINED_CWD, confined_env, unsafe_as_root

    env = dict(command.env)
    user, confined = services.script_identity(attempt.hook)
    # Resolved on the PATH run_script will use: the hook's, else this process's (looked
    # up only when needed, as root, so the whole environment is not merged for it).
    search: Mapping[str, str] = ChainMap(env, os.environ)
    if confined:
        search = confined_env(search)
    cwd = CONFINED_CWD if confined else None
    refusal = unsafe_as_root(command.argv, search, user, cwd)
    if refusal is not None:  # a script others can rewrite never runs as root
        raise Refusal("UnsafeScript", refusal)
    traceparent = to_traceparent(attempt.span.get_span_context()) or to_traceparent(
        attempt.session.span_context
    )
    if traceparent is not None:
        env["TRACEPARENT"] = traceparent
    # The secrets known now (the script path fetches no token meanwhile) hide in its output.
    redactor = services.redactor(attempt.variables)
    return PreparedScript(command, env, user, confined, redactor)


def run_command(
    services: ActionServices,
    script: PreparedScript,
    argv: tuple[str, ...],
    stdin: bytes,
    timeout: float,
    on_output: OutputListener | None,
    *,
    with_tails: bool = False,
    with_stdout: bool = False,
) -> AttemptResult:
    """Run `argv` once as `script` was cleared to run; `with_tails` keeps the end of its
    output for the delivery history; `with_stdout` its stdout (bounded) as the response body,
    for a gate's decision to be read from."""
    from ...actions.script import run_script  # see prepare

    outcome = run_script(
        RenderedCommand(argv=argv, env=script.env, stdin=stdin),
        timeout,
        user=script.user,
        on_output=on_output,
        root_checked=True,  # refused in prepare()
        confined=script.confined,
        base_env=services.inherited_env(script.user),
    )
    result = outcome.result
    if with_stdout:
        result = result._replace(response_body=outcome.stdout.encode("utf-8"))
    if not with_tails:
        return result
    return result._replace(output=(outcome.stdout_tail, outcome.stderr_tail))


def gate_answer(result: AttemptResult) -> AttemptResult:
    """A gate script's result with the decision its stdout holds (engine/gates.py), its stdout
    not kept as a response; a `decision` it cannot read makes the attempt a permanent failure."""
    body, result = result.response_body, result._replace(response_body=None)
    if not result.ok:
        return result
    try:
        answered = parse_decision(body)
    except BadDecision as exc:
        return result._replace(
            kind="permanent", error_type="BadDecision", message=f"gate answer refused: {exc}"
        )
    return result._replace(decision=answered)


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
