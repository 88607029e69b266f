"""An unreachable collector costs `run` a short bound at exit and one clear line, instead of
the exporters' retries and their raw messages."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def closed_port() -> int:
    with socket.socket() as placeholder:  # bound, then freed: nothing listens there
        placeholder.bind(("127.0.0.1", 0))
        return int(placeholder.getsockname()[1])


def run_true(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    template = tmp_path / "agent.yaml"
    template.write_text("lifecycle_hooks: []\n")
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))},
        "HOME": str(tmp_path),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "run", "-t", str(template), "--", "true"],
        capture_output=True, text=True, env=environ, check=False, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    "bound_variable",
    ["LIFECYCLE_HOOKS_EXPORT_EXIT_TIMEOUT", "OTEL_LIFECYCLE_HOOKS_EXPORT_EXIT_TIMEOUT"],
)
def test_an_unreachable_collector_is_one_line_naming_it_and_the_bound(
    tmp_path: Path, bound_variable: str
) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    done = run_true(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, **{bound_variable: "500"})

    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    # A line of run's, as its hook lines are.
    assert lines[0].startswith(
        f"otel-lifecycle-hooks: telemetry not exported at exit: the collector at {endpoint}"
    )
    assert "within 0.5s" in lines[0] and "connection refused" in lines[0]
    assert "(LIFECYCLE_HOOKS_EXPORT_EXIT_TIMEOUT, in ms," in lines[0]  # the name to set
    assert "Transient error" not in done.stderr and "HTTPConnectionPool" not in done.stderr


def test_export_failures_while_the_session_runs_are_one_line_not_the_exporters_retries(
    tmp_path: Path,
) -> None:
    template = tmp_path / "agent.yaml"
    template.write_text("lifecycle_hooks: []\n")
    port = closed_port()
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))},
        "HOME": str(tmp_path),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        # Spans and metrics exported every 100 ms: several failed exports during the session.
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "100",
        "LIFECYCLE_HOOKS_EXPORT_EXIT_TIMEOUT": "500",
    }
    agent = [sys.executable, "-c", "import time; time.sleep(3)"]
    done = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "run", "-t", str(template), "--", *agent],
        capture_output=True, text=True, env=environ, check=False, timeout=60,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert "Transient error" not in done.stderr
    assert "Traceback" not in done.stderr
    during = [line for line in done.stderr.splitlines() if "telemetry export is failing" in line]
    assert len(during) == 1, done.stderr
    assert f"127.0.0.1:{port}" in during[0] and "connection refused" in during[0]


def test_a_traces_only_back_end_is_named_with_the_signal_it_refused_and_its_status(
    tmp_path: Path,
) -> None:
    # Phoenix and other trace stores take /v1/traces and answer /v1/metrics with 405: the line
    # names the signal refused and the answer, not "the collector refused it".
    from tests.support.target_server import Reply, TargetServer

    with TargetServer() as backend:
        backend.always("/v1/traces", Reply(200, {"Content-Type": "application/x-protobuf"}, b""))
        backend.always("/v1/metrics", Reply(405, {"Content-Type": "text/plain"}, b"no metrics"))
        done = run_true(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=backend.url("/").rstrip("/"),
            LIFECYCLE_HOOKS_EXPORT_EXIT_TIMEOUT="5000",
        )
        paths = {request.path for request in backend.requests}
    assert done.returncode == 0, done.stderr
    assert "/v1/traces" in paths and "/v1/metrics" in paths, paths
    (line,) = done.stderr.strip().splitlines()
    assert "metrics" in line and "HTTP 405" in line, line
    assert "traces" not in line.split("refused", 1)[1].split(";")[0], line
    assert "OTEL_METRICS_EXPORTER=none" in line, line  # what a traces-only back end needs
