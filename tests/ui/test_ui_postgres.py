"""`ui --journal postgresql://...` shows a fleet's journal: a real supervisor run writes to a
real PostgreSQL server, and the page's API serves its session, delivery and attempts."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.postgres import PostgresServer, ensure_installed
from tests.support.target_server import Reply, TargetServer
from tests.ui.processes import UiProcess, environment, run_session, start_ui


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    ensure_installed()
    server = PostgresServer()
    server.start()
    try:
        yield server.new_database()
    finally:
        server.remove()


def api(ui: UiProcess, path: str) -> Any:
    request = urllib.request.Request(
        ui.origin() + path, headers={"X-Lifecycle-Hooks-Token": ui.token}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def test_the_page_reads_a_postgresql_journal(tmp_path: Path, postgres_url: str) -> None:
    with TargetServer() as target:
        target.on("/hook", Reply(502, {"Content-Type": "text/plain"}, b"bad gateway"))
        target.on("/retried", Reply(503), Reply(200, {"Content-Type": "text/plain"}, b"ok now"))
        template = tmp_path / "scion-agent.yaml"
        template.write_text(
            "lifecycle_hooks:\n"
            "  - name: announce\n"
            "    on: [post-start]\n"
            "    action:\n"
            f"      {{type: http, method: POST, url: '{target.url('/hook')}', body: hello}}\n"
            # Journaled as running at its retry wait, then rewritten in place at its end.
            "  - name: retried\n"
            "    on: [session-end]\n"
            "    on_error: retry\n"
            f"    action: {{type: http, method: POST, url: '{target.url('/retried')}'}}\n"
        )
        env = environment(tmp_path, tmp_path / "unused.sqlite3")
        env["OTEL_LIFECYCLE_HOOKS_JOURNAL"] = postgres_url
        run_session(template, env, "true")
        target.wait_for(1)
        ui = start_ui(env, "--journal", postgres_url)
        try:
            [session] = api(ui, "/api/sessions")["sessions"]
            assert (session["agent_name"], session["failed"]) == ("page-agent", 1)
            listed = api(ui, f"/api/sessions/{session['session_id']}/deliveries")["deliveries"]
            [retried, delivery] = listed  # newest first; one row for the retried delivery
            assert (retried["hook"], retried["outcome"], retried["attempts"]) == (
                "retried",
                "success",
                2,
            )
            shown = api(ui, f"/api/deliveries/{retried['id']}")["attempts"]
            assert [a["response"]["status"] for a in shown] == [503, 200]
            assert (delivery["hook"], delivery["outcome"], delivery["http_status"]) == (
                "announce",
                "failed",
                502,
            )
            [attempt] = api(ui, f"/api/deliveries/{delivery['id']}")["attempts"]
            assert attempt["request"]["body"] == "hello"
            assert attempt["response"]["body"] == "bad gateway"
        finally:
            assert ui.stop() == 0
    assert not (tmp_path / "unused.sqlite3").exists()
