"""A command piped into a reader that stops early (`list T | head -1`) ends quietly: no Python
traceback on the operator's terminal, whichever command was writing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TEMPLATE = """\
lifecycle_hooks:
  - name: register-agent
    on: [post-start]
    action: {type: http, url: "http://127.0.0.1:9/agents"}
"""


def run_into_a_closed_pipe(*argv: str, home: Path) -> subprocess.CompletedProcess[str]:
    # The read end is closed before the command starts, so its first write fails with EPIPE
    # exactly as under `| head -1` once head has gone, without depending on timing.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "otel_lifecycle_hooks", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=home,
            env={**os.environ, "HOME": str(home), "NO_COLOR": "1"},
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "scion-agent.yaml"],
        ["validate", "scion-agent.yaml"],
        ["test", "scion-agent.yaml", "--event", "post-start"],
    ],
)
def test_a_reader_that_went_away_leaves_no_traceback(tmp_path: Path, argv: list[str]) -> None:
    (tmp_path / "scion-agent.yaml").write_text(TEMPLATE)
    finished = run_into_a_closed_pipe(*argv, home=tmp_path)
    assert "Traceback" not in finished.stderr
    assert "BrokenPipeError" not in finished.stderr
    assert finished.returncode == 0, finished.stderr
