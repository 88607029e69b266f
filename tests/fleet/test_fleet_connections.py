"""Fleet-sized use of one PostgreSQL: connections, growth and recovery at scale.

- Supervisors starting together (8; 40 and 100 in the `slow` tier) hold one connection each
  at most (their start-up recovery read and their writer share it), counted in
  `pg_stat_activity` throughout; and behind a real PgBouncer in transaction mode (8 supervisors;
  30 in the `slow` tier) the database sees no more than its pool, while every row, claim and
  read still goes through; a registration's write that waits past its lock limit there is
  written once the lock goes, never refused nor dropped.
- The sessions table stays bounded under the default retention, an unfinished owed session
  is never pruned, and a pass stopped between chunks is resumed by the next.
- The unfinished-sessions query is served by its index (EXPLAIN).
- `reconcile` over 1,000 stale sessions (50 outside the `slow` tier) recovers each exactly
  once, two reconcilers at once, each recovering several sessions side by side; the time it
  takes is printed (docs/fleet.md states it), never asserted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from otel_lifecycle_hooks.journal import rows as journal_rows
from otel_lifecycle_hooks.journal.postgres import PostgresJournal
from otel_lifecycle_hooks.journal.retention import DEFAULT_RETENTION, parse_retention
from otel_lifecycle_hooks.journal.seal import seal
from tests.fleet.fleet import body, deliveries, fleet_template, kill_with_agent, query, tool_agent
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.journal_key import JOURNAL_KEY
from tests.support.pgbouncer import PgBouncer, ensure_installed
from tests.support.postgres import PostgresServer
from tests.support.target_server import Reply, TargetServer

RECONCILE = [sys.executable, "-m", "otel_lifecycle_hooks", "reconcile"]
DEFAULT_ROWS = parse_retention(DEFAULT_RETENTION).max_rows or 0


@pytest.fixture
def heartbeat() -> str:
    """These supervisors beat once a second (the fleet conftest's default is 200 ms)."""
    return "1s"


class ConnectionCounter:
    """Samples, on a thread of its own, the client connections to `database` other than its
    own, and keeps the largest count seen."""

    def __init__(self, server_url: str, database: str) -> None:
        self.most = 0
        self.samples = 0
        self._stop = threading.Event()
        self._db = psycopg.connect(server_url, autocommit=True)
        self._database = database
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def now(self) -> int:
        row = self._db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
            (self._database,),
        ).fetchone()
        return int(row[0]) if row else 0

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.most = max(self.most, self.now())
            self.samples += 1

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        self._db.close()
        return self.most


def start_fleet(
    workspace: Workspace, receiver: TargetServer, count: int, journal_url: str
) -> list[Any]:
    """`count` supervisors on `journal_url`, their agents running until stopped; returns once
    every one has registered."""
    template = fleet_template(workspace, receiver)
    release = workspace.root / "never"
    runs = [
        workspace.start(
            template,
            tool_agent(workspace, index, linger=str(release)),
            "--agent-name",
            f"pod-{index}",
            env={"OTEL_LIFECYCLE_HOOKS_JOURNAL": journal_url},
        )
        for index in range(count)
    ]
    # Sessions, not requests: on a busy machine a registration may be retried after a slow
    # answer, and a second request of one session must not hide the last session's first.
    wait_until(
        lambda: len({body(r)["session"] for r in deliveries(receiver, "/register")}) == count,
        timeout=600,  # a hang guard: a hundred supervisors start slowly on a busy 2-core machine
        what="every supervisor's registration",
    )
    return runs


def stop_fleet(runs: list[Any]) -> None:
    """Stop every supervisor as a pod's end would (SIGTERM: pre-stop, then session-end)."""
    for run in runs:
        run.signal(signal.SIGTERM)
    for run in runs:
        assert run.wait(timeout=120) == 0, run.stderr


