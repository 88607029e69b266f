"""Faults in the supervisor's world, with a real `run`: a collector that is never reachable, a
journal file that is corrupt, a disk that is full. Hooks run regardless, the run ends promptly,
and a journal problem is reported once.

Signals (SIGTERM during pre-start, two SIGTERMs, an agent ignoring SIGTERM) and SIGKILL
recovery are in tests/supervisor/ (see docs/reliability.md).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from otel_lifecycle_hooks.journal import Journal
from tests.supervisor.supervised import Workspace, recorder_hook
from tests.support.target_server import TargetServer

RUN_BUDGET = 30.0  # seconds; a healthy run of this agent takes about one


def sent_events(server: TargetServer) -> list[str]:
    return [json.loads(request.body)["EVENT"] for request in list(server.requests)]


def closed_port() -> int:
    import socket

    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        return int(placeholder.getsockname()[1])


def test_an_unreachable_collector_affects_no_hook_and_the_run_ends_promptly(
    tmp_path: Path, target_server: TargetServer
) -> None:
    space = Workspace(tmp_path)
    template = space.template(
        recorder_hook(target_server.url("/hook"), events=("post-start", "session-end"))
    )
    collector = f"http://127.0.0.1:{closed_port()}"
    try:
        run = space.start(
            template,
            space.agent_command(exit=0),
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": collector,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_TIMEOUT": "500",
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_LOGS_EXPORTER": "none",
            },
        )
        code = run.wait(RUN_BUDGET)
    finally:
        space.cleanup()

    assert code == 0, run.stderr
    assert sent_events(target_server) == ["post-start", "session-end"]


def test_a_corrupt_journal_is_reported_once_and_hooks_still_run(
    tmp_path: Path, target_server: TargetServer
) -> None:
    space = Workspace(tmp_path)
    space.journal.write_bytes(b"this is not a database\n" * 512)
    template = space.template(
        recorder_hook(
            target_server.url("/hook"), events=("post-start", "task-completed", "session-end")
        )
    )
    try:
        run = space.start(
            template, space.agent_command(status=[["task_completed", "done"]], exit=0)
        )
        code = run.wait(RUN_BUDGET)
    finally:
        space.cleanup()

    assert code == 0, run.stderr
    assert sent_events(target_server) == ["post-start", "task-completed", "session-end"]
    reports = [line for line in run.stderr.splitlines() if "journal" in line and "disabled" in line]
    assert len(reports) == 1, run.stderr


def test_a_full_disk_under_the_journal_is_reported_once_and_hooks_still_run(
    tmp_path: Path, target_server: TargetServer
) -> None:
    space = Workspace(tmp_path)
    Journal(space.journal).close()  # the schema exists; the first row will not fit
    limit = space.journal.stat().st_size
    template = space.template(
        recorder_hook(
            target_server.url("/hook"), events=("post-start", "task-completed", "session-end")
        )
    )
    argv = [sys.executable, "-m", "otel_lifecycle_hooks", "run", "--agent-name", "full-disk",
            "--template", str(template),
            "--", *space.agent_command(status=[["task_completed", "done"]], exit=0)]  # fmt: skip

    def full_disk() -> None:
        # No file may grow past the journal's current size: as a full disk, for every write.
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    started = time.monotonic()
    done = subprocess.run(
        argv,
        env=space.env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_BUDGET,
        preexec_fn=full_disk,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < RUN_BUDGET
    assert sent_events(target_server) == ["post-start", "task-completed", "session-end"]
    reports = [
        line for line in done.stderr.splitlines() if "journal" in line and "disabled" in line
    ]
    assert len(reports) == 1, done.stderr
