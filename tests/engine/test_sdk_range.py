"""The span processor observes session span events as they are added (by wrapping the SDK
span's `_add_event`, feature-detected) on the oldest and the newest SDK pyproject allows.

The oldest runs in a cached venv holding only that SDK (tests/support/sdk_venv.py), with the
package on its path; the newest is this environment's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.sdk_venv import sdk_python

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import pathlib, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.version import __version__
from otel_lifecycle_hooks import LifecycleHookProcessor

marker = pathlib.Path(sys.argv[2])
hooks = LifecycleHookProcessor.from_template(sys.argv[1], journal=False, hook_log=False)
provider = TracerProvider()
provider.add_span_processor(hooks)
span = provider.get_tracer("agent").start_span(
    "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}
)
span.add_event("agent.lifecycle.tool_start", {"agent.lifecycle.event": "tool-start"})
fired_while_open = marker.exists()
span.end()
provider.shutdown()
print(__version__, fired_while_open, "tool-start" in marker.read_text())
"""


def oldest_allowed_sdk() -> str:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in dependencies if d.startswith("opentelemetry-sdk")]
    lower = re.search(r">=\s*([0-9.]+)", spec)
    assert lower is not None, spec
    version = lower.group(1)
    return version if version.count(".") == 2 else f"{version}.0"


@pytest.mark.parametrize("which", ["oldest", "newest"])
def test_span_events_fire_hooks_while_the_session_span_is_open(tmp_path: Path, which: str) -> None:
    from opentelemetry.sdk.version import __version__ as installed

    python = str(sdk_python(oldest_allowed_sdk())) if which == "oldest" else sys.executable
    marker = tmp_path / "fired.json"
    template = tmp_path / "agent.yaml"
    template.write_text(
        "lifecycle_hooks:\n"
        "  - name: note\n"
        "    on: [tool-start]\n"
        "    blocking: true\n"
        "    action:\n"
        "      type: script\n"
        f"      command: ['sh', '-c', 'cat > {marker}']\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    done = subprocess.run(
        [python, "-c", PROBE, str(template), str(marker)],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    version, fired_while_open, saw_event = done.stdout.split()
    assert version == (oldest_allowed_sdk() if which == "oldest" else installed)
    assert (fired_while_open, saw_event) == ("True", "True")
