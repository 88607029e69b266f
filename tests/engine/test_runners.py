"""Action types behind a registry: the executor runs whatever runner the registry holds for a
hook's action, drives its retries and tells its observers; an action type nobody registered
is refused without an attempt; the other seeds' types are registered by systems/, which the
engine's execution modules never import."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import otel_lifecycle_hooks
from otel_lifecycle_hooks.actions.base import AttemptResult
from otel_lifecycle_hooks.engine.clock import FakeClock
from otel_lifecycle_hooks.engine.executor import HookExecutor
from otel_lifecycle_hooks.engine.model import LifecycleEvent, SessionInfo
from otel_lifecycle_hooks.engine.observers import Retry
from otel_lifecycle_hooks.engine.runners import (
    RUNNERS,
    ActionServices,
    Attempt,
    builtin_runners,
)
from otel_lifecycle_hooks.engine.runners.http import HttpRunner
from otel_lifecycle_hooks.engine.runners.script import ScriptRunner
from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.model import HookAction, HookSpec

TEMPLATE = load_template_text(
    textwrap.dedent(
        """
        lifecycle_hooks:
          - name: notify
            on: [tool-start]
            on_error: retry
            action:
              type: webhook
              url: "http://127.0.0.1:9/${TOOL_NAME}"
        """
    )
)
EVENT = LifecycleEvent(name="tool-start", fields={"TOOL_NAME": "grep"}, timestamp=1.0)


def session() -> SessionInfo:
    return SessionInfo(session_id="s-1", metadata={"AGENT_NAME": "agent"})


class ScriptedRunner:
    """Answers each attempt with the next of `results`, and keeps what it was given."""

    renders = True

    def __init__(self, *results: AttemptResult) -> None:
        self._results = list(results)
        self.attempts: list[Attempt] = []

    def attempt(self, services: ActionServices, attempt: Attempt) -> AttemptResult:
        self.attempts.append(attempt)
        return self._results.pop(0)


class Heard:
    """An observer that keeps what it hears."""

    takes_output = False

    def __init__(self) -> None:
        self.retries: list[Retry] = []
        self.outcomes: list[str] = []

    def on_output(self, hook: HookSpec, stream: str, line: str) -> None:
        raise AssertionError("no output was expected")

    def on_retry(self, retry: Retry) -> None:
        self.retries.append(retry)

    def on_execution(self, execution) -> None:  # type: ignore[no-untyped-def]
        self.outcomes.append(execution.outcome)


def test_the_executor_retries_a_registered_runner_and_tells_its_observers() -> None:
    runners = builtin_runners()
    runner = ScriptedRunner(
        AttemptResult("transient", 0.1, status_code=503, error_type="http.503"),
        AttemptResult("ok", 0.1, status_code=200),
    )
    runners.register("webhook", runner)
    heard = Heard()
    executor = HookExecutor(TEMPLATE, clock=FakeClock(), runners=runners, observers=[heard])

    execution = executor.run(TEMPLATE.hooks[0], EVENT, session())

    assert (execution.outcome, execution.attempts, execution.status_code) == ("success", 2, 200)
    # Each attempt is handed the rendered request and the same idempotency key.
    assert [a.rendered.url for a in runner.attempts] == ["http://127.0.0.1:9/grep"] * 2
    assert {a.hook_id for a in runner.attempts} == {execution.idempotency_key}
    assert [(r.attempt, r.result.status_code) for r in heard.retries] == [(1, 503)]
    assert len(heard.retries[0].attempt_rows) == 1  # the history so far goes with the retry
    assert heard.outcomes == ["success"]


def test_an_action_type_without_a_runner_is_refused_before_any_attempt() -> None:
    hook = HookSpec(
        name="local",
        on=("tool-start",),
        action=HookAction(type="python", module="somewhere", executor="Hooks"),
    )
    executor = HookExecutor(TEMPLATE, clock=FakeClock(), runners=builtin_runners())

    execution = executor.run(hook, EVENT, session())

    assert (execution.outcome, execution.error_type, execution.attempts) == (
        "refused",
        "UnknownAction",
        0,
    )
    assert "no runner is registered for python actions" in execution.message


# In a fresh interpreter: importing the systems registers their readers only; the first file
# with hooks of theirs adds their action types to the engine's registry.
REGISTERED_WHEN_READ = """
import json, sys
import otel_lifecycle_hooks.systems as systems
imported_at_once = "otel_lifecycle_hooks.engine.runners" in sys.modules
systems.load_template_text('{"hooks": {"tool-start": [{"command": "true"}]}}', "config.json")
from otel_lifecycle_hooks.engine.runners import RUNNERS
from otel_lifecycle_hooks.template.model import HookAction
found = {
    kind: type(RUNNERS.runner_for(action)).__name__
    for kind, action in {
        "python": HookAction(type="python"),
        "jsonrpc": HookAction(type="jsonrpc"),
        "core-agent": HookAction(type="script", protocol="core-agent"),
        "host-v1": HookAction(type="script", protocol="host-v1"),
    }.items()
}
print(json.dumps({"imported_at_once": imported_at_once, "found": found}))
"""


def test_the_package_runs_http_webhook_and_script_and_systems_add_the_other_seeds_types() -> None:
    builtin = builtin_runners()
    assert isinstance(builtin.runner_for(HookAction(type="http")), HttpRunner)
    assert isinstance(builtin.runner_for(HookAction(type="webhook")), HttpRunner)
    assert type(builtin.runner_for(HookAction(type="script"))) is ScriptRunner

    done = subprocess.run(
        [sys.executable, "-c", REGISTERED_WHEN_READ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    seen = json.loads(done.stdout)
    assert seen["imported_at_once"] is False  # a template of lifecycle_hooks: alone pays nothing
    assert seen["found"] == {
        "python": "LocalExecutorRunner",
        "jsonrpc": "JsonRpcRunner",
        "core-agent": "CoreAgentScriptRunner",
        "host-v1": "HostProtocolRunner",
    }
    # Code that builds such hooks itself asks for them (here, in a process that read none).
    import otel_lifecycle_hooks.systems as systems

    systems.register_action_types()
    assert type(RUNNERS.runner_for(HookAction(type="jsonrpc"))).__name__ == "JsonRpcRunner"


def test_the_execution_modules_never_import_the_other_seeds_systems() -> None:
    package = Path(otel_lifecycle_hooks.__file__).parent
    engine = package / "engine"
    modules = [
        engine / "executor.py",
        engine / "attempts.py",
        engine / "hook_span.py",
        engine / "recording.py",
        engine / "engine.py",
        *sorted((engine / "runners").glob("*.py")),
    ]
    offenders = []
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text())):  # function-level imports too
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            if any("systems" in name.split(".") for name in names):
                offenders.append(f"{module.relative_to(package)}:{node.lineno}")
    assert offenders == []
