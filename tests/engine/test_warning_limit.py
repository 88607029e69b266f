"""The unresolved-variable warning is rate-limited: one line per hook and variable per interval,
the next one saying how many were suppressed, so an agent repeating an event cannot flood
stderr."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from otel_lifecycle_hooks.engine import HookEngine, SessionInfo
from otel_lifecycle_hooks.engine.warning_limit import WarningLimit, warn_unresolved
from otel_lifecycle_hooks.template.loader import load_template_text
from tests.supervisor.supervised import Workspace

log = logging.getLogger("test.warning_limit")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_is_allowed_once_per_interval_and_then_reports_what_it_held_back() -> None:
    clock = FakeClock()
    limit = WarningLimit(interval=60, clock=clock)

    assert limit.allow("a") == 0
    assert [limit.allow("a") for _ in range(5)] == [None] * 5
    assert limit.allow("b") == 0  # another key has its own budget
    clock.now += 59.9
    assert limit.allow("a") is None
    clock.now += 0.1
    assert limit.allow("a") == 6
    assert limit.allow("a") is None


def test_one_line_per_hook_and_variable_with_the_suppressed_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    limit = WarningLimit(interval=60, clock=clock)
    with caplog.at_level(logging.WARNING, logger=log.name):
        for _ in range(1000):
            warn_unresolved(log, "notify", ["REGION"], limit)
        warn_unresolved(log, "notify", ["REGION", "ZONE"], limit)  # ZONE is new: written
        warn_unresolved(log, "other-hook", ["REGION"], limit)
        clock.now += 60
        warn_unresolved(log, "notify", ["REGION"], limit)

    assert [r.getMessage() for r in caplog.records] == [
        "hook notify: unresolved variables REGION rendered empty",
        "hook notify: unresolved variables ZONE rendered empty",
        "hook other-hook: unresolved variables REGION rendered empty",
        (
            "hook notify: unresolved variables REGION rendered empty"
            " (1000 like it suppressed in the last 60s)"
        ),
    ]


def test_a_flood_of_events_through_the_engine_writes_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    template = load_template_text(
        "lifecycle_hooks:\n"
        "  - name: flood-probe\n"
        "    on: [tool-start]\n"
        "    blocking: true\n"
        "    action:\n"
        "      type: script\n"
        '      command: ["true", "${NOT_DEFINED_ANYWHERE}"]\n'
    )
    engine = HookEngine(template, journal=False, hook_log=False)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_lifecycle_hooks"):
            for _ in range(200):
                result = engine.fire("tool-start", SessionInfo("s"), {"TOOL_NAME": "Bash"})
                assert result.executions[0].outcome == "success"
    finally:
        engine.shutdown(5)
    warnings = [r.getMessage() for r in caplog.records if "NOT_DEFINED_ANYWHERE" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("hook flood-probe: unresolved variables ")


def test_under_run_a_stream_of_tool_events_writes_the_warning_once_to_stderr(
    tmp_path: Path,
) -> None:
    ws = Workspace(tmp_path)
    try:
        template = ws.template(
            "  - name: tag-tool\n"
            "    on: [tool-start]\n"
            "    action:\n"
            "      type: script\n"
            f'      command: ["{sys.executable}", "-c", "pass", "${{DEPLOY_REGION}}"]\n'
            "    blocking: true\n"
        )
        payloads = [{"hook_event_name": "PreToolUse", "tool_name": "Bash"}] * 60
        run = ws.start(template, ws.agent_command(claude=payloads, exit=0))
        assert run.wait(120) == 0, run.stderr
        executions = ws.hook_log.read_text().count("hook=tag-tool event=tool-start")
        stderr = run.stderr
    finally:
        ws.cleanup()
    assert executions == 60
    assert stderr.count("unresolved variables DEPLOY_REGION") == 1
