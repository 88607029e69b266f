"""A fleet starting together on a PostgreSQL that refuses some of it: no registration is left
behind that nobody knows of.

Supervisors start at once against a database whose role allows few connections (PostgreSQL
refuses the rest, as "too many clients" does), each is SIGKILLed with its agent as soon as its
registration arrives, and its pod's disk (its HOME, where unwritten journal rows wait) goes
with it. A reconciler elsewhere must then deregister every registered session, or the
supervisor must have counted and reported the one it could not make durable in time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.fleet.fleet import body, deliveries, fleet_template
from tests.supervisor.supervised import Run, Workspace, wait_until
from tests.support.postgres import PostgresServer
from tests.support.target_server import TargetServer

# What a supervisor logs when it sends post-start's hooks before its row reached the database.
UNCONFIRMED = "not in the database after"
RECONCILE = [sys.executable, "-m", "otel_lifecycle_hooks", "reconcile"]


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    space = Workspace(tmp_path)
    space.env["OTEL_LIFECYCLE_HOOKS_HEARTBEAT"] = "200ms"
    yield space
    space.cleanup()


def limited_database(server: PostgresServer, connections: int) -> str:
    """A fresh database owned by a fresh role that may hold `connections` at once (a
    superuser is never limited); its URL."""
    name = "f_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server.url(), autocommit=True) as db:
        db.execute(f"CREATE ROLE {name} LOGIN CONNECTION LIMIT {connections}")
        db.execute(f"CREATE DATABASE {name} OWNER {name}")
    return f"postgresql://{name}@127.0.0.1:{server.port}/{name}"


def start_fleet(
    workspace: Workspace, template: Path, url: str, size: int, **env: str
) -> dict[str, tuple[Run, Path, Path]]:
    """`size` supervisors started together, each with a HOME of its own (its pod's disk):
    agent name -> (its run, its agent's pid file, its HOME)."""
    pods: dict[str, tuple[Run, Path, Path]] = {}
    for index in range(size):
        name = f"pod-{index}"
        home = workspace.root / name
        home.mkdir()
        pid_file = workspace.root / f"agent-{name}.pid"
        run = workspace.start(
            template,
            workspace.agent_command(on_term=0, pid_file=str(pid_file)),
            "--agent-name",
            name,
            env={"HOME": str(home), "OTEL_LIFECYCLE_HOOKS_JOURNAL": url, **env},
        )
        pods[name] = (run, pid_file, home)
    return pods


def lose_each_once_registered(
    receiver: TargetServer, pods: dict[str, tuple[Run, Path, Path]]
) -> dict[str, str]:
    """SIGKILL each pod (supervisor and agent) as soon as its registration arrives, and take
    its disk away; agent name -> the session it registered."""
    registered: dict[str, str] = {}
    deadline = time.monotonic() + 240  # a hang guard: the wait for the database is bounded
    while len(registered) < len(pods) and time.monotonic() < deadline:
        for request in deliveries(receiver, "/register"):
            sent = body(request)
            name = sent["agent"]
            if name in registered:
                continue
            registered[name] = sent["session"]
            run, pid_file, home = pods[name]
            run.signal(signal.SIGKILL)
            run.wait(timeout=120)
            if pid_file.exists():
                with contextlib.suppress(ValueError, ProcessLookupError):
                    os.killpg(int(pid_file.read_text()), signal.SIGKILL)
            shutil.rmtree(home, ignore_errors=True)  # the pod's disk goes with it
        for name, (run, _, _) in pods.items():
            assert name in registered or run.process.poll() is None, (
                f"{name} exited before registering: {run.stderr[-2000:]}"
            )
        time.sleep(0.02)
    return registered


def reconcile_all(workspace: Workspace, template: Path, url: str) -> str:
    """`reconcile` from a machine of its own (its own HOME), until nothing is left to do."""
    home = workspace.root / "reconciler"
    home.mkdir(exist_ok=True)
    env = {**workspace.env, "HOME": str(home), "OTEL_LIFECYCLE_HOOKS_JOURNAL": url}
    done = subprocess.run(
        [*RECONCILE, "--template", str(template), "--stale-after", "1s"],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def fleet_start_leaves_nothing_uncounted(
    workspace: Workspace, postgres_server: PostgresServer, size: int, connections: int
) -> None:
    url = limited_database(postgres_server, connections)
    with TargetServer() as receiver:
        template = fleet_template(workspace, receiver)
        pods = start_fleet(workspace, template, url, size)
        registered = lose_each_once_registered(receiver, pods)
        assert len(registered) == size
        time.sleep(1.5)  # every heartbeat older than --stale-after
        reconcile_all(workspace, template, url)

        deregistered = {body(r)["session"] for r in deliveries(receiver, "/deregister")}
        counted = {name for name, (run, _, _) in pods.items() if UNCONFIRMED in run.stderr}
        left_behind = sorted(
            name
            for name, session in registered.items()
            if session not in deregistered and name not in counted
        )
        refused = sum("too many connections" in run.stderr for run, _, _ in pods.values())
        print(
            f"\n{size} pods, {connections} connections: {len(deregistered)} deregistered,"
            f" {len(counted)} counted as not durable, {refused} saw the database refuse,"
            f" {len(left_behind)} left behind uncounted"
        )
        assert left_behind == [], (
            f"{len(left_behind)} registrations left behind, none counted: {left_behind[:10]}"
        )
        # Each deregistration once, and only for a session that registered.
        sessions = [body(r)["session"] for r in deliveries(receiver, "/deregister")]
        assert len(sessions) == len(set(sessions))
        assert set(sessions) <= set(registered.values())


def test_a_fleet_starting_on_a_refusing_database_leaves_no_registration_uncounted(
    workspace: Workspace, postgres_server: PostgresServer
) -> None:
    fleet_start_leaves_nothing_uncounted(workspace, postgres_server, size=50, connections=6)


def test_a_registration_past_its_wait_is_counted_and_reported(
    workspace: Workspace, postgres_server: PostgresServer
) -> None:
    """A database that refuses every connection for longer than the registration wait: the
    registration is sent, and the row kept only on the pod's disk is reported, not lost
    silently."""
    url = limited_database(postgres_server, 0)  # refuses every connection of this role
    with TargetServer() as receiver:
        template = fleet_template(workspace, receiver)
        pods = start_fleet(workspace, template, url, 1, LIFECYCLE_HOOKS_REGISTRATION_WAIT="1s")
        ((run, _, _),) = pods.values()
        wait_until(lambda: deliveries(receiver, "/register"), timeout=60, what="registration")
        run.signal(signal.SIGTERM)
        run.wait(timeout=60)
        assert UNCONFIRMED in run.stderr
        assert "journal losses this run:" in run.stderr
        assert "unconfirmed 1" in run.stderr
