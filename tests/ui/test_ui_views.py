"""What the page is sent of the journal's read API (`journal.views`)."""

from __future__ import annotations

import json
from typing import Any

from otel_lifecycle_hooks.journal import SessionRow
from otel_lifecycle_hooks.ui import views


def session_row(**given: object) -> SessionRow:
    fields: dict[str, object] = {
        "session_id": "s1", "agent_id": "a1", "agent_name": "agent", "template_files": ("t.yaml",),
        "pid": 1, "started_at": 100.0,
    }  # fmt: skip
    fields.update(given)
    return SessionRow(**fields)  # type: ignore[arg-type]


def delivery(id: int, outcome: str = "success", **given: Any) -> dict[str, Any]:
    return {"id": id, "hook": "h", "event": "post-start", "outcome": outcome, "attempts": 1,
            "replayed_from": None, "request": None, **given}  # fmt: skip


def test_a_listed_session_is_running_ended_recovered_or_unsupervised() -> None:
    assert views.session_state({"live": True, "ended_at": None, "host": "h"}) == "running"
    assert views.session_state({"live": False, "ended_at": 5.0, "host": "h"}) == "ended"
    assert views.session_state({"live": False, "ended_at": None, "host": "h"}) == "recovered"
    assert views.session_state({"live": False, "ended_at": None, "host": ""}) == "unsupervised"


def test_the_session_header_counts_failures_and_never_carries_template_text_or_variables() -> None:
    row = session_row(
        templates=({"path": "t.yaml", "text": "TEMPLATE-TEXT"},),
        variables={"V": "VARIABLE-VALUE"},
        ended_at=120.0,
    )
    shown = views.session_header(row, [delivery(1), delivery(2, "failed"), delivery(3, "timeout")])
    assert shown is not None
    assert (shown["state"], shown["deliveries"], shown["failed"]) == ("ended", 3, 2)
    text = json.dumps(shown)
    assert "TEMPLATE-TEXT" not in text and "VARIABLE-VALUE" not in text
    assert views.session_state({"live": True}) == "running"
    assert views.session_header(session_row(), [])["state"] == "running"  # type: ignore[index]


def test_each_delivery_lists_the_deliveries_that_resent_it_oldest_first() -> None:
    rows = [
        delivery(4, replayed_from=1),
        delivery(1, "failed"),
        delivery(3, "failed", replayed_from=1),
    ]
    replays = views.replays_of(rows)
    assert [row["id"] for row in replays[1]] == [3, 4]
    shown = views.delivery_entry(rows[1], replays[1])
    assert shown["replays"] == [
        {"id": 3, "outcome": "failed", "http_status": None},
        {"id": 4, "outcome": "success", "http_status": None},
    ]
    assert shown["failed"] is True
    listed = views.delivery_entry(delivery(5, request={"method": "POST"}), with_request=False)
    assert "request" not in listed


def test_headers_travel_as_pairs_in_order_whether_a_mapping_or_pairs_were_journaled() -> None:
    mapped = views.request_entry({"method": "POST", "headers": {"B": "2", "A": "1"}})
    paired = views.request_entry({"method": "POST", "headers": [["Set", "1"], ["Set", "2"]]})
    assert mapped is not None and paired is not None
    assert mapped["headers"] == [["B", "2"], ["A", "1"]]
    assert paired["headers"] == [["Set", "1"], ["Set", "2"]]
    assert views.request_entry(None) is None


def test_an_attempt_shows_its_request_and_the_whole_response() -> None:
    attempt = {
        "attempt": 2, "started_at": 1.0, "duration_ms": 3.0, "outcome": "failed",
        "error_type": "http.503", "message": "down",
        "request": {"method": "POST", "url": "http://127.0.0.1:1/x", "headers": [["a", "b"]],
                    "body": "<script>"},
        "response_status": 503, "response_headers": [["Retry-After", "1"]],
        "response_body": "<b>down</b>", "exit_code": None, "stdout": None, "stderr": None,
    }  # fmt: skip
    shown = views.attempt_entry(attempt, 4)
    assert (shown["number"], shown["of_attempts"], shown["summary_only"]) == (2, 4, False)
    assert shown["response"] == {
        "status": 503,
        "headers": [["Retry-After", "1"]],
        "body": "<b>down</b>",
    }
    assert shown["request"]["body"] == "<script>"


def test_without_attempt_rows_the_last_attempt_is_what_the_execution_row_holds() -> None:
    row = delivery(
        7, "failed", attempts=4, http_status=503, error_type="http.503", started_at=1.0,
        request={"method": "POST", "url": "http://127.0.0.1:1/x", "body": "<script>"},
    )  # fmt: skip
    attempt = views.summary_attempt(row)
    assert attempt["number"] == attempt["of_attempts"] == 4
    assert attempt["response"] == {"status": 503, "headers": None, "body": None}
    assert attempt["request"]["body"] == "<script>"
    assert attempt["summary_only"] is True


def test_anything_that_is_not_json_is_sent_as_text() -> None:
    assert views.json_ready({"a": (1, b"\xffb"), 2: object}) == {
        "a": [1, "\ufffdb"],
        "2": str(object),
    }


def test_a_deliverys_view_names_its_session_by_agent_and_id_and_nothing_more() -> None:
    row = session_row(agent_name="billing-agent", variables={"V": "VARIABLE-VALUE"})
    assert views.session_name(row) == {"session_id": "s1", "agent_name": "billing-agent"}
    assert views.session_name(None) is None


def test_a_running_delivery_is_in_flight_while_its_session_runs_and_unfinished_after() -> None:
    running = delivery(4, "running", attempts=2)
    shown = views.delivery_entry(running, session_over=False)
    assert (shown["outcome"], shown["in_flight"], shown["failed"]) == ("running", True, False)
    shown = views.delivery_entry(running, session_over=True)
    assert (shown["outcome"], shown["in_flight"]) == ("unfinished", False)
    assert views.delivery_entry(delivery(5, "failed"), session_over=True)["outcome"] == "failed"


def test_a_session_is_over_once_ended_or_recovered_and_unknown_sessions_are_not() -> None:
    assert not views.session_over(session_row())
    assert views.session_over(session_row(ended_at=120.0))
    assert views.session_over(session_row(recovered_at=130.0))
    assert not views.session_over(None)
