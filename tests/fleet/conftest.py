"""One real PostgreSQL server for the fleet tests (tests/support/postgres.py), each test with
a database of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervisor.supervised import Workspace
from tests.support.postgres import PostgresServer, ensure_installed
from tests.support.target_server import TargetServer


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    ensure_installed()
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    if postgres_server.process is None or postgres_server.process.poll() is not None:
        postgres_server.start()  # a test that stopped it left it down
    return postgres_server.new_database()


@pytest.fixture
def heartbeat() -> str:
    """The fleet's supervisors beat every 200 ms (a module may override it)."""
    return "200ms"


@pytest.fixture
def workspace(tmp_path: Path, postgres_url: str, heartbeat: str) -> Iterator[Workspace]:
    """Supervisors journaling to this test's PostgreSQL database."""
    space = Workspace(tmp_path)
    space.env["OTEL_LIFECYCLE_HOOKS_JOURNAL"] = postgres_url
    space.env["OTEL_LIFECYCLE_HOOKS_HEARTBEAT"] = heartbeat
    yield space
    space.cleanup()


@pytest.fixture
def receiver() -> Iterator[TargetServer]:
    """The fleet's hooks' endpoint: the registry."""
    with TargetServer() as server:
        yield server
