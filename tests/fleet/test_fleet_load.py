"""Load: 50 supervisors (5 outside the `slow` tier), each sending 10 tool-start deliveries a
second, all journaling to one PostgreSQL. Printed side by side with the same load journaled to
a SQLite file per supervisor: the send-to-receipt latency of the hooks (no timed assert: the
journal is off the hook path by construction, this shows it). Every row must be in the shared
journal at the end."""

from __future__ import annotations

import os
import resource
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleet.fleet import (
    body,
    deliveries,
    fleet_template,
    latencies_ms,
    query,
    summary,
    tool_agent,
)
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.target_server import TargetServer

RATE = 10  # deliveries per second per supervisor
SECONDS = 4
PER_SUPERVISOR = RATE * SECONDS


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    space = Workspace(tmp_path)
    space.env["OTEL_LIFECYCLE_HOOKS_HEARTBEAT"] = "1s"
    yield space
    space.cleanup()


def run_fleet(
    workspace: Workspace, journal_of: list[str], label: str, supervisors: int
) -> list[float]:
    """Start the supervisors (journal i for supervisor i), release the load, stop them all;
    the latencies of their tool-start hooks."""
    with TargetServer() as receiver:
        template = fleet_template(workspace, receiver, tools=True)
        go = workspace.root / f"go-{label}"
        plan = [{"count": PER_SUPERVISOR, "rate": RATE, "wait_for": str(go)}]
        started = time.monotonic()
        cpu_before = _cpu_seconds()
        server_cpu_before = _postgres_cpu_seconds()
        runs = [
            workspace.start(
                template,
                tool_agent(workspace, index, phases=plan, linger=str(go) + ".never"),
                "--agent-name",
                f"{label}-{index}",
                env={"OTEL_LIFECYCLE_HOOKS_JOURNAL": journal_of[index]},
            )
            for index in range(supervisors)
        ]
        # Hang guards only: on a busy 2-core machine fifty supervisors take minutes to start.
        # Sessions, not requests: a registration may be retried after a slow answer.
        wait_until(
            lambda: (
                len({body(r)["session"] for r in deliveries(receiver, "/register")}) == supervisors
            ),
            timeout=600,
            what="every supervisor's registration",
        )
        ready = time.monotonic()
        go.touch()
        wait_until(
            lambda: len(deliveries(receiver, "/tool")) >= supervisors * PER_SUPERVISOR,
            timeout=600,
            what="every tool-start delivery",
        )
        loaded = time.monotonic()
        server_cpu = _postgres_cpu_seconds() - server_cpu_before
        for run in runs:
            run.signal(signal.SIGTERM)
        for run in runs:
            assert run.wait(timeout=300) == 0, run.stderr
        stopped = time.monotonic()
        cpu = _cpu_seconds() - cpu_before
        print(
            f"\n{label}: start {ready - started:.1f}s, load {loaded - ready:.1f}s"
            f" (planned {SECONDS}s), stop {stopped - loaded:.1f}s; children's CPU {cpu:.1f}s"
            f" over {stopped - started:.1f}s wall on {os.cpu_count()} cores;"
            f" PostgreSQL's processes {server_cpu:.1f}s CPU until the load ended;"
            f" load average {os.getloadavg()[0]:.1f}"
        )
        return latencies_ms(deliveries(receiver, "/tool"))


def _postgres_cpu_seconds() -> float:
    """CPU used so far by the processes running as the PostgreSQL server's user."""
    owner = _server_uid()
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if stat.parent.stat().st_uid != owner:
                continue
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime + stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _server_uid() -> int:
    if os.geteuid() != 0:
        return os.geteuid()
    import pwd

    return pwd.getpwnam("postgres").pw_uid


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("supervisors", [5, pytest.param(50, marks=pytest.mark.slow)])
def test_supervisors_on_one_postgres_lose_no_row_and_hooks_do_not_wait_for_it(
    workspace: Workspace, postgres_url: str, supervisors: int
) -> None:
    local = [str(workspace.root / f"local-{i}.sqlite3") for i in range(supervisors)]
    without = run_fleet(workspace, local, "sqlite-each", supervisors)
    shared = run_fleet(workspace, [postgres_url] * supervisors, "postgres-shared", supervisors)
    print(f"tool-start send-to-receipt, a SQLite file each:   {summary(without)}")
    print(f"tool-start send-to-receipt, one shared PostgreSQL: {summary(shared)}")

    (count,) = query(postgres_url, "SELECT count(*) AS n FROM executions WHERE hook = 'tool'")
    assert count["n"] == supervisors * PER_SUPERVISOR
    per_session = query(
        postgres_url,
        "SELECT session_id, count(*) AS n FROM executions WHERE hook = 'tool' GROUP BY session_id",
    )
    assert sorted(row["n"] for row in per_session) == [PER_SUPERVISOR] * supervisors
    ended = query(postgres_url, "SELECT count(*) AS n FROM sessions WHERE ended_at IS NOT NULL")
    assert ended[0]["n"] == supervisors
    others = query(
        postgres_url,
        "SELECT hook, count(*) AS n FROM executions WHERE hook <> 'tool' GROUP BY hook",
    )
    assert {row["hook"]: row["n"] for row in others} == {
        "register": supervisors, "deregister": supervisors, "farewell": supervisors,
    }  # fmt: skip
