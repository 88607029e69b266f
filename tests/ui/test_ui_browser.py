"""The page in a real headless Chromium (Debian's, driven by Playwright), against a real
supervisor run whose hooks reach a loopback server: sessions -> deliveries -> attempts with
request and response -> Redeliver, and a delivery journaled while the page is open appears
without a reload. Journaled markup (in a request body and in a response body an endpoint sent)
is shown as text, never run.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, expect

from tests.support.target_server import Reply, TargetServer
from tests.ui.processes import environment, run_session, start_ui, stop

# Markup an agent or an endpoint could put into what is journaled: shown, never parsed.
HOSTILE = "<img src=x onerror=window.__pwned=1><script>window.__pwned=2</script>"

TEMPLATE = """\
lifecycle_hooks:
  - name: notify
    on: [post-start]
    action:
      type: http
      method: POST
      url: "{notify}"
      headers:
        Content-Type: application/json
      body: '{{"note": "{hostile}"}}'
    on_error: retry
    timeout: 5s
  - name: audit
    on: [session-end]
    action:
      type: http
      method: POST
      url: "{audit}"
      body: '{{"session": "${{SESSION_ID}}"}}'
    timeout: 5s
"""

# Generous bounds for a loaded machine: each is how long the page may take, never a measurement.
expect.set_options(timeout=30_000)


def stray_text(page: Any) -> list[str]:
    """Text written straight into the page's main part, outside any element: a view that
    hands the DOM a null or undefined gets the words "null" / "undefined" shown there."""
    texts: list[str] = page.evaluate(
        "[...document.querySelector('main').childNodes]"
        ".filter(n => n.nodeType === Node.TEXT_NODE && n.textContent.trim() !== '')"
        ".map(n => n.textContent)"
    )
    return texts


def test_sessions_deliveries_attempts_and_a_redeliver_in_a_real_browser(
    tmp_path: Path, browser: Browser
) -> None:
    with TargetServer() as target:
        target.on(
            "/notify",
            Reply(503, {"Content-Type": "text/html"}, HOSTILE.encode()),
            Reply.json(201, '{"accepted": true}'),
        )
        target.on("/audit", Reply(500, {"Content-Type": "text/plain"}, HOSTILE.encode()))
        target.always("/audit", Reply(200, {"Content-Type": "text/plain"}, b"thanks"))
        template = tmp_path / "scion-agent.yaml"
        template.write_text(
            TEMPLATE.format(
                notify=target.url("/notify"), audit=target.url("/audit"), hostile=HOSTILE
            )
        )
        journal = tmp_path / "journal.sqlite3"
        env = environment(tmp_path, journal)
        go = tmp_path / "go"
        # The agent runs until the test lets it end, so that the page watches a live session.
        supervisor = run_session(
            template, env, f'while [ ! -e "{go}" ]; do sleep 0.1; done', wait=False
        )
        ui = None
        try:
            target.wait_for(1, timeout=60)  # post-start began: the journal and session exist
            ui = start_ui(env, "--journal", str(journal), "--template", str(template))
            page = browser.new_page()
            problems: list[Any] = []
            page.on("pageerror", lambda error: problems.append(error))
            page.on("dialog", lambda dialog: (problems.append(dialog.message), dialog.dismiss()))

            page.goto(ui.url)
            expect(page).to_have_url(re.compile(rf"^http://127\.0\.0\.1:{ui.port}/(#.*)?$"))
            sessions = page.locator("#sessions tbody tr")
            expect(sessions).to_have_count(1)
            expect(sessions.first).to_contain_text("page-agent")
            expect(sessions.first).to_contain_text("running")
            assert stray_text(page) == []
            session_id = sessions.first.get_attribute("data-session") or ""
            sessions.first.locator("a.session-link").click()
            # The breadcrumb names the session by its agent and the start of its id.
            crumb = page.locator("#crumbs a.session-crumb")
            expect(crumb).to_have_text(f"page-agent {session_id[:8]}")

            deliveries = page.locator("#deliveries tbody tr")
            notify = deliveries.filter(has_text="notify")
            expect(notify).to_contain_text("success")  # once its retry got the 201
            expect(notify.locator("td").nth(5)).to_have_text("2")  # attempts
            expect(deliveries).to_have_count(1)
            assert stray_text(page) == []

            # The agent ends: its session-end delivery is journaled while the page is open,
            # and appears without a reload.
            go.touch()
            audit = deliveries.filter(has_text="audit")
            expect(audit).to_contain_text("failed")
            expect(audit).to_contain_text("HTTP 500")
            stop(supervisor, signal_first=None, timeout=300)  # a hang guard only
            assert supervisor.returncode == 0

            # A delivery's attempts: each request as sent (redacted) and each response.
            notify.locator("a.delivery-link").click()
            expect(crumb).to_have_text(f"page-agent {session_id[:8]}")
            attempts = page.locator("#attempts .attempt")
            expect(attempts).to_have_count(2)
            first, second = attempts.nth(0), attempts.nth(1)
            expect(first.locator("h3")).to_contain_text("Attempt 1 of 2")
            assert stray_text(page) == []  # a delivery page once read "nullnull" here
            for attempt in (first, second):
                expect(attempt.locator(".request-line")).to_have_text(
                    f"POST {target.url('/notify')}"
                )
                expect(attempt.locator(".request pre.body")).to_contain_text(HOSTILE)
                expect(attempt.locator(".request .headers")).to_contain_text("application/json")
            expect(first.locator(".response-status")).to_have_text("HTTP 503")
            expect(first.locator(".response .headers")).to_contain_text("text/html")
            expect(first.locator(".response pre.body")).to_have_text(HOSTILE)
            expect(second.locator(".response-status")).to_have_text("HTTP 201")
            expect(second.locator(".response pre.body")).to_contain_text('"accepted": true')
            # The journaled markup is text: no element was made of it, no script of it ran.
            assert page.locator("main img, main script").count() == 0
            assert page.evaluate("window.__pwned") is None

            # Redeliver the failed audit: replay's code sends it again, and the new row lands.
            page.go_back()
            audit.locator("a.delivery-link").click()
            audit_id = int(page.url.rsplit("/", 1)[1])
            expect(page.locator("h2")).to_contain_text(f"Delivery #{audit_id}: audit")
            page.locator("#redeliver").click()
            page.locator("#redeliver-confirm").click()  # asked first, sent on confirm
            result = page.locator("#redeliver-result")
            expect(result).to_contain_text("Redelivered: success (HTTP 200)")
            new_link = page.locator("#redelivered-link")
            new_id = int(new_link.inner_text().rsplit("#", 1)[1])
            assert new_id > audit_id

            sent = [r for r in target.wait_for(4) if r.path == "/audit"]
            assert len(sent) == 2
            assert sent[1].headers["x-scion-hook-id"] == sent[0].headers["x-scion-hook-id"]
            assert sent[1].body == sent[0].body

            expect(page.locator(".replay-link")).to_have_text(f"#{new_id}")
            page.go_back()
            replayed = page.locator(f'#deliveries tbody tr[data-delivery="{new_id}"]')
            expect(replayed).to_contain_text("success")
            expect(replayed.locator("td").last).to_have_text(f"#{audit_id}")
            new_link_in_row = replayed.locator("a.delivery-link")
            new_link_in_row.click()
            expect(page.locator("h2")).to_contain_text(f"Delivery #{new_id}: audit")
            # The redelivery's own attempt: what was sent again and what the endpoint answered.
            redelivered = page.locator("#attempts .attempt")
            expect(redelivered).to_have_count(1)
            expect(redelivered.locator("h3")).to_contain_text("Attempt 1 of 1")
            expect(redelivered.locator(".request-line")).to_have_text(
                f"POST {target.url('/audit')}"
            )
            expect(redelivered.locator(".response-status")).to_have_text("HTTP 200")
            expect(redelivered.locator(".response pre.body")).to_have_text("thanks")
            assert problems == []
        finally:
            if ui is not None:
                assert ui.stop() == 0
            stop(supervisor)


def test_the_token_never_reaches_another_port_of_127_0_0_1_after_login(
    tmp_path: Path, browser: Browser
) -> None:
    # A server the agent runs on another port of the same address: cookies are not scoped by
    # port, so whatever a cookie held would reach it. The page steers the browser there twice:
    # markup in a response body the endpoint sent (shown as text, never fetched), and the
    # operator visiting it in the same tab after logging in.
    with TargetServer() as bystander, TargetServer() as target:
        steer = f'<img src="{bystander.url("/steered.png")}">'
        target.always("/hook", Reply(503, {"Content-Type": "text/html"}, steer.encode()))
        template = tmp_path / "scion-agent.yaml"
        template.write_text(
            "lifecycle_hooks:\n"
            "  - name: announce\n"
            "    on: [post-start]\n"
            f"    action: {{type: http, method: POST, url: '{target.url('/hook')}'}}\n"
        )
        journal = tmp_path / "journal.sqlite3"
        env = environment(tmp_path, journal)
        run_session(template, env, "true")
        target.wait_for(1)
        # The hook is now a script: Redeliver refuses to send the journaled request.
        changed = tmp_path / "changed.yaml"
        changed.write_text(
            "lifecycle_hooks:\n"
            "  - name: announce\n"
            "    on: [post-start]\n"
            "    action: {type: script, command: ['true']}\n"
        )
        ui = start_ui(env, "--journal", str(journal), "--template", str(changed))
        try:
            page = browser.new_page()
            page.goto(ui.url)
            # Logged in: the token left the address bar, the journal's data is shown.
            expect(page.locator("#sessions tbody tr")).to_have_count(1)
            assert "token" not in page.url
            page.locator("a.session-link").click()
            page.locator("a.delivery-link").click()
            expect(page.locator(".response pre.body")).to_have_text(steer)
            page.locator("#redeliver").click()
            page.locator("#redeliver-confirm").click()  # asked first, sent on confirm
            refused = page.locator("#redeliver-result")
            expect(refused).to_have_text(
                re.compile(r"^Not redelivered: hook 'announce' is now a script")
            )
            assert len(target.requests) == 1  # nothing was sent

            page.goto(bystander.url("/after-login"))
            page.goto(bystander.url("/again"))
            bystander.wait_for(2, timeout=30)
            seen = list(bystander.requests)
            # Whatever else the browser asks of it (a favicon), the steered image is not
            # among it: the body was shown as text.
            assert [r.path for r in seen if r.path != "/favicon.ico"] == [
                "/after-login",
                "/again",
            ]
            for received in seen:
                assert ui.token not in received.path
                assert ui.token.encode() not in received.body
                for name, value in received.headers.items():
                    assert ui.token not in value, name

            # The tab still holds its token (origin-scoped storage): back on the page's own
            # address, without the token, the journal is shown again.
            page.goto(ui.origin() + "/")
            expect(page.locator("#sessions tbody tr")).to_have_count(1)
            # Another tab that never opened the printed URL holds nothing and gets nothing.
            stranger = browser.new_page()
            stranger.goto(ui.origin() + "/")
            expect(stranger.locator("#main")).to_contain_text("otel-lifecycle-hooks ui")
            assert stranger.locator("#sessions").count() == 0
            # Given the printed URL in that tab (only its fragment changes: no reload), it
            # takes the token and shows the journal.
            stranger.goto(ui.url)
            expect(stranger.locator("#sessions tbody tr")).to_have_count(1)
            assert "token" not in stranger.url
        finally:
            assert ui.stop() == 0


SLOW_TEMPLATE = """\
lifecycle_hooks:
  - name: slow-start
    on: [post-start]
    action: {{type: http, method: POST, url: "{url}", body: hello}}
    on_error: retry
    timeout: 120s
