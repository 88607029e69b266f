"""The page's Redeliver is traced as a delivery is: the `ui` process's hook span for it is in
its trace file (OTEL_* unset: the local one), linked to the original delivery, and the request
carried its `traceparent`."""

from __future__ import annotations

import json
from pathlib import Path

from otel_lifecycle_hooks.journal import Journal
from otel_lifecycle_hooks.telemetry.tracefile import read_trace_file
from tests.reliability.test_replay_traced import check_traced
from tests.ui.conftest import JournaledRun
from tests.ui.processes import start_ui
from tests.ui.test_ui_access import first_delivery, request, with_token


def test_a_redelivery_sends_a_traceparent_and_its_hook_span_reaches_the_trace_file(
    journaled_run: JournaledRun,
) -> None:
    delivery = first_delivery(journaled_run)
    journal = Journal(journaled_run.journal)
    try:
        original = journal.get(delivery)
    finally:
        journal.close()
    page = start_ui(
        journaled_run.env, "--journal", str(journaled_run.journal),
        "--template", str(journaled_run.template),
    )  # fmt: skip
    try:
        sent_before = len(journaled_run.target.requests)
        status, _, body = request(
            page,
            "POST",
            f"/api/deliveries/{delivery}/redeliver",
            {**with_token(page), "Origin": page.origin()},
        )
        assert status == 200, body
        assert json.loads(body)["outcome"]["outcome"] == "failed"
        resent = journaled_run.target.wait_for(sent_before + 1)[-1]
    finally:
        assert page.stop() == 0
    traces = Path(journaled_run.env["OTEL_LIFECYCLE_HOOKS_TRACE_DIR"])
    spans = [span for path in sorted(traces.glob("*.jsonl")) for span in read_trace_file(path)]
    hook = check_traced(spans, original, resent.headers["traceparent"])
    assert hook["attributes"]["agent.lifecycle_hook.outcome"] == "failed"
