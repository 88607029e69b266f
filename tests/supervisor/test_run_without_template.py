"""`run` with no template at all (no `--template`, no `$LIFECYCLE_HOOKS_TEMPLATE`, no
`./scion-agent.yaml`) still runs the agent, and says once that no hook will run: a template
that was meant to be found and was not is the first thing an operator must learn."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "otel_lifecycle_hooks"]


def _run(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.endswith("LIFECYCLE_HOOKS_TEMPLATE") and not key.startswith("OTEL_")
    }
    env |= {"HOME": str(tmp_path), "OTEL_SDK_DISABLED": "true"}
    return subprocess.run(
        [*CLI, "run", *flags, "--", sys.executable, "-c", "raise SystemExit(3)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard only
    )


@pytest.mark.parametrize("flags", [(), ("-v",)])
def test_a_run_without_any_template_says_so_and_still_runs_the_agent(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    done = _run(tmp_path, *flags)
    assert done.returncode == 3, done.stderr  # the agent ran, and its exit code is run's
    lines = [line for line in done.stderr.splitlines() if "no template" in line]
    assert len(lines) == 1, done.stderr
    (line,) = lines
    # It names every place looked in, so the operator can put the template where it belongs.
    assert "--template" in line and "LIFECYCLE_HOOKS_TEMPLATE" in line
    assert "scion-agent.yaml" in line


def test_quiet_keeps_the_no_template_line_off_the_terminal(tmp_path: Path) -> None:
    done = _run(tmp_path, "-q")
    assert done.returncode == 3
    assert "no template" not in done.stderr
