"""Journal losses are counted: writes a refusing PostgreSQL did not take, writes kept only in a
spill file, spill files adopted by the next journal, owed moments not confirmed in time
(`agent.lifecycle.journal.losses`, by kind); and a SQLite journal that cannot be written says
which session writes it lost, one by one, and counts them in the run's summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_lifecycle_hooks.journal.postgres import PostgresJournal
from otel_lifecycle_hooks.telemetry.metrics import ATTR_JOURNAL_LOSS, JOURNAL_LOSSES, JournalLosses
from tests.fleet.fleet import query
from tests.supervisor.supervised import Workspace, recorder_hook, wait_until
from tests.support.postgres import PostgresServer
from tests.support.target_server import TargetServer
from tests.ui.processes import start_ui


def refusing_url(server: PostgresServer) -> str:
    """A database whose role may hold no connection: every one is refused."""
    name = "r_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server.url(), autocommit=True) as db:
        db.execute(f"CREATE ROLE {name} LOGIN CONNECTION LIMIT 0")
        db.execute(f"CREATE DATABASE {name} OWNER {name}")
    return f"postgresql://{name}@127.0.0.1:{server.port}/{name}"


def observed(reader: InMemoryMetricReader) -> dict[str, int]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        str(point.attributes[ATTR_JOURNAL_LOSS]): int(point.value)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == JOURNAL_LOSSES
        for point in metric.data.data_points
    }


def test_a_refusing_database_spill_and_adoption_are_counted(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    spill = tmp_path / "spill"
    refused = PostgresJournal(refusing_url(postgres_server), spill_dir=spill)
    reader = InMemoryMetricReader()
    JournalLosses(refused.stats, MeterProvider(metric_readers=[reader]))
    refused.open_session("s1", agent_id="a1", agent_name="alpha", started_at=time.time())
    # The moment is the journal's (True, kept in the spill file), but not yet in the database.
    assert refused.begin_event("s1", "post-start", time.time(), wait=0.5) is True
    refused.close(timeout=0.2)
    counts = observed(reader)
    assert counts["unconfirmed"] == 1
    assert counts["failures"] >= 1
    assert counts["spilled"] == 2  # the row and its moment, left at close
    assert counts["adopted"] == 0 and counts["recovery_failed"] == 0

    # The next journal on this machine (its database answering) adopts and writes them.
    adopter = PostgresJournal(postgres_url, spill_dir=spill)
    try:
        wait_until(lambda: adopter.stats()["adopted"] == 1, what="the spill file adopted")
        (row,) = query(postgres_url, "SELECT * FROM sessions WHERE session_id = 's1'")
        assert row["post_start_at"] is not None
        assert adopter.stats()["failures"] == 0
    finally:
        adopter.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    space = Workspace(tmp_path)
    yield space
    space.cleanup()


def test_an_unwritable_sqlite_journal_reports_each_lost_session_write(
    workspace: Workspace,
) -> None:
    """Root writes through any mode bits, so the journal's folder is made a plain file: the
    journal cannot be opened (as with a read-only folder), and the owed session-end's moment
    would be lost without a word."""
    blocker = workspace.root / "journal-folder"
    blocker.write_text("not a folder")
    workspace.env["OTEL_LIFECYCLE_HOOKS_JOURNAL"] = str(blocker / "journal.sqlite3")
    with TargetServer() as receiver:
        template = workspace.template(recorder_hook(receiver.url("/hook"), ["session-end"]))
        ready = workspace.root / "ready"
        run = workspace.start(template, workspace.agent_command(on_term=0, ready_file=str(ready)))
        wait_until(ready.exists, what="the agent's start")
        run.signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 0, run.stderr
        assert receiver.requests  # the hook ran: the journal is a record, not a dependency
    stderr = run.stderr
    assert "could not update session" in stderr and "(session_end_at)" in stderr, stderr
    assert "journal losses this run: failures" in stderr, stderr


def test_history_says_when_the_journal_was_unavailable_and_writes_wait(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """Writes left in this machine's spill file while the database refused: `history` says
    they wait here, beside its 'cannot read' line, rather than showing a journal without them."""
    url = refusing_url(postgres_server)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    env.pop("LIFECYCLE_HOOKS_JOURNAL", None)
    journal = PostgresJournal(url, environ=env)
    journal.open_session("s1", agent_id="a1", agent_name="alpha", started_at=time.time())
    journal.close(timeout=0.2)
    shown = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "history", "--journal", url],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert shown.returncode == 1
    assert "cannot read the journal" in shown.stderr
    assert "unavailable: 1 spill files not written yet on this machine" in shown.stderr


def test_the_ui_names_the_writes_waiting_when_the_journal_cannot_be_read(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = refusing_url(postgres_server)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    journal = PostgresJournal(url, environ=env)
    journal.open_session("s1", agent_id="a1", agent_name="alpha", started_at=time.time())
    journal.close(timeout=0.2)
    ui = start_ui(env, "--journal", url)
    try:
        request = urllib.request.Request(
            ui.origin() + "/api/sessions", headers={"X-Lifecycle-Hooks-Token": ui.token}
        )
        with pytest.raises(urllib.error.HTTPError) as answered:
            urllib.request.urlopen(request, timeout=30)
        assert answered.value.code == 503
        error = json.load(answered.value)["error"]
        assert "the journal cannot be read" in error
        assert "1 spill files not written yet on this machine" in error
    finally:
        ui.stop()
