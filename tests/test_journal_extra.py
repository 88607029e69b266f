"""A PostgreSQL journal without the `[postgres]` extra: one clear line naming the extra, as the
`[grpc]` and `[prometheus]` extras give, instead of a bare "No module named 'psycopg'" printed
twice and a 30 s wait; `run` says so before it starts the agent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

URL = "postgresql://hooks@127.0.0.1:1/journal"
# The package as installed without the extra: psycopg cannot be imported.
WITHOUT_PSYCOPG = (
    "import runpy, sys\n"
    "sys.modules['psycopg'] = None\n"
    "sys.argv = ['otel-lifecycle-hooks', *sys.argv[1:]]\n"
    "runpy.run_module('otel_lifecycle_hooks', run_name='__main__')\n"
)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if "LIFECYCLE_HOOKS" not in k}
    env |= {"HOME": str(tmp_path), "OTEL_SDK_DISABLED": "true"}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG, *args],
        env=env, capture_output=True, text=True, timeout=120,  # a hang guard only
    )  # fmt: skip


def test_run_refuses_before_the_agent_starts_and_names_the_extra(tmp_path: Path) -> None:
    started = tmp_path / "agent-started"
    done = _cli(tmp_path, "run", "--journal", URL, "--", "touch", str(started))
    assert done.returncode == 2, done.stderr
    assert not started.exists()
    (line,) = [line for line in done.stderr.splitlines() if "postgres" in line]
    assert "pip install 'otel-lifecycle-hooks[postgres]'" in line
    assert "No module named" not in done.stderr and "Traceback" not in done.stderr


def test_history_names_the_extra_once(tmp_path: Path) -> None:
    done = _cli(tmp_path, "history", "--journal", URL)
    assert done.returncode != 0
    assert done.stderr.count("pip install 'otel-lifecycle-hooks[postgres]'") == 1, done.stderr
    assert "import of psycopg" not in done.stderr and "Traceback" not in done.stderr
