"""A journal of many deliveries, written fast: the journal's own schema (applied by opening it
with `open_journal`), then one bulk insert of generated rows (SQLite `executemany` in one
transaction, PostgreSQL `COPY`). Shared by the page's large-journal tests and its benchmark.

The rows are made up but shaped as the engine journals them: a few hooks and events, sessions
of 100 deliveries each, mostly successes, a unique idempotency key and trace id per row, and
a rendered request with its headers. Row `i` (1-based id on a fresh journal) is predictable:
`hook_of(i)`, `outcome_of(i)`, `session_of(i)`, `key_of(i)`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from otel_lifecycle_hooks.journal import is_postgres_url, open_journal

HOOKS = ("register-agent", "notify-slack", "audit-log", "deregister-agent", "metrics-push")
EVENTS = ("post-start", "pre-stop", "session-end", "tool-start")
AGENTS = ("agent-alpha", "agent-beta", "agent-gamma", "agent-delta")
PER_SESSION = 100
START = 1_780_000_000.0  # 2026-05-28T20:26:40Z: rows are one second apart from here
COLUMNS = (
    "session_id", "agent_id", "hook", "event", "outcome", "attempts", "duration_ms", "started_at",
    "http_status", "error_type", "message", "trace_id", "span_id", "idempotency_key", "request",
    "row_uid",
)  # fmt: skip


def hook_of(i: int) -> str:
    return HOOKS[i % len(HOOKS)]


def outcome_of(i: int) -> str:
    # 1 in 10 failed, 1 in 50 timed out (those not failed), the rest succeeded.
    if i % 10 == 3:
        return "failed"
    if i % 50 == 7:
        return "timeout"
    return "success"


def session_of(i: int) -> str:
    return f"sess-{(i - 1) // PER_SESSION:06d}"


def agent_of(i: int) -> str:
    return AGENTS[((i - 1) // PER_SESSION) % len(AGENTS)]


def key_of(i: int) -> str:
    return f"idem-{i:08d}"


def _row(i: int) -> tuple[Any, ...]:
    outcome = outcome_of(i)
    hook = hook_of(i)
    status = {"success": 200, "failed": 503, "timeout": None}[outcome]
    request = {
        "method": "POST",
        "url": f"http://127.0.0.1:9/{hook}",
        "headers": {"Content-Type": "application/json", "X-Scion-Hook-ID": key_of(i)},
        "body": json.dumps({"hook": hook, "n": i}),
    }
    return (
        session_of(i), agent_of(i), hook, EVENTS[i % len(EVENTS)], outcome,
        1 if outcome == "success" else 3, float(5 + (i * 37) % 400), START + i, status,
        {"success": None, "failed": "HTTPStatusError", "timeout": "ReadTimeout"}[outcome],
        "" if outcome == "success" else f"{outcome} at attempt 3", f"{i:032x}", f"{i:016x}",
        key_of(i), json.dumps(request), f"bulk-{i:08d}",
    )  # fmt: skip


def _rows(count: int) -> Iterator[tuple[Any, ...]]:
    return (_row(i) for i in range(1, count + 1))


def _sessions(count: int) -> list[tuple[Any, ...]]:
    sessions = (count + PER_SESSION - 1) // PER_SESSION
    return [
        (session_of(1 + s * PER_SESSION), agent_of(1 + s * PER_SESSION),
         f"{agent_of(1 + s * PER_SESSION)}-name", START + s * PER_SESSION,
         START + (s + 1) * PER_SESSION, 0)
        for s in range(sessions)
    ]  # fmt: skip


_SESSION_COLUMNS = "session_id, agent_id, agent_name, started_at, ended_at, exit_code"


def fill(location: str | Path, count: int) -> None:
    """Write `count` generated deliveries (and their sessions) into the journal at
    `location`, a SQLite path or a PostgreSQL URL, creating its schema first."""
    journal = open_journal(location)
    try:
        journal.get(0)  # a first read: the schema, every migration applied
    finally:
        journal.close()
    if is_postgres_url(location):
        _fill_postgres(str(location), count)
    else:
        _fill_sqlite(Path(location), count)


def _fill_sqlite(path: Path, count: int) -> None:
    db = sqlite3.connect(path)
    try:
        with db:
            db.executemany(
                f"INSERT INTO executions ({', '.join(COLUMNS)})"
                f" VALUES ({', '.join('?' for _ in COLUMNS)})",
                _rows(count),
            )
            db.executemany(
                f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                _sessions(count),
            )
        db.execute("ANALYZE")
    finally:
        db.close()


def _fill_postgres(url: str, count: int) -> None:
    import psycopg

    with psycopg.connect(url) as db:
        with db.cursor() as cursor:
            with cursor.copy(f"COPY executions ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                for row in _rows(count):
                    copy.write_row(row)
            with cursor.copy(f"COPY sessions ({_SESSION_COLUMNS}) FROM STDIN") as copy:
                for row in _sessions(count):
                    copy.write_row(row)
        db.commit()
        db.execute("ANALYZE executions")
        db.execute("ANALYZE sessions")
        db.commit()
