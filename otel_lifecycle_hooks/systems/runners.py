"""How the engine runs the other seeds' hooks: one `ActionRunner` per action type or script
protocol they bring, added to an engine's registry by `register_runners`.

- `python`     the-loop's in-process executors (seed 002)
- `jsonrpc`    the-loop's remote executors: one JSON-RPC 2.0 call per point (seed 002)
- `script` with protocol `core-agent`: core-agent's envelope on stdin (seed 001)
- `script` with protocol `host-v1`: `<script> <stage>`, JSONL on stdout (seed 003)
"""

from __future__ import annotations

import time
from typing import Any

from ..actions.base import AttemptResult
from ..engine.runners import ActionRegistry, ActionServices, Attempt
from ..engine.runners.base import OutputListener
from ..engine.runners.http import send_request
from ..engine.runners.script import PreparedScript, ScriptRunner, run_command
from ..render import RenderedRequest
from .core_agent import envelope
from .wire import CORE_AGENT_PROTOCOL as CORE_AGENT
from .wire import HOST_PROTOCOL as HOST_V1
from .wire import hook_context

# Every `run` registers these runners before the agent's spawn; what they run with (the-loop's
# and the host protocol's modules, the condition parser, the JSON-RPC client and the root
# guard) loads when a hook of theirs first runs: about 8 ms of each start-up otherwise
# (`python -X importtime`, loaded 2-core machine), paid by every run whose template has none.


def register_runners(registry: ActionRegistry) -> None:
    """Add the runners of the other seeds' hook systems to `registry`."""
    registry.register("python", LocalExecutorRunner())
    registry.register("jsonrpc", JsonRpcRunner())
    registry.register("script", CoreAgentScriptRunner(), protocol=CORE_AGENT)
    registry.register("script", HostProtocolRunner(), protocol=HOST_V1)


def system_context(attempt: Attempt) -> dict[str, Any]:
    """What a hook of another seed is told about the event (systems/wire.py), and its name."""
    event, session = attempt.event, attempt.session
    context = hook_context(
        event.name, session.session_id, event.fields, session.metadata, event.timestamp
    )
    context["hook_name"] = attempt.hook.name
    return context


class LocalExecutorRunner:
    """the-loop's local executor: its methods for this event's points, in-process."""

    renders = False  # nothing to render: the executor is called with the event's context

    def attempt(self, services: ActionServices, attempt: Attempt) -> AttemptResult:
        """Call the executor's methods once, within the attempt's timeout."""
        action = attempt.hook.action
        if action.path:
            # In-process: the supervisor's rights, root's when it is root. A file the agent's
            # user could write would be the agent's code run as root. (Imported for a path only:
            # about 0.4 ms before the spawn, -X importtime.)
            from ..actions.root_guard import unsafe_code_file_as_root

            refusal = unsafe_code_file_as_root(action.path)
            if refusal is not None:
                return AttemptResult("permanent", 0.0, error_type="UnsafeScript", message=refusal)
        # the-loop's executors only with its hooks (about 4 ms before the spawn; systems/__init__)
        from .the_loop import call_local

        return call_local(action, attempt.event.name, system_context(attempt), attempt.timeout)


class JsonRpcRunner:
    """the-loop's remote executor: one JSON-RPC 2.0 call per point of this event."""

    renders = True

    def attempt(self, services: ActionServices, attempt: Attempt) -> AttemptResult:
        """Call each point of the event in turn, within the attempt's timeout."""
        # With the-loop's hooks only, as above (the JSON-RPC module about 0.6 ms more).
        from ..actions.jsonrpc import read_answer, request_body
        from .the_loop import decide

        request = attempt.rendered
        assert isinstance(request, RenderedRequest)
        started = time.monotonic()
        context = system_context(attempt)
        answers: list[tuple[str, object]] = []
        exchange = None  # the last call's, for the delivery history
        points = attempt.hook.action.points.get(attempt.event.name, ())
        for request_id, point in enumerate(points, start=1):
            left = attempt.timeout - (time.monotonic() - started)
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
            answer = read_answer(send_request(services, attempt, call, left), request_id)
            if not answer.result.ok:
                return answer.result
            exchange = answer.result.exchange
            answers.append((point, answer.value))
        if not answers:
            message = f"no point of {attempt.event.name}"
            return AttemptResult("ok", 0.0, skipped=True, message=message)
        return decide(answers, time.monotonic() - started)._replace(exchange=exchange)


class CoreAgentScriptRunner(ScriptRunner):
    """core-agent's handlers: its envelope on stdin, otherwise our script protocol."""

    def payload(self, attempt: Attempt) -> object:
        """core-agent's envelope of the event."""
        event = attempt.event
        return envelope(event.name, attempt.session.session_id, dict(event.fields))


class HostProtocolRunner(ScriptRunner):
    """Seed 003: `<script> <stage>`, the request on stdin, JSONL responses and logs on
    stdout (systems/host_protocol.py runs the stages of the event)."""

    def run_prepared(
        self, services: ActionServices, attempt: Attempt, script: PreparedScript
    ) -> AttemptResult:
        """Run the stages of the event, one run of the script each."""

        def run(stage: str, stdin: bytes, left: float, on_output: OutputListener) -> AttemptResult:
            argv = (*script.command.argv, stage)
            return run_command(services, script, argv, stdin, left, on_output)

        # With hook_scripts: only, as systems/__init__ reads them (about 0.4 ms before the spawn).
        from .host_protocol import run_event

        log_line = services.output_listener(attempt.hook, script.redactor) or _ignore
        return run_event(
            attempt.hook.name,
            attempt.event,
            attempt.session,
            system_context(attempt),
            run,
            log_line,
            attempt.timeout,
        )


def _ignore(stream: str, line: str) -> None:
    """Output nobody reads."""
