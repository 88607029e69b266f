"""The delivery log in a real headless Chromium, on a journal of 100,000 deliveries plus one a
real supervisor run added, on SQLite and on a real PostgreSQL: filters and search kept in the
URL (a reload and a second tab show the same view), Older/Newer paging, the view of a hook,
Redeliver asked first in a dialog (cancel sends nothing, confirm sends once), the trace link,
copy as curl, relative times with the absolute UTC moment on hover, whole rows clickable with
the mouse and the keyboard, and a 420 px wide screen. Screenshots of each step are kept in
build/test-artifacts/ui/<backend>/.
"""

from __future__ import annotations

import datetime
import math
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from otel_lifecycle_hooks.journal.retention import RETENTION_ENV
from tests.support.target_server import Reply, TargetServer
from tests.ui import bulk_journal
from tests.ui.conftest import BULK_DELIVERIES
from tests.ui.processes import UiProcess, environment, run_session, start_ui

ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts" / "ui"
TRACE_URL = "http://localhost:16686/trace/{trace_id}"
BEARER = "tok-log-3e9a1c7b5d20"
# What an agent could put into a journaled header: shell syntax that must stay quoted text.
SHELL_HOSTILE = 'it\'s $(touch /tmp/pwned-by-log) `id` "x" \\ ;'

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
        X-Note: {note}
      body: '{{"ok": false}}'
    timeout: 5s
