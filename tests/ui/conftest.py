"""Fixtures of the page's tests: a loopback hook target, a journal written by a real
supervisor run, and `ui` serving it (each a real process or server, stopped by its pid); and
journals of 100,000 deliveries on SQLite and on a real PostgreSQL, built once per session."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from otel_lifecycle_hooks.journal.schema import SCHEMA_VERSION
from tests.support.postgres import PostgresServer, ensure_installed
from tests.support.target_server import Reply, TargetServer
from tests.ui import bulk_journal
from tests.ui.processes import UiProcess, ensure_chromium, environment, run_session, start_ui

BEARER_TOKEN = "tok-ui-7c1e5b2d4a603f9a"

# A failing authenticated delivery whose journaled request carries markup.
TEMPLATE = """\
lifecycle_hooks:
  - name: report
    on: [post-start]
    action:
      type: http
      method: POST
      url: "{url}"
      auth: {{type: bearer-token, token_env: REPORT_TOKEN}}
      headers:
        Content-Type: application/json
      body: '{{"note": "<img src=x onerror=alert(1)><script>alert(2)</script>"}}'
    timeout: 5s
"""


@dataclass
class JournaledRun:
    """A journal that one real `run` wrote, its target, and the environment to read it with."""

    journal: Path
    template: Path
    target: TargetServer
    env: dict[str, str]


@pytest.fixture(scope="module")
def journaled_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JournaledRun]:
    home = tmp_path_factory.mktemp("ui-home")
    with TargetServer() as target:
        target.always("/report", Reply(503, {"Content-Type": "text/plain"}, b"down"))
        template = home / "scion-agent.yaml"
        template.write_text(TEMPLATE.format(url=target.url("/report")))
        journal = home / "journal.sqlite3"
        env = environment(home, journal, REPORT_TOKEN=BEARER_TOKEN)
        run_session(template, env, "true")
        target.wait_for(1)
        yield JournaledRun(journal, template, target, env)


@pytest.fixture(scope="module")
def ui(journaled_run: JournaledRun) -> Iterator[UiProcess]:
    page = start_ui(
        journaled_run.env,
        "--journal",
        str(journaled_run.journal),
        "--template",  # Redeliver renders only from a template the operator names
        str(journaled_run.template),
    )
    try:
        yield page
    finally:
        page.stop()


# -- a journal of many deliveries (the delivery log's tests and its benchmark) --

BULK_DELIVERIES = 100_000
# Built once per machine and schema version, then copied: each session's tests add to theirs.
BULK_CACHE = Path(__file__).resolve().parents[2] / "build" / "test-cache"


# Module-scoped: the browser's test redelivers (adds rows), the API's counts them; one
# module's changes must never reach another's, whichever runs first in a worker.
@pytest.fixture(scope="module")
def bulk_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite journal of `BULK_DELIVERIES` generated deliveries (`bulk_journal`), this
    module's own copy."""
    cached = BULK_CACHE / f"ui-journal-v{SCHEMA_VERSION}-{BULK_DELIVERIES}.sqlite3"
    if not cached.is_file():
        BULK_CACHE.mkdir(parents=True, exist_ok=True)
        building = cached.with_suffix(f".{os.getpid()}.tmp")
        building.unlink(missing_ok=True)
        bulk_journal.fill(building, BULK_DELIVERIES)
        building.replace(cached)  # whole or not at all: an interrupted build is never used
    journal = tmp_path_factory.mktemp("bulk-sqlite") / "journal.sqlite3"
    shutil.copyfile(cached, journal)
    return journal


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the page's tests of this session."""
    ensure_installed()
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="module")
def bulk_postgres(postgres_server: PostgresServer) -> str:
    """A PostgreSQL journal of `BULK_DELIVERIES` generated deliveries, this module's own; its
    URL."""
    url = postgres_server.new_database()
    bulk_journal.fill(url, BULK_DELIVERIES)
    return url


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One headless Chromium for every browser test of the session."""
    chromium = ensure_chromium()
    with sync_playwright() as playwright:
        # Debian's binary: Playwright's own browser download is never used.
        launched = playwright.chromium.launch(executable_path=str(chromium), headless=True)
        try:
            yield launched
        finally:
            launched.close()
