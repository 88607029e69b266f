"""An event context variable the event does not carry renders empty without a warning (TOOL_NAME
on an activity change to idle); a name no event could define is still warned about."""

from __future__ import annotations

import logging
import sys

import pytest

from otel_lifecycle_hooks.engine.engine import HookEngine
from otel_lifecycle_hooks.engine.model import SessionInfo
from otel_lifecycle_hooks.template.loader import load_template_text

TEMPLATE = f"""
lifecycle_hooks:
  - name: activity
    on: [activity-change]
    blocking: true
    action:
      type: script
      command: ["{sys.executable}", "-c", "pass", "${{NOT_DEFINED_ANYWHERE}}"]
      env: {{TOOL: "${{TOOL_NAME}}"}}
"""


def test_only_a_variable_no_event_defines_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = HookEngine(load_template_text(TEMPLATE), journal=False, hook_log=False)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_lifecycle_hooks.engine"):
            result = engine.fire(
                "activity-change",
                SessionInfo("s-1", {"AGENT_ID": "agent-1"}),
                {"ACTIVITY": "idle", "PHASE": "running"},
            )
    finally:
        engine.shutdown(5)
    assert [execution.outcome for execution in result.executions] == ["success"]
    warnings = [record.getMessage() for record in caplog.records]
    assert warnings == ["hook activity: unresolved variables NOT_DEFINED_ANYWHERE rendered empty"]
