"""`make demo` shows a failing hook on the terminal and in the summary, and leaves nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo" / "run_demo.py"


def test_the_demo_shows_its_failing_hook_and_removes_its_temporary_folder(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))}
    env.update(HOME=str(tmp_path), TMPDIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, str(DEMO)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "hook post-status-page (task-completed) failed" in result.stdout
    summary = [line for line in result.stdout.splitlines() if "deliveries:" in line]
    assert summary and "1 failed: post-status-page 503" in summary[0], result.stdout
    assert not list(tmp_path.glob("otel-lifecycle-hooks-demo-*"))
