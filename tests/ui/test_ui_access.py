"""The page answers its operator only: attacks on a real `ui` process over loopback.

Every request must name the server in its Host header (421 for a DNS-rebinding name). The
page's shell holds no data and is served to anyone; every data and action request needs the
printed token in a header (401 without, and a cross-site form or fetch is refused, sending
nothing). The token is never taken from a cookie or a query, and no answer sets a cookie: a
cookie would be sent to every server on 127.0.0.1, whatever its port. Secrets never reach the
page: the hook's bearer token is in neither the journal's rows nor any answer.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from otel_lifecycle_hooks.journal import Journal
from tests.ui.conftest import BEARER_TOKEN, JournaledRun
from tests.ui.processes import UiProcess, start_ui

TOKEN_HEADER = "X-Lifecycle-Hooks-Token"


def request(
    ui: UiProcess,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    host: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One raw request to the page's server, with exactly these headers (and Host)."""
    connection = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=30)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", host if host is not None else f"127.0.0.1:{ui.port}")
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", "0")
        connection.endheaders()
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def with_token(ui: UiProcess) -> dict[str, str]:
    return {TOKEN_HEADER: ui.token}


def cookie(ui: UiProcess) -> dict[str, str]:
    """The cookie an earlier version of the page set: proves nothing now."""
    return {"Cookie": f"lifecycle-hooks-ui-{ui.port}={ui.token}"}


def first_delivery(journaled_run: JournaledRun) -> int:
    journal = Journal(journaled_run.journal)
    try:
        return int(journal.executions(oldest_first=True)[0].id or 0)
    finally:
        journal.close()


def execution_count(journaled_run: JournaledRun) -> int:
    journal = Journal(journaled_run.journal)
    try:
        return len(journal.executions())
    finally:
        journal.close()


def test_the_first_line_ui_prints_is_its_loopback_url_with_the_token_in_the_fragment(
    ui: UiProcess,
) -> None:
    # The fragment is never sent to a server: the token is in no request line and no log.
    assert ui.url.startswith(f"http://127.0.0.1:{ui.port}/#token=")
    assert "?" not in ui.url
    assert len(ui.token) >= 40


def test_every_data_request_without_the_token_is_refused_with_401(ui: UiProcess) -> None:
    for path in (
        "/api/sessions", "/api/deliveries/1", "/api/sessions/x/deliveries", "/api/deliveries",
        "/api/deliveries?status=failed&q=x", "/api/hooks/report", "/api/settings",
    ):  # fmt: skip
        status, _, body = request(ui, "GET", path)
        assert status == 401, path
        assert TOKEN_HEADER.encode() in body


def test_the_shell_is_served_without_the_token_and_holds_neither_it_nor_any_data(
    ui: UiProcess, journaled_run: JournaledRun
) -> None:
    journal = Journal(journaled_run.journal)
    try:
        [session] = journal.sessions()
    finally:
        journal.close()
    for path in ("/", "/app.js", "/app.css"):
        status, headers, body = request(ui, "GET", path)
        assert status == 200, path
        assert ui.token.encode() not in body
        assert session.session_id.encode() not in body and b"page-agent" not in body
        assert "set-cookie" not in headers
        policy = headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
        assert headers["x-content-type-options"] == "nosniff"


def test_a_wrong_token_in_the_header_is_refused(ui: UiProcess) -> None:
    wrong = ui.token[:-4] + "AAAA"
    assert request(ui, "GET", "/api/sessions", {TOKEN_HEADER: wrong})[0] == 401
    assert request(ui, "GET", "/api/sessions", {TOKEN_HEADER: ""})[0] == 401


def test_the_right_token_in_a_cookie_or_a_query_is_refused(ui: UiProcess) -> None:
    # A cookie rides to every port of 127.0.0.1, a query into logs and histories.
    assert request(ui, "GET", "/api/sessions", cookie(ui))[0] == 401
    assert request(ui, "GET", f"/api/sessions?token={ui.token}")[0] == 401
    delivery_path = "/api/deliveries/1"
    assert request(ui, "GET", delivery_path, {"Cookie": f"token={ui.token}"})[0] == 401


def test_no_answer_sets_a_cookie_even_to_the_old_form_of_the_url(ui: UiProcess) -> None:
    status, headers, body = request(ui, "GET", f"/?token={ui.token}")
    assert status == 200 and body.startswith(b"<!doctype html>")
    assert "set-cookie" not in headers and ui.token.encode() not in body
    status, headers, _ = request(ui, "GET", "/api/sessions", with_token(ui))
    assert status == 200 and "set-cookie" not in headers


def test_a_host_header_other_than_this_server_is_refused_even_with_the_token(
    ui: UiProcess,
) -> None:
    # A DNS-rebinding page reaches 127.0.0.1 under the attacker's own name.
    for host in (
        f"attacker.example:{ui.port}",
        f"127.0.0.1.attacker.example:{ui.port}",
        "127.0.0.1",
        f"127.0.0.1:{ui.port + 1}",
        "",
    ):
        status, _, _ = request(ui, "GET", "/api/sessions", with_token(ui), host=host)
        assert status == 421, host
    assert (
        request(ui, "GET", "/api/sessions", with_token(ui), host=f"localhost:{ui.port}")[0] == 200
    )


