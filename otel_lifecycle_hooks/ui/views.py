"""What the page is sent: the journal's rows as plain JSON-ready dicts.

Everything here came from the agent or from remote endpoints (hook names are the template's,
but messages, requests and responses carry what the agent reported and what endpoints
answered): the page shows it as text, never as markup. Rows are redacted when journaled;
a session's stored template text and variables are not sent at all, as the page has no need
of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..journal import FAILED_OUTCOMES, ExecutionRow, SessionRow

# Sessions shown on the first view, newest first.
SESSIONS_SHOWN = 100
# Deliveries of one session shown, newest first.
DELIVERIES_SHOWN = 1000


def session_state(row: SessionRow) -> str:
    """running, ended, recovered (its owed hooks were run by recovery), or starting."""
    if row.recovered_at is not None:
        return "recovered"
    if row.ended_at is not None:
        return "ended"
    if row.post_start_at is not None or row.post_started_at is not None:
        return "running"
    return "starting"


def session_view(row: SessionRow, deliveries: Sequence[ExecutionRow] = ()) -> dict[str, Any]:
    """One session as the page lists it, with counts of its deliveries by outcome."""
    outcomes: dict[str, int] = {}
    for delivery in deliveries:
        outcomes[delivery.outcome] = outcomes.get(delivery.outcome, 0) + 1
    return {
        "session_id": row.session_id,
        "agent_name": row.agent_name,
        "agent_id": row.agent_id,
        "host": row.host,
        "state": session_state(row),
        "started_at": row.started_at,
        "ended_at": row.ended_at,
        "exit_code": row.exit_code,
        "template_files": list(row.template_files),
        "deliveries": len(deliveries),
        "outcomes": outcomes,
    }


def delivery_view(row: ExecutionRow, replays: Iterable[ExecutionRow] = ()) -> dict[str, Any]:
    """One execution (a delivery) as a row of a session's list; `replays`: the rows that
    re-sent it."""
    return {
        "id": row.id,
        "session_id": row.session_id,
        "hook": row.hook,
        "event": row.event,
        "outcome": row.outcome,
        "failed": row.outcome in FAILED_OUTCOMES,
        "attempts": row.attempts,
        "duration_ms": row.duration_ms,
        "started_at": row.started_at,
        "http_status": row.http_status,
        "exit_code": row.exit_code,
        "error_type": row.error_type,
        "message": row.message,
        "idempotency_key": row.idempotency_key,
        "trace_id": row.trace_id,
        "span_id": row.span_id,
        "recovered": row.recovered,
        "replayed_from": row.replayed_from,
        "replays": [
            {"id": replay.id, "outcome": replay.outcome, "http_status": replay.http_status}
            for replay in replays
        ],
        "request": json_ready(row.request),
    }


def summary_attempt(row: ExecutionRow) -> dict[str, Any]:
    """The execution's last attempt as the execution row holds it, for a journal that keeps
    no row per attempt: its request and the response's status, error and duration."""
    return {
        "number": row.attempts,
        "of_attempts": row.attempts,
        "started_at": row.started_at,
        "duration_ms": row.duration_ms,
        "outcome": row.outcome,
        "request": json_ready(row.request),
        "response": {"status": row.http_status} if row.http_status is not None else None,
        "exit_code": row.exit_code,
        "error_type": row.error_type,
        "message": row.message,
        "summary_only": True,
    }


def replays_of(rows: Iterable[ExecutionRow]) -> dict[int, list[ExecutionRow]]:
    """The rows that re-sent each row, oldest first, by the id they re-sent."""
    found: dict[int, list[ExecutionRow]] = {}
    for row in sorted(rows, key=lambda r: r.id or 0):
        if row.replayed_from is not None:
            found.setdefault(row.replayed_from, []).append(row)
    return found


def json_ready(value: Any) -> Any:
    """A JSON-ready copy: mappings and sequences rebuilt, anything else as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(key): json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
