"""`ui --trace-url` and `$LIFECYCLE_HOOKS_TRACE_URL`: the page's trace-UI link template,
http(s) with `{trace_id}` only; anything else is a usage error that says what would do."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

from tests.ui.conftest import JournaledRun
from tests.ui.processes import start_ui

JAEGER = "http://localhost:16686/trace/{trace_id}"


def settings(env: dict[str, str], *args: str) -> object:
    page = start_ui(env, *args)
    try:
        request = urllib.request.Request(
            page.origin() + "/api/settings", headers={"X-Lifecycle-Hooks-Token": page.token}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)
    finally:
        page.stop()


def test_the_template_comes_from_the_option_or_else_the_environment(
    journaled_run: JournaledRun,
) -> None:
    journal = ("--journal", str(journaled_run.journal))
    assert settings(journaled_run.env, *journal) == {"trace_url": None}
    from_env = {**journaled_run.env, "LIFECYCLE_HOOKS_TRACE_URL": JAEGER}
    assert settings(from_env, *journal) == {"trace_url": JAEGER}
    option = "https://console.cloud.google.com/traces/list?project=p&tid={trace_id}"
    assert settings(from_env, *journal, "--trace-url", option) == {"trace_url": option}


def test_a_template_that_is_not_http_with_the_trace_id_is_a_usage_error(
    journaled_run: JournaledRun,
) -> None:
    for given, says in (
        (["--trace-url", "javascript:alert(1)//{trace_id}"], "an http:// or https:// URL"),
        (["--trace-url", "http://localhost:16686/trace/"], "has no {trace_id}"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "otel_lifecycle_hooks", "ui", *given,
             "--journal", str(journaled_run.journal)],
            env=journaled_run.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert says in done.stderr
    env = {**journaled_run.env, "LIFECYCLE_HOOKS_TRACE_URL": "file:///{trace_id}"}
    ui = [sys.executable, "-m", "otel_lifecycle_hooks", "ui"]
    done = subprocess.run(
        [*ui, "--journal", str(journaled_run.journal)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "$LIFECYCLE_HOOKS_TRACE_URL: trace URL template 'file:///{trace_id}'" in done.stderr
