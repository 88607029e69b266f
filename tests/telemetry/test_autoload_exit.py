"""Zero code (`opentelemetry-instrument`): an application that never flushes still exports the
span of a hook that was running when it exited, and nothing is recorded after shutdown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

APP = """
from opentelemetry import trace
tracer = trace.get_tracer("my-agent")
attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}
with tracer.start_as_current_span("invoke_agent planner", attributes=attributes) as span:
    span.add_event(
        "agent.lifecycle.activity_change",
        {"agent.lifecycle.event": "activity-change", "agent.activity": "thinking",
         "agent.activity.previous": "idle"},
    )
# no force_flush, no shutdown: the process just ends
"""

TEMPLATE = """
lifecycle_hooks:
  - name: on-activity
    on: [activity-change]
    action:
      type: script
      command: ["sh", "-c", "sleep 0.3; echo ran $0", "${ACTIVITY}"]
"""


def test_a_hook_running_at_exit_finishes_and_its_span_is_exported(tmp_path: Path) -> None:
    (tmp_path / "my_agent.py").write_text(APP)
    (tmp_path / "scion-agent.yaml").write_text(TEMPLATE)
    instrument = Path(sys.executable).parent / "opentelemetry-instrument"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        HOME=str(tmp_path),
        OTEL_LIFECYCLE_HOOKS_TEMPLATE="scion-agent.yaml",
        OTEL_SERVICE_NAME="my-agent",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="console",
        OTEL_LOGS_EXPORTER="none",
    )
    result = subprocess.run(
        [str(instrument), sys.executable, "my_agent.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert '"name": "invoke_agent planner"' in result.stdout
    assert '"name": "agent.lifecycle_hook on-activity"' in result.stdout, result.stdout[-2000:]
    assert "shutdown MeterProvider" not in result.stdout + result.stderr
    assert "ran thinking" in (tmp_path / "agent.log").read_text()
