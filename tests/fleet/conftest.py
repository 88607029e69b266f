"""One real PostgreSQL server for the fleet tests (tests/support/postgres.py), each test with
a database of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres import PostgresServer, ensure_installed


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