def test_a_cross_site_redeliver_carrying_only_the_cookie_is_refused_and_sends_nothing(
    ui: UiProcess, journaled_run: JournaledRun
) -> None:
    delivery = first_delivery(journaled_run)
    sent_before = len(journaled_run.target.requests)
    rows_before = execution_count(journaled_run)
    # What a form on another site can send: the cookie rides along, no custom header.
    form = {
        **cookie(ui),
        "Origin": "http://attacker.example",
        "Content-Type": "application/x-www-form-urlencoded",
    }
    assert request(ui, "POST", f"/api/deliveries/{delivery}/redeliver", form)[0] == 403
    same_origin_without_header = {**cookie(ui), "Origin": ui.origin()}
    status, _, body = request(
        ui, "POST", f"/api/deliveries/{delivery}/redeliver", same_origin_without_header
    )
    assert status == 403 and TOKEN_HEADER.encode() in body
    # The header from another origin (a page that learnt the token somehow) is refused too.
    foreign = {**with_token(ui), "Origin": "http://attacker.example"}
    assert request(ui, "POST", f"/api/deliveries/{delivery}/redeliver", foreign)[0] == 403
    # A GET never redelivers.
    assert request(ui, "GET", f"/api/deliveries/{delivery}/redeliver", with_token(ui))[0] == 404
    assert len(journaled_run.target.requests) == sent_before
    assert execution_count(journaled_run) == rows_before


def test_no_cors_preflight_is_granted(ui: UiProcess) -> None:
    status, headers, _ = request(
        ui,
        "OPTIONS",
        "/api/deliveries/1/redeliver",
        {
            "Origin": "http://attacker.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": TOKEN_HEADER,
        },
    )
    assert status >= 400
    assert not [name for name in headers if name.startswith("access-control-")]


def test_the_bearer_token_never_reaches_the_page_even_through_a_redeliver(
    ui: UiProcess, journaled_run: JournaledRun
) -> None:
    delivery = first_delivery(journaled_run)
    answers: list[bytes] = []
    for path in ("/", "/app.js", "/api/sessions", f"/api/deliveries/{delivery}"):
        status, _, body = request(ui, "GET", path, with_token(ui))
        assert status == 200, path
        answers.append(body)
    [session] = json.loads(answers[2])["sessions"]
    status, _, body = request(
        ui, "GET", f"/api/sessions/{session['session_id']}/deliveries", with_token(ui)
    )
    answers.append(body)
    sent_before = len(journaled_run.target.requests)
    status, _, body = request(
        ui,
        "POST",
        f"/api/deliveries/{delivery}/redeliver",
        {**with_token(ui), "Origin": ui.origin()},
    )
    assert status == 200
    answers.append(body)
    outcome: dict[str, Any] = json.loads(body)["outcome"]
    # The redelivery really went out, with the credential the template names...
    resent = journaled_run.target.wait_for(sent_before + 1)[-1]
    assert resent.headers["authorization"] == f"Bearer {BEARER_TOKEN}"
    assert (outcome["outcome"], outcome["status_code"]) == ("failed", 503)
    # ...and yet no answer of the page holds it, nor the template's text.
    for answer in answers:
        assert BEARER_TOKEN.encode() not in answer
        assert b"token_env" not in answer


def test_ui_refuses_to_serve_on_an_address_that_is_not_loopback(
    journaled_run: JournaledRun,
) -> None:
    for host in ("0.0.0.0", "192.0.2.1", "localhost", "example.com"):
        result = subprocess.run(
            [sys.executable, "-m", "otel_lifecycle_hooks", "ui", "--host", host,
             "--journal", str(journaled_run.journal)],
            env=journaled_run.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 2, host
        assert result.stdout == ""
        assert "loopback address only" in result.stderr


def test_ui_without_a_journal_says_where_it_looked_and_exits_1(tmp_path: Path) -> None:
    missing = tmp_path / "none.sqlite3"
    result = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "ui", "--journal", str(missing)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert f"there is no journal at {missing}" in result.stderr
    assert not missing.exists()


def test_a_second_page_on_another_port_has_its_own_token(
    ui: UiProcess, journaled_run: JournaledRun
) -> None:
    other = start_ui(journaled_run.env, "--journal", str(journaled_run.journal))
    try:
        assert other.token != ui.token
        assert request(other, "GET", "/api/sessions", with_token(ui))[0] == 401
        assert request(other, "GET", "/api/sessions", with_token(other))[0] == 200
    finally:
        assert other.stop() == 0


def test_a_port_already_taken_is_a_clear_error(ui: UiProcess, journaled_run: JournaledRun) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "ui", "--port", str(ui.port),
         "--journal", str(journaled_run.journal)],
        env=journaled_run.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1 and result.stdout == ""
    assert f"cannot serve on 127.0.0.1 port {ui.port}" in result.stderr
