"""Fixtures of the page's tests: a loopback hook target, a journal written by a real
supervisor run, and `ui` serving it (each a real process or server, stopped by its pid)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.target_server import Reply, TargetServer
from tests.ui.processes import UiProcess, environment, run_session, start_ui

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