"""


def test_a_retrying_delivery_is_shown_running_with_its_attempts_until_it_ends(
    tmp_path: Path, browser: Browser
) -> None:
    # The second attempt is answered only once the page has shown the delivery running, so
    # what the page shows before the end is seen, never raced.
    second_may_answer = threading.Event()
    with TargetServer() as target:
        target.on(
            "/slow",
            Reply(503, {"Content-Type": "text/plain"}, b"busy"),
            Reply(200, {"Content-Type": "text/plain"}, b"finally", released_by=second_may_answer),
        )
        template = tmp_path / "scion-agent.yaml"
        template.write_text(SLOW_TEMPLATE.format(url=target.url("/slow")))
        journal = tmp_path / "journal.sqlite3"
        env = environment(tmp_path, journal)
        go = tmp_path / "go"
        supervisor = run_session(
            template, env, f'while [ ! -e "{go}" ]; do sleep 0.1; done', wait=False
        )
        ui = None
        try:
            target.wait_for(1, timeout=60)  # the first attempt: answered 503, a retry follows
            ui = start_ui(env, "--journal", str(journal), "--template", str(template))
            page = browser.new_page()
            page.goto(ui.url)
            page.locator("a.session-link").click()
            slow = page.locator("#deliveries tbody tr").filter(has_text="slow-start")
            expect(slow.locator(".outcome")).to_have_text("running · attempt 2")
            expect(slow.locator("td").nth(5)).to_have_text("1")  # attempts made so far

            slow.locator("a.delivery-link").click()
            expect(page.locator("h2")).to_contain_text("running · attempt 2")
            expect(page.locator("#in-flight")).to_contain_text("attempt 2 of 4")
            attempts = page.locator("#attempts .attempt")
            expect(attempts).to_have_count(1)
            expect(attempts.first.locator("h3")).to_contain_text("Attempt 1")
            expect(attempts.first.locator("h3")).not_to_contain_text(" of ")
            expect(attempts.first.locator(".response-status")).to_have_text("HTTP 503")
            expect(attempts.first.locator(".response pre.body")).to_have_text("busy")
            expect(page.locator("#redeliver")).to_be_disabled()

            # The second attempt reached the endpoint and waits for its answer: still running.
            target.wait_for(2, timeout=60)
            expect(page.locator("h2")).to_contain_text("running · attempt 2")
            second_may_answer.set()

            # It ends: the same delivery, rewritten in place, followed by the 1 s poll.
            expect(page.locator("h2 .outcome")).to_have_text("success")
            expect(page.locator("#in-flight")).to_have_count(0)
            expect(attempts).to_have_count(2)
            expect(attempts.nth(1).locator("h3")).to_contain_text("Attempt 2 of 2")
            expect(attempts.nth(1).locator(".response pre.body")).to_have_text("finally")
            page.go_back()
            expect(page.locator("#deliveries tbody tr")).to_have_count(1)
            expect(slow.locator(".outcome")).to_have_text("success")
            expect(slow.locator("td").nth(5)).to_have_text("2")
        finally:
            second_may_answer.set()
            go.touch()
            stop(supervisor, signal_first=None, timeout=300)  # a hang guard only
            if ui is not None:
                assert ui.stop() == 0
        assert supervisor.returncode == 0