"""

expect.set_options(timeout=30_000)


@dataclass
class LogPage:
    """`ui` serving a 100,000-delivery journal that one real run added a failed delivery to."""

    ui: UiProcess
    target: TargetServer
    backend: str
    newest: int  # the real run's delivery: the journal's newest


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def log_page(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LogPage]:
    backend = request.param
    location = str(
        request.getfixturevalue("bulk_sqlite" if backend == "sqlite" else "bulk_postgres")
    )
    home = tmp_path_factory.mktemp(f"log-{backend}")
    with TargetServer() as target:
        target.always("/report", Reply(503, {"Content-Type": "text/plain"}, b"down"))
        template = home / "scion-agent.yaml"
        note = '"' + SHELL_HOSTILE.replace("\\", "\\\\").replace('"', '\\"') + '"'
        template.write_text(TEMPLATE.format(url=target.url("/report"), note=note))
        # Every row kept: the default retention would keep (and a run trim to) 50,000.
        env = environment(home, Path(location), REPORT_TOKEN=BEARER, **{RETENTION_ENV: "off"})
        env["OTEL_LIFECYCLE_HOOKS_JOURNAL"] = location
        run_session(template, env, "true")
        target.wait_for(1)
        ui = start_ui(
            env, "--journal", location, "--template", str(template), "--trace-url", TRACE_URL
        )
        try:
            yield LogPage(ui, target, backend, BULK_DELIVERIES + 1)
        finally:
            ui.stop()


def shot(page: Page, log_page: LogPage, name: str) -> None:
    folder = ARTIFACTS / log_page.backend
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def row_ids(page: Page) -> list[int]:
    return [int(i) for i in page.locator("#log tbody tr").evaluate_all(
        "rows => rows.map(r => r.getAttribute('data-delivery'))")]  # fmt: skip


def expect_first_row(page: Page, delivery_id: int) -> None:
    expect(page.locator("#log tbody tr").first).to_have_attribute("data-delivery", str(delivery_id))


def utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def test_the_delivery_log_on_100000_deliveries(browser: Browser, log_page: LogPage) -> None:
    ui, newest = log_page.ui, log_page.newest
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=ui.origin())
    try:
        page = context.new_page()
        page.goto(ui.url)
        page.locator("#to-log").click()
        expect(page.locator("#log tbody tr")).to_have_count(100)
        expect_first_row(page, newest)
        assert row_ids(page) == [newest, *range(BULK_DELIVERIES, BULK_DELIVERIES - 99, -1)]
        assert page.locator(".pager .newer").first.get_attribute("href") is None  # the newest page

        # A relative time, its absolute UTC moment on hover.
        bulk_row = page.locator(f'#log tbody tr[data-delivery="{BULK_DELIVERIES}"] time')
        expect(bulk_row).to_have_text(re.compile(r"^\d+ d ago$"))
        expect(bulk_row).to_have_attribute("title", utc(bulk_journal.START + BULK_DELIVERIES))
        expect(page.locator("#live")).to_have_text(re.compile(r"^live · \d\d:\d\d:\d\d UTC$"))
        shot(page, log_page, "01-log-first-page")

        # Older, Older, Newer: the pages of a keyset cursor, in the URL.
        page.locator(".pager .older").first.click()
        expect_first_row(page, BULK_DELIVERIES - 99)
        assert "before=" in page.url
        page.locator(".pager .older").first.click()
        expect_first_row(page, BULK_DELIVERIES - 199)
        page.locator(".pager .newer").first.click()
        expect_first_row(page, BULK_DELIVERIES - 99)
        assert row_ids(page) == list(range(BULK_DELIVERIES - 99, BULK_DELIVERIES - 199, -1))
        shot(page, log_page, "02-log-older-page")

        # Filters: applied, in the URL, kept by a reload and by a second tab.
        page.locator("#filter-status").select_option("failed")
        page.locator("#filter-hook").fill("deregister-agent")
        page.locator("#apply-filters").click()
        expected = [
            i
            for i in range(BULK_DELIVERIES, 0, -1)
            if bulk_journal.hook_of(i) == "deregister-agent"
            and bulk_journal.outcome_of(i) == "failed"
        ]
        expect_first_row(page, expected[0])
        assert row_ids(page) == expected[:100]
        assert re.search(r"#/log\?status=failed&hook=deregister-agent$", page.url), page.url
        shared = page.url
        page.reload()
        expect_first_row(page, expected[0])
        expect(page.locator("#filter-hook")).to_have_value("deregister-agent")
        expect(page.locator("#filter-status")).to_have_value("failed")
        other = context.new_page()
        other.goto(ui.url)  # a new tab is given the token once, then the shared view
        expect(other.locator("#sessions")).to_be_visible()
        other.goto(shared)
        expect_first_row(other, expected[0])
        assert row_ids(other) == expected[:100]
        other.close()
        shot(page, log_page, "03-log-filtered")

        # Agent, event and a UTC time range from the URL; a bad value said under the form.
        since, until = bulk_journal.START + 5000, bulk_journal.START + 5400
        page.goto(
            f"{ui.origin()}/#/log?agent=agent-delta-name&event=pre-stop&since={since:.0f}&until={until:.0f}"
        )
        window = [i for i in range(5399, 4999, -1)
                  if bulk_journal.agent_of(i) == "agent-delta" and i % 4 == 1]  # fmt: skip
        expect_first_row(page, window[0])
        assert row_ids(page) == window
        page.locator("#filter-since").fill("yesterday")
        page.locator("#apply-filters").click()
        expect(page.locator("#filter-error")).to_contain_text("since: 'yesterday' is not a time")
        shot(page, log_page, "04-log-bad-filter")

        # Search by idempotency key, by session id, by delivery id.
        for term, found in (
            (bulk_journal.key_of(77777), [77777]),
            (bulk_journal.session_of(1234), list(range(1300, 1200, -1))),
            ("4242", [4242]),
        ):
            page.locator("#clear-filters").click()
            # The unfiltered view drawn (its form anew) before the search is typed into it.
            expect(page.locator('#log-view[data-key="#/log"]')).to_have_count(1)
            page.locator("#filter-q").fill(term)
            page.locator("#filter-q").press("Enter")
            expect_first_row(page, found[0])
            assert row_ids(page) == found
        shot(page, log_page, "05-log-search")

        # The whole row opens the delivery: a click on a plain cell, then Enter on a row.
        page.locator('#log tbody tr[data-delivery="4242"] td').nth(3).click()
        expect(page.locator("h2")).to_contain_text("Delivery #4242")
        assert page.url.endswith("#/s/sess-000042/d/4242"), page.url
        trace = page.locator("#trace-link")
        expect(trace).to_have_attribute("href", TRACE_URL.replace("{trace_id}", f"{4242:032x}"))
        page.go_back()
        expect_first_row(page, 4242)
        page.locator('#log tbody tr[data-delivery="4242"]').focus()
        page.keyboard.press("Enter")
        expect(page.locator("h2")).to_contain_text("Delivery #4242")

        # The view of a hook: its figures over its newest 1,000 deliveries, its recent ones.
        page.locator("h2 a.hook-link").click()
        assert page.url.endswith("#/hooks/audit-log")
        hook_window = [
            i for i in range(BULK_DELIVERIES, 0, -1) if bulk_journal.hook_of(i) == "audit-log"
        ][:1000]
        durations = sorted(float(5 + (i * 37) % 400) for i in hook_window)
        succeeded = sum(1 for i in hook_window if bulk_journal.outcome_of(i) == "success")
        expect(page.locator("#success-rate")).to_have_text(f"{succeeded / 10:.1f} %")
        p95 = durations[math.ceil(0.95 * len(durations)) - 1]
        expect(page.locator("#p95")).to_have_text(f"{round(p95)} ms")
        expect(page.locator("#log tbody tr")).to_have_count(100)
        expect_first_row(page, hook_window[0])
        page.locator(".pager .older").first.click()
        expect_first_row(page, hook_window[100])
        shot(page, log_page, "06-hook-view")

        # The real run's failed delivery: copy as curl, then Redeliver asked first.
        page.goto(f"{ui.origin()}/#/log?q={newest}")
        expect_first_row(page, newest)
        page.locator("#log tbody tr").first.click()
        expect(page.locator("h2")).to_contain_text(f"Delivery #{newest}: report")
        expect(page.locator("#attempts .attempt h3 time")).to_have_count(1)
        expect(page.locator("main")).not_to_contain_text("[object")  # every moment an element
        page.locator(".curl-part summary").click()
        curl = page.locator("#curl")
        expect(curl).to_contain_text("--url")
        command = curl.inner_text()
        assert BEARER not in command and "Authorization" not in command
        words = shell_words(command)
        assert words[:5] == ["curl", "--request", "POST", "--url", log_page.target.url("/report")]
        assert words[-2:] == ["--data-raw", '{"ok": false}']
        assert f"X-Note: {SHELL_HOSTILE}" in words  # one word, whole: nothing broke out
        assert not any(BEARER in word or word.lower().startswith("authorization") for word in words)
        assert not Path("/tmp/pwned-by-log").exists()
        page.locator("#copy-curl").click()
        expect(page.locator("#curl-copied")).to_have_text(" copied")
        assert page.evaluate("navigator.clipboard.readText()") == command
        shot(page, log_page, "07-delivery-curl")

        sent = len(log_page.target.requests)
        page.locator("#redeliver").click()
        dialog = page.locator("#redeliver-dialog")
        expect(dialog).to_be_visible()
        expect(dialog.locator("#dialog-request-line")).to_have_text(
            f"POST {log_page.target.url('/report')}"
        )
        expect(dialog.locator("#dialog-left-out")).to_contain_text("the bearer-token credential")
        expect(dialog).to_contain_text('"ok": false')
        expect(dialog).not_to_contain_text(BEARER)
        shot(page, log_page, "08-redeliver-dialog")
        page.locator("#redeliver-cancel").click()
        expect(dialog).to_be_hidden()
        expect(page.locator("#redeliver-result")).to_have_count(0)
        page.locator("#redeliver").click()
        page.locator("#redeliver-confirm").click()
        expect(page.locator("#redeliver-result")).to_contain_text("Redelivered: failed (HTTP 503)")
        # The redelivery is journaled after its one request was answered: had the cancel sent
        # anything, it would be here too.
        assert len(log_page.target.wait_for(sent + 1)) == sent + 1
        assert log_page.target.requests[-1].headers.get("authorization") == f"Bearer {BEARER}"
        shot(page, log_page, "09-redelivered")

        # A phone: the header fits, the page never scrolls sideways, the table scrolls in its box.
        page.set_viewport_size({"width": 420, "height": 900})
        page.goto(f"{ui.origin()}/#/log")
        expect(page.locator("#log tbody tr")).to_have_count(100)
        sizes = page.evaluate(
            "(() => { const header = document.querySelector('header');"
            " const box = document.querySelector('.scroll');"
            " return {page: document.documentElement.scrollWidth, header: header.scrollWidth,"
            " headerBox: header.clientWidth, box: box.scrollWidth, boxWidth: box.clientWidth}; })()"
        )
        assert sizes["page"] <= 420, sizes
        assert sizes["header"] <= sizes["headerBox"], sizes
        assert sizes["box"] > sizes["boxWidth"], sizes  # the wide table scrolls inside its box
        shot(page, log_page, "10-log-at-420px")
    finally:
        context.close()


def shell_words(command: str) -> list[str]:
    """The words a POSIX shell hands the command, as it would run it (nothing is run)."""
    out = subprocess.run(
        ["sh", "-c", f"set -- {command}; printf '%s\\0' \"$@\""],
        capture_output=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    return out.decode().split("\0")[:-1]
