"""What an execution reports goes to every observer: one that raises is logged and passed
over, and a script's output lines reach only the observers that read them (with none, the
executor asks the script runner for no lines at all)."""

from __future__ import annotations

import logging
import textwrap

import pytest

from otel_lifecycle_hooks.engine.clock import FakeClock
from otel_lifecycle_hooks.engine.executor import HookExecutor
from otel_lifecycle_hooks.engine.model import Execution, LifecycleEvent
from otel_lifecycle_hooks.engine.observers import ExecutionCallback, Observers, Retry
from otel_lifecycle_hooks.redact import Redactor
from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.model import HookSpec

TEMPLATE = load_template_text(
    textwrap.dedent(
        """
        lifecycle_hooks:
          - name: tidy
            on: [tool-start]
            action:
              type: script
              command: ["true"]
        """
    )
)
HOOK = TEMPLATE.hooks[0]


class Lines:
    """An observer that reads output lines."""

    takes_output = True

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str]] = []

    def on_output(self, hook: HookSpec, stream: str, line: str) -> None:
        self.lines.append((hook.name, stream, line))

    def on_retry(self, retry: Retry) -> None: ...

    def on_execution(self, execution: Execution) -> None: ...


class Broken:
    """An observer that fails at everything."""

    takes_output = True

    def on_output(self, hook: HookSpec, stream: str, line: str) -> None:
        raise OSError("disk full")

    def on_retry(self, retry: Retry) -> None:
        raise OSError("disk full")

    def on_execution(self, execution: Execution) -> None:
        raise OSError("disk full")


def execution() -> Execution:
    event = LifecycleEvent(name="tool-start", timestamp=1.0)
    return Execution(HOOK, event, "s-1", "success", 1, 0.1, 1.0, "key")


def test_an_observer_that_raises_is_logged_and_the_others_are_still_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Execution] = []
    lines = Lines()
    observers = Observers([Broken(), ExecutionCallback(seen.append), lines])

    with caplog.at_level(logging.ERROR, logger="otel_lifecycle_hooks.engine"):
        observers.execution(execution())
        observers.output(HOOK, "stdout", "done")

    assert [e.idempotency_key for e in seen] == ["key"]
    assert lines.lines == [("tidy", "stdout", "done")]
    assert [r.getMessage() for r in caplog.records] == [
        "recording hook execution of tidy failed",
        "recording output of hook tidy failed",
    ]


def test_output_lines_go_only_to_observers_that_read_them_with_secrets_taken_out() -> None:
    quiet = HookExecutor(TEMPLATE, clock=FakeClock(), observers=[ExecutionCallback(print)])
    assert quiet.output_listener(HOOK) is None  # the script's lines are not even split

    lines = Lines()
    heard = HookExecutor(TEMPLATE, clock=FakeClock(), observers=[ExecutionCallback(print), lines])
    listener = heard.output_listener(HOOK, Redactor(frozenset({"s3cret-value"})))
    assert listener is not None
    listener("stderr", "token=s3cret-value")

    assert len(lines.lines) == 1
    name, stream, line = lines.lines[0]
    assert (name, stream) == ("tidy", "stderr")
    assert "s3cret-value" not in line
