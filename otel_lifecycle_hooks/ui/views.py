"""What the page is sent: the journal's read API (`journal.views`) shaped for the page.

Everything here came from the agent or from remote endpoints (messages, requests, responses,
script output): the page shows it as text, never as markup. Rows are redacted and bounded when
journaled; a session's stored template text and variables are not sent at all, as the page has
no need of them. Headers always travel as [name, value] pairs, in the order sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from ..journal import FAILED_OUTCOMES, SessionRow
from ..journal.rows import RUNNING

# Sessions shown on the first view, newest first.
SESSIONS_SHOWN = 100
# Deliveries of one session shown, newest first.
DELIVERIES_SHOWN = 1000
# The most characters of one text the page is sent: in a list (a line each), and in one
# delivery (bodies are journaled cut at 16 KiB; the journal file may hold anything).
LIST_TEXT_LIMIT = 1024
TEXT_LIMIT = 20 * 1024

# What `json.dumps` takes without a custom encoder: what the page is sent is made of these.
JsonValue: TypeAlias = (
    None | bool | int | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"]
)


def bounded(value: Any, limit: int) -> Any:
    """`value` (JSON-ready) with every string, keys too, cut at `limit` characters and
    marked: a journal the agent wrote can hold a cell of any size, and the page must stay
    quick to send and to show."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return f"{value[:limit]}… [{len(value) - limit} more characters not shown]"
    if isinstance(value, Mapping):
        return {bounded(k, limit): bounded(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [bounded(item, limit) for item in value]
    return value


def session_state(session: Mapping[str, Any]) -> str:
    """running, ended, recovered (its owed hooks were run by recovery), or unsupervised
    (only deliveries name it: an application's own tracer, no supervisor)."""
    if session.get("live"):
        return "running"
    if session.get("ended_at") is not None:
        return "ended"
    return "recovered" if session.get("host") else "unsupervised"


def session_entry(session: Mapping[str, Any]) -> dict[str, Any]:
    """One line of the sessions list (`journal.views.list_sessions`' dict)."""
    return {**json_object(session), "state": session_state(session)}


def session_header(
    row: SessionRow | None, deliveries: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """What the deliveries view shows of its session, from the sessions table's row."""
    if row is None:
        return None
    return {
        "session_id": row.session_id,
        "agent_name": row.agent_name,
        "agent_id": row.agent_id,
        "host": row.host,
        "state": session_state(
            {
                "live": row.ended_at is None and row.recovered_at is None,
                "ended_at": row.ended_at,
                "host": "supervised",
            }  # a row of the sessions table: its supervisor wrote it
        ),
        "started_at": row.started_at,
        "ended_at": row.ended_at,
        "exit_code": row.exit_code,
        "template_files": list(row.template_files),
        "deliveries": len(deliveries),
        "failed": sum(1 for d in deliveries if d.get("outcome") in FAILED_OUTCOMES),
    }


def session_name(row: SessionRow | None) -> dict[str, Any] | None:
    """What a delivery's view names its session by: the agent's name and the session id."""
    if row is None:
        return None
    return {"session_id": row.session_id, "agent_name": row.agent_name}


def replays_of(deliveries: Iterable[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    """The deliveries that re-sent each delivery, oldest first, by the id they re-sent."""
    found: dict[int, list[Mapping[str, Any]]] = {}
    for delivery in sorted(deliveries, key=lambda d: d.get("id") or 0):
        if delivery.get("replayed_from") is not None:
            found.setdefault(int(delivery["replayed_from"]), []).append(delivery)
    return found


def session_over(row: SessionRow | None) -> bool:
    """True when the session's supervisor ended it or recovery finished it: nothing of it is
    in flight any more. A session the sessions table does not hold may still be running."""
    return row is not None and (row.ended_at is not None or row.recovered_at is not None)


def delivery_entry(
    delivery: Mapping[str, Any],
    replays: Iterable[Mapping[str, Any]] = (),
    *,
    with_request: bool = True,
    session_over: bool = False,
) -> dict[str, Any]:
    """One delivery (`journal.views`' execution dict) with the deliveries that re-sent it;
    without its request for a list (the page polls lists, and shows requests per attempt).
    A delivery journaled as running (retrying: `journal.in_flight`) is `in_flight`, unless
    its session is over: then its run was killed mid-retry, and it is shown `unfinished`."""
    shown = json_object({k: v for k, v in delivery.items() if k != "request"})
    running = delivery.get("outcome") == RUNNING
    shown["in_flight"] = running and not session_over
    if running and session_over:
        shown["outcome"] = "unfinished"
    shown["failed"] = delivery.get("outcome") in FAILED_OUTCOMES
    if with_request:
        shown["request"] = request_entry(delivery.get("request"))
    shown["replays"] = [
        {"id": r.get("id"), "outcome": r.get("outcome"), "http_status": r.get("http_status")}
        for r in replays
    ]
    return shown


def attempt_entry(attempt: Mapping[str, Any], of_attempts: int | None) -> dict[str, Any]:
    """One attempt (`journal.views.list_attempts`' dict) as the page shows it; `of_attempts`
    None while the delivery is still retrying."""
    status = attempt.get("response_status")
    response = None
    if status is not None or attempt.get("response_headers") or attempt.get("response_body"):
        response = {
            "status": status,
            "headers": header_pairs(attempt.get("response_headers")),
            "body": attempt.get("response_body"),
        }
    return {
        "number": attempt.get("attempt"),
        "of_attempts": of_attempts,
        "started_at": attempt.get("started_at"),
        "duration_ms": attempt.get("duration_ms"),
        "outcome": attempt.get("outcome"),
        "request": request_entry(attempt.get("request")),
        "response": response,
        "exit_code": attempt.get("exit_code"),
        "stdout": attempt.get("stdout"),
        "stderr": attempt.get("stderr"),
        "error_type": attempt.get("error_type"),
        "message": attempt.get("message") or "",
        "summary_only": False,
    }


def summary_attempt(delivery: Mapping[str, Any]) -> dict[str, Any]:
    """A delivery's last attempt as its execution row holds it, for a delivery journaled
    without attempt rows (before the journal kept them): its request and the response's
    status, error and duration."""
    status = delivery.get("http_status")
    return {
        "number": delivery.get("attempts"),
        "of_attempts": delivery.get("attempts"),
        "started_at": delivery.get("started_at"),
        "duration_ms": delivery.get("duration_ms"),
        "outcome": delivery.get("outcome"),
        "request": request_entry(delivery.get("request")),
        "response": {"status": status, "headers": None, "body": None}
        if status is not None
        else None,
        "exit_code": delivery.get("exit_code"),
        "stdout": None,
        "stderr": None,
        "error_type": delivery.get("error_type"),
        "message": delivery.get("message") or "",
        "summary_only": True,
    }


def request_entry(request: Any) -> dict[str, Any] | None:
    """A journaled request with its headers as [name, value] pairs (an execution row keeps
    them as a mapping, an attempt row as pairs)."""
    if not isinstance(request, Mapping):
        return None
    shown = json_object(request)
    if "headers" in shown:
        shown["headers"] = header_pairs(request.get("headers"))
    return shown


def header_pairs(headers: Any) -> list[list[str]] | None:
    if headers is None:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [[str(pair[0]), str(pair[1])] for pair in items if len(pair) == 2]


def json_ready(value: object) -> JsonValue:
    """A JSON-ready copy: mappings and sequences rebuilt, anything else as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return json_object(value)
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def json_object(mapping: Mapping[Any, object]) -> dict[str, JsonValue]:
    """`json_ready` of a mapping: its keys as text, its values JSON-ready."""
    return {str(key): json_ready(item) for key, item in mapping.items()}
