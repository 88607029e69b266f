"""The journal's rows, and the SQL both backends share to write them and to claim sessions
(reads are `reading.py`'s).

SQL here is written with `?` placeholders; the PostgreSQL backend turns them into `%s`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypedDict

from .cells import (
    header_pairs,
    integer,
    maps,
    number,
    parsed_json,
    request,
    string_map,
    strings,
    text,
)

# Outcomes a replay may re-send (`dropped`: never attempted, the run's grace period ended).
FAILED_OUTCOMES = ("failed", "timeout", "dropped", "interrupted")
# An execution still being retried (`in_flight.py`): journaled at its first retry, rewritten
# in place with its outcome when it ends. Not an outcome a finished execution ever has.
RUNNING = "running"
# A delivery cut short, by the engine's shutdown (it stopped waiting for it) or by the operator
# (`run`'s second signal): it may have reached its target. Its outcome and its error type.
INTERRUPTED = "interrupted"
# How earlier releases journaled one: its own run wrote `failed` (or `timeout`) with error
# type `interrupted`, the shutdown `interrupted` with `Interrupted`. Such rows are read as
# today's form (`read_outcome`, and the outcome filters of `reading.py`), not rewritten: a
# fleet's older supervisors may still write them.
EARLIER_INTERRUPTED_OUTCOMES = ("failed", "timeout")
# The events whose hooks a killed session still owes, and the post-start that makes them owed:
# the moment each began is journaled before its hooks are sent (it is their X-Scion-Hook-ID).
OWED_EVENTS = ("pre-stop", "session-end")
EVENT_COLUMNS = {
    "post-start": "post_start_at",
    "pre-stop": "pre_stop_at",
    "session-end": "session_end_at",
}

EXECUTION_COLUMNS = (
    "session_id", "agent_id", "hook", "event", "outcome", "attempts", "duration_ms",
    "started_at", "http_status", "exit_code", "error_type", "message", "trace_id", "span_id",
    "idempotency_key", "request", "recovered", "replayed_from", "row_uid",
)  # fmt: skip


# The three rows stay NamedTuples: callers copy them with `_replace` (in_flight.py,
# supervisor/owed_moments.py) and show them as dicts with `_asdict` (views.py, cli/list_hooks.py).
class ExecutionRow(NamedTuple):
    """One hook execution as journaled. `request` is the redacted rendered request (or
    command), kept so that `replay` can send it again; `replayed_from` links a replay to the
    row it re-sent; `recovered` marks executions fired by crash recovery."""

    hook: str
    event: str
    # success | failed | timeout | dropped | interrupted | skipped | refused | running
    outcome: str
    started_at: float  # unix seconds
    attempts: int = 1
    duration_ms: float = 0.0
    session_id: str = ""
    agent_id: str = ""
    http_status: int | None = None
    exit_code: int | None = None
    error_type: str | None = None
    message: str = ""
    trace_id: str | None = None
    span_id: str | None = None
    idempotency_key: str | None = None
    request: Mapping[str, Any] | None = None
    recovered: bool = False
    replayed_from: int | None = None
    id: int | None = None
    # What its attempt rows name it by: unique, and known before the database numbers it.
    row_uid: str | None = None


ATTEMPT_COLUMNS = (
    "execution_uid", "attempt", "started_at", "duration_ms", "outcome", "error_type", "message",
    "request", "response_status", "response_headers", "response_body", "exit_code", "stdout",
    "stderr",
)  # fmt: skip


class AttemptRow(NamedTuple):
    """One attempt of an execution, as the engine journals it: already redacted and bounded.

    `outcome` is success, failed or timeout (the attempt's own, before any retry decision).
    `request` is what was sent: for HTTP `{"method", "url", "headers", "body"}` (headers as a
    list of [name, value] pairs, in the order sent; `body` text, cut at the journal's bound
    with a marker saying so), for a script `{"argv"}`. `response_headers` is a list of
    [name, value] pairs; `response_body` text (a binary body is described, not stored).
    `stdout` / `stderr` hold the tail of a script's output."""

    attempt: int
    started_at: float  # unix seconds
    outcome: str
    duration_ms: float = 0.0
    error_type: str | None = None
    message: str = ""
    request: Mapping[str, Any] | None = None
    response_status: int | None = None
    response_headers: Sequence[Sequence[str]] | None = None
    response_body: str | None = None
    exit_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    execution_uid: str = ""
    id: int | None = None


class SessionRow(NamedTuple):
    """One supervised agent session: what crash recovery and a reconciler need.

    `templates` holds each template file's path, sha256 and text; `variables` the non-secret
    values the owed hooks read from the supervisor's environment (secrets are never stored:
    a reconciler resolves them from its own). `post_start_at`, `pre_stop_at` and
    `session_end_at` are the moments those events began (their `${TIMESTAMP}`), journaled
    before any of their hooks was sent; `post_started_at` and `ended_at` when they finished."""

    session_id: str
    agent_id: str
    agent_name: str
    template_files: tuple[str, ...]
    pid: int | None
    started_at: float
    post_started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    recovered_at: float | None = None
    templates: tuple[Mapping[str, str], ...] = ()
    metadata: Mapping[str, str] = {}
    variables: Mapping[str, str] = {}
    host: str = ""
    agent_pid: int | None = None
    agent_started_at: float | None = None
    heartbeat_at: float | None = None
    post_start_at: float | None = None
    pre_stop_at: float | None = None
    session_end_at: float | None = None
    claimed_by: str | None = None
    claim_expires_at: float | None = None
    # The HMAC of what recovery acts on, under the journal key (seal.py); None when unsealed.
    seal: str | None = None


class SessionCounts(TypedDict):
    """A session's executions, as `session_counts` gives them: how many, how many of them
    did not deliver (`FAILED_OUTCOMES`), and when the latest started (unix seconds)."""

    deliveries: int
    failed: int
    last_at: float | None


class ExecutionLike(Protocol):
    """What `record` reads from the engine's execution record."""

    session_id: str
    outcome: str
    attempts: int
    duration: float
    started_at: float
    idempotency_key: str
    status_code: int | None
    exit_code: int | None
    error_type: str | None
    message: str
    request: Mapping[str, Any] | None
    trace_id: str | None
    span_id: str | None


def new_row_uid() -> str:
    """A new execution's `row_uid`: 32 hex digits, unique across every journal writer."""
    return uuid.uuid4().hex


def attempts_of(execution: Any) -> tuple[AttemptRow, ...]:
    """The attempt rows the engine's execution record carries (none for older callers)."""
    return tuple(getattr(execution, "attempt_log", None) or ())


def execution_row_of(execution: ExecutionLike) -> ExecutionRow:
    """The journal row of the engine's execution record."""
    hook = getattr(execution, "hook", None)
    event = getattr(execution, "event", None)
    return ExecutionRow(
        row_uid=new_row_uid(),
        hook=_name_of(hook),
        event=_name_of(event),
        outcome=execution.outcome,
        started_at=execution.started_at,
        attempts=execution.attempts,
        duration_ms=execution.duration * 1000.0,
        session_id=execution.session_id,
        agent_id=getattr(execution, "agent_id", "") or "",
        http_status=execution.status_code,
        exit_code=execution.exit_code,
        error_type=execution.error_type,
        message=execution.message,
        trace_id=execution.trace_id,
        span_id=execution.span_id,
        idempotency_key=execution.idempotency_key,
        request=execution.request,
        recovered=bool(getattr(event, "recovered", False)),
        replayed_from=getattr(execution, "replayed_from", None),
    )


def commits_at_once(row: ExecutionRow) -> bool:
    """Rows that are never left waiting in a batch: a failed delivery's (what `replay` re-sends
    from) and an owed event's (what recovery reads to know which hooks already ran)."""
    return row.outcome in FAILED_OUTCOMES or row.event in OWED_EVENTS or row.event == "post-start"


def execution_values(row: ExecutionRow, row_uid: str | None = None) -> tuple[Any, ...]:
    request = json.dumps(row.request, sort_keys=True) if row.request is not None else None
    return (
        row.session_id, row.agent_id, row.hook, row.event, row.outcome, row.attempts,
        row.duration_ms, row.started_at, row.http_status, row.exit_code, row.error_type,
        row.message, row.trace_id, row.span_id, row.idempotency_key, request,
        int(row.recovered), row.replayed_from, row.row_uid or row_uid,
    )  # fmt: skip


def attempt_values(attempt: AttemptRow, execution_uid: str) -> tuple[Any, ...]:
    def as_json(value: Any) -> str | None:
        return json.dumps(value, ensure_ascii=False) if value is not None else None

    return (
        execution_uid, attempt.attempt, attempt.started_at, attempt.duration_ms,
        attempt.outcome, attempt.error_type, attempt.message, as_json(attempt.request),
        attempt.response_status, as_json(attempt.response_headers), attempt.response_body,
        attempt.exit_code, attempt.stdout, attempt.stderr,
    )  # fmt: skip


def attempt_row(row: Any) -> AttemptRow:
    """From a database row of `attempts`, read by column name (each cell as its type: see
    `cells`)."""
    return AttemptRow(
        id=integer(row["id"]),
        execution_uid=text(row["execution_uid"]) or "",
        attempt=integer(row["attempt"]) or 0,
        started_at=number(row["started_at"]) or 0.0,
        duration_ms=number(row["duration_ms"]) or 0.0,
        outcome=text(row["outcome"]) or "",
        error_type=text(row["error_type"]),
        message=text(row["message"]) or "",
        request=request(parsed_json(row["request"]), pairs=True),
        response_status=integer(row["response_status"]),
        response_headers=header_pairs(parsed_json(row["response_headers"])),
        response_body=text(row["response_body"]),
        exit_code=integer(row["exit_code"]),
        stdout=text(row["stdout"]),
        stderr=text(row["stderr"]),
    )


def read_outcome(outcome: str, error_type: str | None) -> tuple[str, str | None]:
    """The (outcome, error type) a journaled row means: an interrupted delivery, in this
    release's form or an earlier one's, is `interrupted` both."""
    if outcome == INTERRUPTED or (
        outcome in EARLIER_INTERRUPTED_OUTCOMES and error_type == INTERRUPTED
    ):
        return INTERRUPTED, INTERRUPTED
    return outcome, error_type


def execution_row(row: Any) -> ExecutionRow:
    """From a database row (sqlite3.Row or a dict), read by column name (each cell as its
    type: see `cells`); an interrupted delivery in an earlier release's form as today's."""
    outcome, error_type = read_outcome(text(row["outcome"]) or "", text(row["error_type"]))
    return ExecutionRow(
        id=integer(row["id"]),
        hook=text(row["hook"]) or "",
        event=text(row["event"]) or "",
        outcome=outcome,
        started_at=number(row["started_at"]) or 0.0,
        attempts=integer(row["attempts"]) or 0,
        duration_ms=number(row["duration_ms"]) or 0.0,
        session_id=text(row["session_id"]) or "",
        agent_id=text(row["agent_id"]) or "",
        http_status=integer(row["http_status"]),
        exit_code=integer(row["exit_code"]),
        error_type=error_type,
        message=text(row["message"]) or "",
        trace_id=text(row["trace_id"]),
        span_id=text(row["span_id"]),
        idempotency_key=text(row["idempotency_key"]),
        request=request(parsed_json(row["request"]), pairs=False),
        recovered=bool(integer(row["recovered"])),
        replayed_from=integer(row["replayed_from"]),
        row_uid=text(row["row_uid"]),
    )


def session_row(row: Any) -> SessionRow:
    def moment(column: str) -> float | None:
        return number(row[column])

    return SessionRow(
        session_id=text(row["session_id"]) or "",
        agent_id=text(row["agent_id"]) or "",
        agent_name=text(row["agent_name"]) or "",
        template_files=strings(parsed_json(row["template_files"])),
        pid=integer(row["pid"]),
        started_at=moment("started_at") or 0.0,
        post_started_at=moment("post_started_at"),
        ended_at=moment("ended_at"),
        exit_code=integer(row["exit_code"]),
        recovered_at=moment("recovered_at"),
        templates=maps(parsed_json(row["templates"])),
        metadata=string_map(parsed_json(row["metadata"])),
        variables=string_map(parsed_json(row["variables"])),
        host=text(row["host"]) or "",
        agent_pid=integer(row["agent_pid"]),
        agent_started_at=moment("agent_started_at"),
        heartbeat_at=moment("heartbeat_at"),
        post_start_at=moment("post_start_at"),
        pre_stop_at=moment("pre_stop_at"),
        session_end_at=moment("session_end_at"),
        claimed_by=text(row["claimed_by"]),
        claim_expires_at=moment("claim_expires_at"),
        seal=text(row["seal"]),
    )


def _name_of(spec: Any) -> str:
    # Not getattr's default: str() of a spec is its whole dataclass repr, built for nothing.
    name = getattr(spec, "name", None)
    return name if isinstance(name, str) else str(spec)


INSERT_EXECUTION = (
    f"INSERT INTO executions ({', '.join(EXECUTION_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in EXECUTION_COLUMNS)})"
)
INSERT_ATTEMPT = (
    f"INSERT INTO attempts ({', '.join(ATTEMPT_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in ATTEMPT_COLUMNS)})"
)
# The in-flight execution with this row_uid, rewritten with its latest values.
UPDATE_EXECUTION = (
    f"UPDATE executions SET {', '.join(f'{c} = ?' for c in EXECUTION_COLUMNS[:-1])}"
    " WHERE row_uid = ?"
)
ID_OF_UID = "SELECT id FROM executions WHERE row_uid = ?"

OPEN_SESSION = (
    "INSERT INTO sessions (session_id, agent_id, agent_name, template_files, pid, started_at,"
    " templates, metadata, variables, host, heartbeat_at, seal)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING"
)
# What version 3 of the schema wrote (no seal): still written from an older release's spill file.
OPEN_SESSION_UNSEALED = (
    "INSERT INTO sessions (session_id, agent_id, agent_name, template_files, pid, started_at,"
    " templates, metadata, variables, host, heartbeat_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING"
)
# A session that reached post-start (or began it: its registration may have gone out) and
# neither ended nor was recovered.
UNFINISHED = (
    "(post_start_at IS NOT NULL OR post_started_at IS NOT NULL)"
    " AND ended_at IS NULL AND recovered_at IS NULL"
)
# Taking a session for recovery: one statement, so that of any number of claimers one wins.
# The moments of the owed events not begun yet are fixed here, once: a claimer that dies
# leaves them to the next, which sends the same X-Scion-Hook-IDs. pre-stop is owed only if
# session-end had not begun (a session that ended by itself never stopped). A claim is taken
# over once its lease ran out, or from a named claimer known to be dead. A claimer holding the
# journal key re-seals the row with the moments it fixes, in the same statement. The moments
# fixed are those `unjournaled_moments` gives (the same arithmetic, on the same doubles).
CLAIM = (
    "UPDATE sessions SET claimed_by = ?, claim_expires_at = ?, seal = COALESCE(?, seal),"
    " pre_stop_at = CASE WHEN pre_stop_at IS NULL AND session_end_at IS NULL"
    " THEN COALESCE(post_start_at + ?, ?) ELSE pre_stop_at END,"
    " session_end_at = COALESCE(session_end_at, COALESCE(pre_stop_at, post_start_at + ?, ?) + ?)"
    f" WHERE session_id = ? AND {UNFINISHED}"
    " AND (claimed_by IS NULL OR claim_expires_at < ? OR claimed_by = ?) RETURNING *"
)

# Giving a claim back (its owed hooks failed): the next pass may claim it at once. Only the
# claimer's own claim; the moments it fixed are kept, so the next pass sends the same ids.
RELEASE_CLAIM = (
    "UPDATE sessions SET claim_expires_at = ? WHERE session_id = ? AND claimed_by = ?"
    " AND recovered_at IS NULL"
)


def open_session_values(
    session_id: str,
    agent_id: str,
    agent_name: str,
    template_files: Any,
    pid: int | None,
    started_at: float,
    templates: Any,
    metadata: Mapping[str, str],
    variables: Mapping[str, str],
    host: str,
    seal: str | None = None,
) -> tuple[Any, ...]:
    return (
        session_id, agent_id, agent_name, json.dumps(list(template_files)), pid, started_at,
        json.dumps(list(templates)), json.dumps(dict(metadata)), json.dumps(dict(variables)),
        host, started_at, seal,
    )  # fmt: skip


def claim_values(
    claimer: str,
    lease: float,
    now: float,
    session_id: str,
    steal_from: str | None,
    seal: str | None,
) -> tuple[Any, ...]:
    """The parameters of `CLAIM`."""
    step = NEXT_MOMENT
    return (
        claimer, now + lease, seal, step, now, step, now, step, session_id, now, steal_from,
    )  # fmt: skip


# A moment one microsecond after another: ${TIMESTAMP} tells them apart.
NEXT_MOMENT = 0.000001


def unjournaled_moments(
    post_start_at: float | None, pre_stop_at: float | None, now: float
) -> tuple[float, float]:
    """The moments of pre-stop and session-end when none was journaled for them: a microsecond
    after post-start's, and session-end's a microsecond after pre-stop's. Computed from what
    the row holds, so that a claimer and a supervisor that could not journal its own (its
    disk full) reach the same ones, and so send the same X-Scion-Hook-IDs. `now` only where
    the row has no post-start moment (a row of an earlier schema)."""
    pre_stop = post_start_at + NEXT_MOMENT if post_start_at is not None else now
    before_end = pre_stop_at if pre_stop_at is not None else pre_stop
    return pre_stop, before_end + NEXT_MOMENT


def as_claimed(row: SessionRow, now: float) -> SessionRow:
    """`row` as `CLAIM` at `now` leaves it: the owed events' moments fixed where they were not
    (what a claimer seals before it claims)."""
    fixed_pre_stop, fixed_end = unjournaled_moments(row.post_start_at, row.pre_stop_at, now)
    pre_stop = row.pre_stop_at
    if pre_stop is None and row.session_end_at is None:
        pre_stop = fixed_pre_stop
    session_end = row.session_end_at if row.session_end_at is not None else fixed_end
    return row._replace(pre_stop_at=pre_stop, session_end_at=session_end)
