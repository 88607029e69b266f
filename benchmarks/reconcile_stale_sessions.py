"""`reconcile` over many stale sessions: wall time and CPU of one pass, by `--concurrency`.

A real PostgreSQL 15 (tests/support/postgres.py), one supervisor SIGKILLed after its
registration, its session row copied N times (each sealed under the test key, each stale), then
`reconcile --concurrency C` run once per C given, each over a fresh copy, its hooks answered by
a loopback receiver. Prints one line per run; docs/fleet.md gives the figures.
Run: `python benchmarks/reconcile_stale_sessions.py [--sessions 1000] [--concurrency 1 8]`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fleet.fleet import body, deliveries, fleet_template, kill_with_agent
from tests.fleet.test_fleet_connections import RECONCILE, clone_lost_session
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.postgres import PostgresServer, ensure_installed
from tests.support.target_server import TargetServer


def one_pass(server: PostgresServer, sessions: int, concurrency: int) -> str:
    """Set up `sessions` stale sessions in a fresh database and reconcile them; a line."""
    url = server.new_database()
    with tempfile.TemporaryDirectory(prefix="reconcile-bench-") as root:
        workspace = Workspace(Path(root))
        workspace.env["OTEL_LIFECYCLE_HOOKS_JOURNAL"] = url
        try:
            with TargetServer() as receiver:
                template = fleet_template(workspace, receiver)
                pid_file = workspace.root / "agent-lost.pid"
                lost = workspace.start(
                    template, workspace.agent_command(on_term=0, pid_file=str(pid_file))
                )
                wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
                kill_with_agent(workspace, lost, pid_file)
                original = body(deliveries(receiver, "/register")[0])["session"]
                clone_lost_session(url, original, sessions)
                argv = [*RECONCILE, "--template", str(template), "--stale-after", "1s"]
                argv += ["--concurrency", str(concurrency)]
                before, started = os.times(), time.monotonic()
                done = subprocess.run(
                    argv,
                    env=workspace.env,
                    capture_output=True,
                    text=True,
                    timeout=1800,
                    check=False,
                )
                wall, after = time.monotonic() - started, os.times()
        finally:
            workspace.cleanup()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    recovered = done.stdout.count("recovered: session")
    return (
        f"{sessions} stale sessions, --concurrency {concurrency}: {wall:.1f}s wall,"
        f" {cpu:.1f}s CPU, {recovered} recovered (exit {done.returncode}),"
        f" load average {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    ensure_installed()
    server = PostgresServer()
    server.start()
    try:
        for concurrency in args.concurrency:
            print(one_pass(server, args.sessions, concurrency), flush=True)
    finally:
        server.remove()


if __name__ == "__main__":
    main()
