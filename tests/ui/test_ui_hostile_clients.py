"""The page's server against hostile local clients: a connection that sends half a request and
holds it (slowloris) is closed by the server, a huge POST body is never read, and the token
never reaches the server's log. The server is the real `PageServer` on a loopback port."""

from __future__ import annotations

import http.client
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.journal import Journal
from otel_lifecycle_hooks.ui import server as ui_server
from otel_lifecycle_hooks.ui.server import PageServer

TOKEN = "page-token-0b8e2f6a91c4d7e3"
# How long the test's own client waits before calling the server stalled: far past the
# server's idle timeout, so the only way to reach it is a server that never closes.
CLIENT_PATIENCE = 30.0


@pytest.fixture
def page(tmp_path: Path) -> Iterator[PageServer]:
    journal = Journal(tmp_path / "journal.sqlite3")
    server = PageServer(journal, TOKEN, "127.0.0.1", 0, environ={}, idle_timeout=0.5)
    thread = threading.Thread(target=ui_server.serve, args=(server,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(CLIENT_PATIENCE)
        journal.close()


def test_a_client_that_sends_half_a_request_and_waits_is_disconnected(page: PageServer) -> None:
    with socket.create_connection(("127.0.0.1", page.port), timeout=CLIENT_PATIENCE) as held:
        held.sendall(b"GET /api/sessions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % page.port)
        try:
            closed = held.recv(65536)
        except TimeoutError:
            pytest.fail("the server kept a half-sent request open")
        # Either closed outright or answered with an error and then closed; never served.
        assert b"200 OK" not in closed
    # The server still answers a well-formed request.
    assert answer(page, "/api/sessions") == 200


def test_the_default_idle_timeout_is_seconds_not_forever(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.sqlite3")
    server = PageServer(journal, TOKEN, "127.0.0.1", 0, environ={})
    try:
        assert 0 < server.idle_timeout <= 60
    finally:
        server.server_close()
        journal.close()


def test_an_idle_keep_alive_connection_is_closed_by_the_server(page: PageServer) -> None:
    with socket.create_connection(("127.0.0.1", page.port), timeout=CLIENT_PATIENCE) as idle:
        try:
            assert idle.recv(1) == b""
        except TimeoutError:
            pytest.fail("the server kept an idle connection open")


def test_a_huge_redeliver_body_is_not_read_and_the_server_answers(page: PageServer) -> None:
    with socket.create_connection(("127.0.0.1", page.port), timeout=CLIENT_PATIENCE) as client:
        client.sendall(
            b"POST /api/deliveries/1/redeliver HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"X-Lifecycle-Hooks-Token: %s\r\nContent-Length: 100000000000\r\n\r\n"
            % (page.port, TOKEN.encode())
        )
        reply = client.recv(65536)
    assert reply.startswith(b"HTTP/1.")
    assert answer(page, "/api/sessions") == 200


def test_the_token_never_reaches_the_servers_log(
    page: PageServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="otel_lifecycle_hooks.ui"):
        connection = http.client.HTTPConnection("127.0.0.1", page.port, timeout=CLIENT_PATIENCE)
        connection.request("GET", f"/?token={TOKEN}", headers={"Host": f"127.0.0.1:{page.port}"})
        assert connection.getresponse().status == 200  # the shell; the query is ignored
        connection.close()
        assert answer(page, f"/nowhere?token={TOKEN}") == 404
    assert caplog.records, "the server logs its requests at debug level"
    assert all(TOKEN not in record.getMessage() for record in caplog.records)


def answer(page: PageServer, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", page.port, timeout=CLIENT_PATIENCE)
    try:
        connection.request(
            "GET",
            path,
            headers={"Host": f"127.0.0.1:{page.port}", "X-Lifecycle-Hooks-Token": TOKEN},
        )
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_a_huge_journaled_cell_is_sent_to_the_page_cut_to_a_bound(
    tmp_path: Path,
) -> None:
    """The agent writes 32 MB into a body, an agent name and a hook name: the page's answers
    stay small enough for a browser to show at once."""
    import json
    import sqlite3
    import time

    from otel_lifecycle_hooks.journal import AttemptRow, ExecutionRow

    path = tmp_path / "journal.sqlite3"
    journal = Journal(path)
    journal.open_session("s1", agent_id="a1", agent_name="worker")
    journal.record_execution(
        ExecutionRow(
            hook="h", event="post-start", outcome="failed", started_at=time.time(),
            session_id="s1", agent_id="a1",
            request={"method": "POST", "url": "http://127.0.0.1:9/", "headers": {}, "body": ""},
        ),
        [AttemptRow(attempt=1, started_at=time.time(), outcome="failed", response_body="")],
    )  # fmt: skip
    journal.close()
    huge = "<b>" + "x" * (32 * 1024 * 1024)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE attempts SET response_body = ?", (huge,))
        db.execute(
            "UPDATE executions SET hook = ?, request = ?",
            (huge, json.dumps({"method": "POST", "url": "http://127.0.0.1:9/", "body": huge})),
        )
        db.execute("UPDATE sessions SET agent_name = ?", (huge,))
    journal = Journal(path)
    server = PageServer(journal, TOKEN, "127.0.0.1", 0, environ={}, idle_timeout=5)
    thread = threading.Thread(target=ui_server.serve, args=(server,), daemon=True)
    thread.start()
    try:
        for path_shown in ("/api/sessions", "/api/sessions/s1/deliveries", "/api/deliveries/1"):
            connection = http.client.HTTPConnection(
                "127.0.0.1", server.port, timeout=CLIENT_PATIENCE
            )
            connection.request(
                "GET", path_shown,
                headers={"Host": f"127.0.0.1:{server.port}", "X-Lifecycle-Hooks-Token": TOKEN},
            )  # fmt: skip
            response = connection.getresponse()
            body = response.read()
            connection.close()
            assert response.status == 200, body[:300]
            assert len(body) < 1024 * 1024, path_shown
            assert b"<b>xxx" in body  # what there was is shown, cut
    finally:
        server.shutdown()
        thread.join(CLIENT_PATIENCE)
        journal.close()