def assert_every_session_journaled(url: str, runs: list[Any], count: int) -> None:
    ended = query(url, "SELECT count(*) AS n FROM sessions WHERE ended_at IS NOT NULL")
    assert ended[0]["n"] == count
    hooks = query(url, "SELECT hook, count(*) AS n FROM executions GROUP BY hook")
    assert {row["hook"]: row["n"] for row in hooks} == {
        "register": count, "deregister": count, "farewell": count,
    }  # fmt: skip
    for run in runs:  # no read skipped, no write refused or left to a spill file
        for sign in ("could not read", "unreachable", "refused", "kept in"):
            assert sign not in run.stderr, run.stderr


def budget_run(workspace: Workspace, receiver: TargetServer, url: str, supervisors: int) -> None:
    database = url.rsplit("/", 1)[1]
    server_url = url.rsplit("/", 1)[0] + "/postgres"
    counter = ConnectionCounter(server_url, database)
    try:
        runs = start_fleet(workspace, receiver, supervisors, url)
        time.sleep(2)  # a few heartbeats: the steady state, not only the start
        stop_fleet(runs)
    finally:  # a failed start must not leave the sampler querying a server being removed
        most = counter.stop()
    print(f"\n{supervisors} supervisors: at most {most} connections ({counter.samples} samples)")
    assert counter.samples > 0
    assert most <= supervisors  # two each at start before: up to twice as many
    assert_every_session_journaled(url, runs, supervisors)


def test_a_few_supervisors_hold_one_connection_each_at_most(
    workspace: Workspace, receiver: TargetServer, postgres_url: str
) -> None:
    budget_run(workspace, receiver, postgres_url, 8)


@pytest.mark.slow
def test_forty_supervisors_hold_one_connection_each_at_most(
    workspace: Workspace, receiver: TargetServer, postgres_url: str
) -> None:
    budget_run(workspace, receiver, postgres_url, 40)


@pytest.mark.slow
def test_a_hundred_supervisors_hold_one_connection_each_at_most(
    workspace: Workspace, receiver: TargetServer, postgres_url: str
) -> None:
    budget_run(workspace, receiver, postgres_url, 100)


@pytest.fixture
def pgbouncer(postgres_server: PostgresServer) -> Iterator[PgBouncer]:
    ensure_installed()
    bouncer = PgBouncer(postgres_server, pool_size=5)
    bouncer.start()
    try:
        yield bouncer
    finally:
        bouncer.remove()


