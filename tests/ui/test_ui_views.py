"""What the page is sent of the journal's rows."""

from __future__ import annotations

import json

from otel_lifecycle_hooks.journal import ExecutionRow, SessionRow
from otel_lifecycle_hooks.ui import views


def session(**given: object) -> SessionRow:
    fields: dict[str, object] = {
        "session_id": "s1", "agent_id": "a1", "agent_name": "agent", "template_files": ("t.yaml",),
        "pid": 1, "started_at": 100.0,
    }  # fmt: skip
    fields.update(given)
    return SessionRow(**fields)  # type: ignore[arg-type]


def execution(id: int, outcome: str = "success", **given: object) -> ExecutionRow:
    return ExecutionRow(
        hook="h", event="post-start", outcome=outcome, started_at=1.0, id=id, **given
    )  # type: ignore[arg-type]


def test_a_session_is_starting_running_ended_or_recovered() -> None:
    assert views.session_state(session()) == "starting"
    assert views.session_state(session(post_start_at=101.0)) == "running"
    assert views.session_state(session(post_start_at=101.0, ended_at=200.0)) == "ended"
    assert views.session_state(session(post_start_at=101.0, recovered_at=300.0)) == "recovered"


def test_a_session_counts_its_deliveries_by_outcome() -> None:
    shown = views.session_view(session(), [execution(1), execution(2, "failed"), execution(3)])
    assert (shown["deliveries"], shown["outcomes"]) == (3, {"success": 2, "failed": 1})


def test_the_sessions_template_text_and_variables_are_never_sent() -> None:
    shown = views.session_view(
        session(templates=({"path": "t.yaml", "text": "TEMPLATE-TEXT"},), variables={"V": "VALUE"})
    )
    text = json.dumps(shown)
    assert "TEMPLATE-TEXT" not in text and "VALUE" not in text


def test_each_delivery_lists_the_rows_that_resent_it_oldest_first() -> None:
    rows = [
        execution(4, replayed_from=1),
        execution(1, "failed"),
        execution(3, "failed", replayed_from=1),
    ]
    replays = views.replays_of(rows)
    assert [row.id for row in replays[1]] == [3, 4]
    shown = views.delivery_view(rows[1], replays[1])
    assert shown["replays"] == [
        {"id": 3, "outcome": "failed", "http_status": None},
        {"id": 4, "outcome": "success", "http_status": None},
    ]
    assert shown["failed"] is True


def test_without_attempt_rows_the_last_attempt_is_what_the_execution_row_holds() -> None:
    row = execution(
        7, "failed", attempts=4, http_status=503, error_type="http.503",
        request={"method": "POST", "url": "http://127.0.0.1:1/x", "body": "<script>"},
    )  # fmt: skip
    [attempt] = [views.summary_attempt(row)]
    assert attempt["number"] == attempt["of_attempts"] == 4
    assert attempt["response"] == {"status": 503}
    assert attempt["request"]["body"] == "<script>"
    assert attempt["summary_only"] is True


def test_anything_that_is_not_json_is_sent_as_text() -> None:
    assert views.json_ready({"a": (1, b"\xffb"), 2: object}) == {
        "a": [1, "\ufffdb"],
        "2": str(object),
    }
