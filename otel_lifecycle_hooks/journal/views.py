"""What the journal shows a reader (the `ui` page, `history show`): sessions, their
deliveries, and each delivery's attempts, as plain JSON-ready dicts.

Every function takes an open journal (`open_journal(...)`, SQLite or PostgreSQL) and never
raises for a journal that cannot be read: it answers empty, and `journal.healthy` says why.
Rows beyond the journal's retention (`retention.py`; the environment's setting unless one is
passed) are not shown. Times are unix seconds (floats), durations milliseconds.

Shapes:

- `list_sessions(journal, agent_id=None, limit=100)`, newest first:
  `{"session_id", "agent_id", "agent_name", "host", "started_at", "ended_at" (None while it
  runs), "exit_code", "live" (neither ended nor recovered), "deliveries", "failed",
  "last_at" (latest delivery's start, or None)}`. Sessions that only executions name (an
  application's own tracer, no supervisor) are listed too, with `agent_name` "" and
  `started_at` their first delivery's start.
- `list_executions(journal, session_id=None, *, agent_id, hook, event, outcomes, since,
  until, after_id, before_id, agent, search, limit=100, oldest_first=False)`: deliveries,
  newest first; `after_id` gives only those journaled after the one with that id (how a live
  page polls), `before_id` those before it (the next page of a log); `agent` is an agent id
  or name, `search` a delivery id, session id or idempotency key.
- `hook_summary(journal, hook, window=1000, since=None)`: a `HookSummary` of the hook's
  newest `window` deliveries: total, succeeded, failed, and p50/p95/p99 duration (ms). Each:
  `{"id", "row_uid", "session_id", "agent_id", "hook", "event", "outcome", "attempts",
  "duration_ms", "started_at", "http_status", "exit_code", "error_type", "message",
  "trace_id", "span_id", "idempotency_key", "request" (the rendered request, redacted:
  {"method", "url", "headers", "body", "auth", "signed"} or {"argv", "env"}), "recovered",
  "replayed_from", "replayable" (a failed http/webhook delivery `replay` can re-send)}`.
  An execution still retrying has the outcome "running" (`in_flight.py`): its attempts so
  far are journaled, and the row is rewritten in place, same id, when it ends.
- `list_attempts(journal, execution_id)`: that delivery's attempts in order, each
  `{"attempt", "started_at", "duration_ms", "outcome" (success|failed|timeout), "error_type",
  "message", "request" ({"method", "url", "headers": [[name, value], ...], "body"} as sent,
  or {"argv"}), "response_status", "response_headers" ([[name, value], ...] or None),
  "response_body" (text or None), "exit_code", "stdout", "stderr"}`; [] for an unknown id.
- `get_execution(journal, execution_id)`: one delivery's dict whose `"attempts"` is the list
  of its attempts (as `list_attempts`) and `"attempt_count"` the number the execution made
  (the count `list_executions` gives as `"attempts"`), or None for an id the journal does not
  hold (or no longer keeps).

Everything in them was redacted before it was journaled; bodies are bounded (`attempt_log`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .base import Journal
from .reading import HookSummary
from .retention import Retention, retention_from, visible_filters
from .rows import FAILED_OUTCOMES, AttemptRow, ExecutionRow

__all__ = ["get_execution", "hook_summary", "list_attempts", "list_executions", "list_sessions"]


def _retention(retention: Retention | None) -> Retention:
    return retention_from(os.environ) if retention is None else retention


def execution_dict(row: ExecutionRow) -> dict[str, Any]:
    """One delivery as the views show it."""
    shown = row._asdict()
    shown["request"] = dict(row.request) if row.request is not None else None
    request = row.request or {}
    shown["replayable"] = (
        row.outcome in FAILED_OUTCOMES and "method" in request and bool(row.idempotency_key)
    )
    return shown


def attempt_dict(row: AttemptRow) -> dict[str, Any]:
    shown = row._asdict()
    for internal in ("id", "execution_uid"):
        shown.pop(internal)
    return shown


def list_sessions(
    journal: Journal,
    agent_id: str | None = None,
    limit: int = 100,
    *,
    retention: Retention | None = None,
) -> list[dict[str, Any]]:
    """The latest sessions with their delivery counts, newest first (shape: module doc)."""
    since, _ = visible_filters(journal, _retention(retention))
    sessions = [
        s for s in journal.sessions(agent_id, limit) if since is None or s.started_at >= since
    ]
    shown: dict[str, dict[str, Any]] = {}
    for session in sessions:
        shown[session.session_id] = {
            "session_id": session.session_id,
            "agent_id": session.agent_id,
            "agent_name": session.agent_name,
            "host": session.host,
            "started_at": session.started_at,
            "ended_at": session.ended_at,
            "exit_code": session.exit_code,
            "live": session.ended_at is None and session.recovered_at is None,
        }
    # Sessions only executions name: an application's own tracer journals no session row.
    for row in journal.executions(agent_id=agent_id, since=since, limit=limit * 20):
        if row.session_id and row.session_id not in shown and len(shown) < limit:
            shown[row.session_id] = {
                "session_id": row.session_id,
                "agent_id": row.agent_id,
                "agent_name": "",
                "host": "",
                "started_at": row.started_at,
                "ended_at": None,
                "exit_code": None,
                "live": False,
            }
        elif row.session_id in shown and shown[row.session_id]["agent_name"] == "":
            shown[row.session_id]["started_at"] = min(
                shown[row.session_id]["started_at"], row.started_at
            )
    counts = journal.session_counts(list(shown))
    for session_id, entry in shown.items():
        entry.update(counts.get(session_id, {"deliveries": 0, "failed": 0, "last_at": None}))
    return sorted(shown.values(), key=lambda entry: entry["started_at"], reverse=True)


def list_executions(
    journal: Journal,
    session_id: str | None = None,
    *,
    agent_id: str | None = None,
    hook: str | None = None,
    event: str | None = None,
    outcomes: Sequence[str] | None = None,
    since: float | None = None,
    after_id: int | None = None,
    limit: int | None = 100,
    oldest_first: bool = False,
    retention: Retention | None = None,
    before_id: int | None = None,
    until: float | None = None,
    agent: str | None = None,
    search: str | None = None,
) -> list[dict[str, Any]]:
    """Deliveries matching every filter given (shape: module doc)."""
    rows = visible_executions(
        journal, session_id=session_id, agent_id=agent_id, hook=hook, event=event,
        outcomes=tuple(outcomes) if outcomes else None, since=since, after_id=after_id,
        limit=limit, oldest_first=oldest_first, retention=retention, before_id=before_id,
        until=until, agent=agent, search=search,
    )  # fmt: skip
    return [execution_dict(row) for row in rows]


def visible_executions(
    journal: Journal,
    *,
    retention: Retention | None = None,
    since: float | None = None,
    after_id: int | None = None,
    **filters: Any,
) -> list[ExecutionRow]:
    """`journal.executions(**filters)` without the rows beyond retention."""
    kept_since, kept_after = visible_filters(journal, _retention(retention))
    if kept_since is not None:
        since = kept_since if since is None else max(since, kept_since)
    if kept_after is not None:
        after_id = kept_after if after_id is None else max(after_id, kept_after)
    return list(journal.executions(since=since, after_id=after_id, **filters))


def visible_execution(
    journal: Journal, execution_id: int, retention: Retention | None = None
) -> ExecutionRow | None:
    """The execution with this id, unless it is beyond retention."""
    row: ExecutionRow | None = journal.get(execution_id)
    if row is None:
        return None
    since, after_id = visible_filters(journal, _retention(retention))
    if (since is not None and row.started_at < since) or (
        after_id is not None and row.id is not None and row.id <= after_id
    ):
        return None
    return row


def list_attempts(
    journal: Journal, execution_id: int, *, retention: Retention | None = None
) -> list[dict[str, Any]]:
    """One delivery's attempts, in order (shape: module doc)."""
    row = visible_execution(journal, execution_id, retention)
    if row is None:
        return []
    return [attempt_dict(attempt) for attempt in journal.attempts(row.row_uid)]


def get_execution(
    journal: Journal, execution_id: int, *, retention: Retention | None = None
) -> dict[str, Any] | None:
    """One delivery with its attempts (shape: module doc); None for an unknown id."""
    row = visible_execution(journal, execution_id, retention)
    if row is None:
        return None
    shown = execution_dict(row)
    shown["attempt_count"] = row.attempts
    shown["attempts"] = [attempt_dict(attempt) for attempt in journal.attempts(row.row_uid)]
    return shown


def hook_summary(
    journal: Journal,
    hook: str,
    *,
    window: int = 1000,
    since: float | None = None,
    retention: Retention | None = None,
) -> HookSummary:
    """How `hook`'s newest `window` deliveries (started at or after `since`) went, within
    the journal's retention: counts and duration percentiles (`HookSummary`)."""
    kept_since, kept_after = visible_filters(journal, _retention(retention))
    if kept_since is not None:
        since = kept_since if since is None else max(since, kept_since)
    return journal.hook_summary(hook, window=window, since=since, after_id=kept_after)