@pytest.mark.parametrize("supervisors", [8, pytest.param(30, marks=pytest.mark.slow)])
def test_through_pgbouncer_in_transaction_mode_the_database_sees_only_its_pool(
    workspace: Workspace,
    receiver: TargetServer,
    postgres_url: str,
    pgbouncer: PgBouncer,
    supervisors: int,
) -> None:
    # More supervisors than the pool's 5 connections, or the bound would hold trivially.
    database = postgres_url.rsplit("/", 1)[1]
    pooled = pgbouncer.url(database)
    counter = ConnectionCounter(postgres_url.rsplit("/", 1)[0] + "/postgres", database)
    # Registrations answered late, as a busy registry's (or a busy machine's) would be: every
    # one has arrived well before its supervisor knows its answer and journals it.
    receiver.always("/register", Reply(delay=0.5))
    runs = start_fleet(workspace, receiver, supervisors, pooled)
    # One pod lost after registering, recovered through the pooler: reads and claims work.
    # Lost once its registration is journaled: killed before, it would have no row for it
    # (post-start is never sent again), and the count below would be one short.
    (lost,) = {
        body(r)["session"] for r in deliveries(receiver, "/register") if body(r)["agent"] == "pod-0"
    }
    wait_until(
        lambda: query(
            pooled,  # through the pooler: a connection of its own would count against the pool
            "SELECT 1 FROM executions WHERE session_id = %s AND hook = 'register'",
            lost,
        ),
        timeout=120,  # a hang guard: the row is committed within a batch window when idle
        what="the lost pod's registration in the journal",
    )
    lost_pid = workspace.root / "agent-tool-0.pid"
    kill_with_agent(workspace, runs[0], lost_pid)
    time.sleep(1.5)  # its heartbeat grows older than --stale-after
    template = workspace.root / "scion-agent.yaml"
    reconciled = subprocess.run(
        [*RECONCILE, "--template", str(template), "--stale-after", "1s", "--json"],
        env={**workspace.env, "OTEL_LIFECYCLE_HOOKS_JOURNAL": pooled},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    stop_fleet(runs[1:])
    most = counter.stop()
    print(f"\n{supervisors} supervisors through PgBouncer: at most {most} server connections")
    assert reconciled.returncode == 0, reconciled.stderr
    reports = [json.loads(line) for line in reconciled.stdout.splitlines()]
    assert [r["action"] for r in reports] == ["recovered"], reports
    assert counter.samples > 0
    assert most <= pgbouncer.pool_size
    ended = query(postgres_url, "SELECT count(*) AS n FROM sessions WHERE ended_at IS NOT NULL")
    assert ended[0]["n"] == supervisors - 1
    recovered = query(postgres_url, "SELECT count(*) AS n FROM sessions WHERE recovered_at > 0")
    assert recovered[0]["n"] == 1
    hooks = query(postgres_url, "SELECT hook, count(*) AS n FROM executions GROUP BY hook")
    assert {row["hook"]: row["n"] for row in hooks} == {
        "register": supervisors, "deregister": supervisors, "farewell": supervisors,
    }  # fmt: skip
    for run in runs[1:]:
        for sign in ("could not read", "unreachable", "refused", "kept in"):
            assert sign not in run.stderr, run.stderr


def test_through_pgbouncer_a_registration_held_up_by_a_locked_row_is_written_once_it_goes(
    postgres_url: str, pgbouncer: PgBouncer, tmp_path: Path
) -> None:
    # A supervisor's post-start writes (its session's mark, its registration's row) meet the
    # session's row locked by another connection for longer than a write waits for a lock.
    journal = PostgresJournal(pgbouncer.url(postgres_url.rsplit("/", 1)[1]), spill_dir=tmp_path)
    try:
        journal.open_session("pod-0-session", agent_name="pod-0", started_at=1.0)
        assert journal.flush(timeout=60)
        with psycopg.connect(postgres_url) as holder:  # a transaction left open, as a frozen node's
            holder.execute("SELECT 1 FROM sessions WHERE session_id = 'pod-0-session' FOR UPDATE")
            registration = journal_rows.ExecutionRow(
                hook="register", event="post-start", outcome="success", started_at=2.0,
                session_id="pod-0-session",
            )  # fmt: skip
            # The locked row's write first: every batch holding the registration waits on it.
            journal.mark_post_start("pod-0-session", at=2.0)
            journal.record_execution(registration)
            wait_until(  # a write that met the lock is counted as a failure, or as refused
                lambda: journal.stats()["failures"] + journal.stats()["refused"] >= 1,
                timeout=120,  # a hang guard: the batch gives up on the lock after 1 s
                what="the batch to give up waiting for the locked row",
            )
            assert query(postgres_url, "SELECT hook FROM executions") == []  # rolled back whole
            holder.rollback()
        assert journal.flush(timeout=120)  # a hang guard: retried within seconds of the lock going
    finally:
        journal.close()
    assert [row["hook"] for row in query(postgres_url, "SELECT hook FROM executions")] == [
        "register"
    ]
    (session,) = query(postgres_url, "SELECT post_started_at FROM sessions")
    assert session["post_started_at"] == 2.0
    counts = journal.stats()
    assert (counts["refused"], counts["spilled"], counts["pending"]) == (0, 0, 0), counts


def insert_sessions(url: str, finished: int, unfinished: int) -> None:
    """`unfinished` owed sessions (the oldest of all), then `finished` ended ones."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "INSERT INTO sessions (session_id, started_at, post_start_at, heartbeat_at)"
            " SELECT 'owed-' || g, g, g, g FROM generate_series(1, %s) g",
            (unfinished,),
        )
        db.execute(
            "INSERT INTO sessions (session_id, started_at, post_start_at, ended_at, exit_code)"
            " SELECT 'done-' || g, 1000 + g, 1000 + g, 1001 + g, 0"
            " FROM generate_series(1, %s) g",
            (finished,),
        )


def migrated(url: str, tmp_path: Path) -> None:
    journal = PostgresJournal(url, spill_dir=tmp_path / "spill")
    assert journal.sessions(limit=1) == []  # the first read migrates the schema
    journal.close()


def count_sessions(url: str, prefix: str) -> int:
    found = query(url, "SELECT count(*) AS n FROM sessions WHERE session_id LIKE %s", prefix + "%")
    return int(found[0]["n"])


def test_the_sessions_table_stays_bounded_under_the_default_retention(
    workspace: Workspace, receiver: TargetServer, postgres_url: str, tmp_path: Path
) -> None:
    migrated(postgres_url, tmp_path)
    insert_sessions(postgres_url, finished=DEFAULT_ROWS + 3000, unfinished=3)
    release = workspace.root / "release"
    template = fleet_template(workspace, receiver)
    run = workspace.start(template, tool_agent(workspace, 0, linger=str(release)))
    try:
        # The run's retention pass at start, under the default setting (none is set here).
        wait_until(
            lambda: count_sessions(postgres_url, "done-") <= DEFAULT_ROWS,
            timeout=120,
            what="the finished sessions beyond the default bound to go",
        )
    finally:
        release.touch()
        assert run.wait(timeout=60) == 0, run.stderr
    total = query(postgres_url, "SELECT count(*) AS n FROM sessions")[0]["n"]
    assert total <= DEFAULT_ROWS + 3 + 1  # the bound, the owed ones, the run's own
    # The newest kept (the run's own among them once it was written before the pass).
    assert DEFAULT_ROWS - 1 <= count_sessions(postgres_url, "done-") <= DEFAULT_ROWS
    assert count_sessions(postgres_url, "owed-") == 3  # the oldest of all, still owed: kept


def test_a_retention_pass_stopped_between_chunks_is_resumed_by_the_next(
    postgres_url: str, tmp_path: Path
) -> None:
    migrated(postgres_url, tmp_path)
    insert_sessions(postgres_url, finished=5000, unfinished=2)
    journal = PostgresJournal(postgres_url, spill_dir=tmp_path / "spill")

    def stopped() -> bool:  # the process ends once a first chunk of sessions went
        return count_sessions(postgres_url, "done-") < 5000

    bound = parse_retention("1000rows")
    journal.apply_retention(bound, chunk=1000, stopped=stopped)
    assert count_sessions(postgres_url, "done-") == 4000  # one chunk went, the rest stays
    journal.close()
    later = PostgresJournal(postgres_url, spill_dir=tmp_path / "spill")
    later.apply_retention(bound, chunk=1000)
    later.close()
    assert count_sessions(postgres_url, "done-") == 1000
    assert count_sessions(postgres_url, "owed-") == 2


def test_the_unfinished_sessions_query_uses_its_index(postgres_url: str, tmp_path: Path) -> None:
    migrated(postgres_url, tmp_path)
    insert_sessions(postgres_url, finished=20_000, unfinished=5)
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("ANALYZE sessions")
        plan = "\n".join(
            row[0]
            for row in db.execute(
                f"EXPLAIN SELECT * FROM sessions WHERE {journal_rows.UNFINISHED}"
                " ORDER BY started_at"
            ).fetchall()
        )
    print("\n" + plan)
    assert "sessions_unfinished" in plan
    assert "Seq Scan" not in plan
    journal = PostgresJournal(postgres_url, spill_dir=tmp_path / "spill")
    assert [r.session_id for r in journal.unfinished_sessions()] == [
        f"owed-{n}" for n in range(1, 6)
    ]
    journal.close()


def clone_lost_session(url: str, session_id: str, copies: int) -> list[str]:
    """`copies` sessions like the lost `session_id` (a SIGKILLed supervisor's), each sealed
    under the test key as its supervisor would have; all stale. Their ids."""
    with psycopg.connect(url, autocommit=True) as db:
        db.row_factory = dict_row  # type: ignore[assignment]
        original = db.execute("SELECT * FROM sessions WHERE session_id = %s", (session_id,))
        row = dict(original.fetchone() or {})
        assert row, session_id
        columns = list(row)
        ids = [f"lost-{n:04d}" for n in range(copies)]
        values = []
        for clone in ids:
            copy = {**row, "session_id": clone, "heartbeat_at": row["started_at"] - 3600}
            copy["seal"] = seal(JOURNAL_KEY.encode(), journal_rows.session_row(copy))
            values.append([copy[c] for c in columns])
        with db.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO sessions ({', '.join(columns)})"
                f" VALUES ({', '.join(['%s'] * len(columns))})",
                values,
            )
        # The original is left out: its supervisor's own lost session is one more to recover.
        db.execute("UPDATE sessions SET recovered_at = 1 WHERE session_id = %s", (session_id,))
    return ids


@pytest.mark.parametrize("stale", [50, pytest.param(1000, marks=pytest.mark.slow)])
def test_reconcile_recovers_a_thousand_stale_sessions_each_once(
    workspace: Workspace, receiver: TargetServer, postgres_url: str, stale: int
) -> None:
    # Hooks that wait as long as the test may for an answer: a reconciler recovering one
    # session at a time cannot move on to the next while one is unanswered.
    template = fleet_template(workspace, receiver)
    template.write_text(template.read_text().replace("timeout: 30s", "timeout: 120s"))
    pid_file = workspace.root / "agent-lost.pid"
    lost = workspace.start(template, workspace.agent_command(on_term=0, pid_file=str(pid_file)))
    wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
    kill_with_agent(workspace, lost, pid_file)
    original = body(deliveries(receiver, "/register")[0])["session"]
    ids = clone_lost_session(postgres_url, original, stale)
    # The first three deregistrations are answered only once three sessions' have arrived:
    # with two reconcilers, that happens only if one of them recovers several sessions at once
    # (one at a time, each would wait on its unanswered request first).
    gate = threading.Event()
    receiver.on("/deregister", *[Reply(released_by=gate)] * 3)

    def sessions_in_flight() -> int:
        return len({body(r)["session"] for r in deliveries(receiver, "/deregister")})

    started = time.monotonic()
    reconcilers = [
        subprocess.Popen(
            [*RECONCILE, "--template", str(template), "--stale-after", "1s"],
            env=workspace.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = []
    try:
        try:
            wait_until(
                lambda: sessions_in_flight() >= 3,
                timeout=90,  # a hang guard, short of the hooks' 120 s timeout
                what="three sessions' deregistrations in flight at once",
            )
        finally:
            gate.set()
        for process in reconcilers:
            out, err = process.communicate(timeout=600)
            assert process.returncode == 0, err
            outputs.append(out)
    finally:
        for process in reconcilers:  # none outlives a failed test
            if process.poll() is None:
                process.kill()
                process.communicate(timeout=120)
    elapsed = time.monotonic() - started
    print(
        f"\nreconcile over {stale} stale sessions, two reconcilers at once (default"
        f" concurrency): {elapsed:.1f}s; "
        + ", ".join(f"{out.count('recovered: session')} by one" for out in outputs)
    )
    for path in ("/deregister", "/farewell"):
        sent = Counter(body(r)["session"] for r in deliveries(receiver, path))
        assert sent == Counter({session: 1 for session in ids}), path
    recovered = Counter(
        line.split()[2] for out in outputs for line in out.splitlines()
        if line.startswith("recovered: session")
    )  # fmt: skip
    assert recovered == Counter({session: 1 for session in ids})
    left = query(
        postgres_url,
        "SELECT count(*) AS n FROM sessions WHERE session_id LIKE 'lost-%%'"
        " AND recovered_at IS NULL",
    )
    assert left[0]["n"] == 0
