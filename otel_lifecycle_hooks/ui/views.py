"""What the page is sent: the journal's read API (`journal.views`) shaped for the page.

Everything here came from the agent or from remote endpoints (messages, requests, responses,
script output): the page shows it as text, never as markup. Rows are redacted and bounded when
journaled; a session's stored template text and variables are not sent at all, as the page has
no need of them. Headers always travel as [name, value] pairs, in the order sent.
"""

from __future__ import annotations

import datetime
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import parse_qs, urlsplit

from ..errors import LifecycleHooksError
from ..journal import FAILED_OUTCOMES, SessionRow
from ..journal.reading import HookSummary
from ..journal.rows import RUNNING
from ..redact import Redactor

# Sessions shown on the first view, newest first.
SESSIONS_SHOWN = 100
# Deliveries of one session shown, newest first.
DELIVERIES_SHOWN = 1000
# The most characters of one text the page is sent: in a list (a line each), and in one
# delivery (bodies are journaled cut at 16 KiB; the journal file may hold anything).
LIST_TEXT_LIMIT = 1024
TEXT_LIMIT = 20 * 1024

# Deliveries on one page of the log, newest first.
LOG_PAGE = 100
# The per-hook view's window: its newest deliveries, summed up by the database.
SUMMARY_WINDOW = 1000
# The outcomes a delivery is journaled with (`history --status` takes the same), and the
# page's own name for those that did not deliver.
OUTCOMES = ("success", "failed", "timeout", "dropped", "interrupted", "skipped", "refused", RUNNING)
FAILED = "failures"
# The longest filter value taken: ids, names and keys are short; a longer one is a mistake.
LONGEST_VALUE = 512
# Request headers that a copied curl command or a Redeliver preview never shows are those the
# journal redacts (`redact.Redactor.is_secret_header`): credentials are resolved again at
# send time, from the operator's template and environment.
_HEADERS = Redactor()

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


class BadQuery(ValueError, LifecycleHooksError):
    """A filter of the page's API that cannot be read: the message names it and what would
    do."""


@dataclass(frozen=True, slots=True)
class LogQuery:
    """The delivery log's filters, search and cursor, as the page's URL gives them:
    `status` (repeatable; `failures` for every outcome that did not deliver), `hook`,
    `event`, `agent` (id or name), `since` / `until` (RFC 3339, or unix seconds),
    `q` (a delivery id, session id or idempotency key), and `before` / `after` (a cursor:
    the id of the last / first row of the page seen)."""

    outcomes: tuple[str, ...] = ()
    hook: str | None = None
    event: str | None = None
    agent: str | None = None
    since: float | None = None
    until: float | None = None
    search: str | None = None
    before: int | None = None
    after: int | None = None

    def filters(self) -> dict[str, Any]:
        """The journal's keyword filters for this query (the cursor left out)."""
        return {
            "outcomes": self.outcomes or None, "hook": self.hook, "event": self.event,
            "agent": self.agent, "since": self.since, "until": self.until,
            "search": self.search,
        }  # fmt: skip


def log_query(target: str) -> LogQuery:
    """The `LogQuery` of a request target's query string; `BadQuery` for a value that is
    not one the log takes."""
    given = parse_qs(urlsplit(target).query, keep_blank_values=True, max_num_fields=64)
    known = {"status", "hook", "event", "agent", "since", "until", "q", "before", "after"}
    for name in given:
        if name not in known:
            raise BadQuery(f"unknown filter {name!r}: the log takes {', '.join(sorted(known))}")

    def one(name: str) -> str | None:
        values = [v.strip() for v in given.get(name, []) if v.strip()]
        if len(values) > 1:
            raise BadQuery(f"{name}: give it once (got {len(values)} values)")
        if values and len(values[0]) > LONGEST_VALUE:
            raise BadQuery(f"{name}: at most {LONGEST_VALUE} characters")
        return values[0] if values else None

    outcomes: list[str] = []
    for value in given.get("status", []):
        for status in filter(None, (part.strip() for part in value.split(","))):
            if status == FAILED:
                outcomes.extend(FAILED_OUTCOMES)
            elif status in OUTCOMES:
                outcomes.append(status)
            else:
                raise BadQuery(
                    f"status {status[:64]!r} is not an outcome: one of "
                    f"{', '.join((*OUTCOMES, FAILED))}"
                )
    before, after = _cursor("before", one("before")), _cursor("after", one("after"))
    if before is not None and after is not None:
        raise BadQuery("before and after: give one cursor, not both")
    since, until = _moment("since", one("since")), _moment("until", one("until"))
    if since is not None and until is not None and until <= since:
        raise BadQuery("until must be later than since")
    return LogQuery(
        outcomes=tuple(dict.fromkeys(outcomes)), hook=one("hook"), event=one("event"),
        agent=one("agent"), since=since, until=until, search=one("q"), before=before,
        after=after,
    )  # fmt: skip


def _cursor(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or len(value) > 18:
        raise BadQuery(f"{name}: a cursor is the id of a delivery of the log (digits only)")
    return int(value)


def _moment(name: str, value: str | None) -> float | None:
    """An RFC 3339 time (UTC when it names no offset) or unix seconds."""
    if value is None:
        return None
    try:
        return float(value) if value.replace(".", "", 1).isdigit() else _rfc3339(value)
    except ValueError:
        raise BadQuery(
            f"{name}: {value[:64]!r} is not a time: give RFC 3339 (2026-05-01T12:00:00Z) or "
            "unix seconds"
        ) from None


def _rfc3339(value: str) -> float:
    moment = datetime.datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def log_page(
    deliveries: Sequence[Mapping[str, Any]], query: LogQuery, *, more: bool
) -> dict[str, Any]:
    """One page of the log, newest first, with the cursors of the pages around it: `older`
    (None at the oldest page) and `newer` (None at the newest). `more` says whether the
    read found rows beyond this page, in the direction it read."""
    ids = [int(d["id"]) for d in deliveries]
    reading_newer = query.after is not None
    older_exists = (more if not reading_newer else True) and bool(ids)
    newer_exists = (more if reading_newer else query.before is not None) and bool(ids)
    return {
        "deliveries": [delivery_entry(d, with_request=False) for d in deliveries],
        "older": str(ids[-1]) if older_exists else None,
        "newer": str(ids[0]) if newer_exists else None,
    }


def hook_entry(summary: HookSummary, window: int) -> dict[str, Any]:
    """The per-hook view's figures (`HookSummary`), its success rate a fraction or None."""
    return {
        "hook": summary.hook,
        "window": window,
        "deliveries": summary.total,
        "succeeded": summary.succeeded,
        "failed": summary.failed,
        "success_rate": summary.succeeded / summary.total if summary.total else None,
        "p50_ms": summary.p50_ms,
        "p95_ms": summary.p95_ms,
        "p99_ms": summary.p99_ms,
    }


def is_credential(name: str) -> bool:
    """True for a header that carries a credential (or may): left out of what is copied."""
    return _HEADERS.is_secret_header(name.strip())


def outgoing(request: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a Redeliver sends, as the journal holds it: method, URL, headers without the
    credentials (named in `left_out`), body; None for a delivery that is not an HTTP one."""
    if not request or "method" not in request:
        return None
    pairs = header_pairs(request.get("headers")) or []
    left_out = [pair[0] for pair in pairs if is_credential(pair[0])]
    # What the hook's auth and signing add at send time: never journaled, named here.
    auth = request.get("auth")
    if auth and auth != "none":
        left_out.append(f"the {auth} credential")
    if request.get("signed"):
        left_out.append("the webhook signature")
    return {
        "method": str(request.get("method") or ""),
        "url": str(request.get("url") or ""),
        "headers": [pair for pair in pairs if not is_credential(pair[0])],
        "left_out": left_out,
        "body": request.get("body"),
    }


def as_curl(request: Mapping[str, Any] | None) -> str | None:
    """The journaled HTTP request as a curl command, credentials left out, every word
    shell-quoted (agent-written values cannot end the quoting); None for a script."""
    shown = outgoing(request)
    if shown is None:
        return None
    # Every value follows the option it belongs to (`--url`, not a bare word): a URL the
    # agent wrote as `-o/some/file` stays a URL.
    words = ["curl", "--request", shown["method"], "--url", shown["url"]]
    for name, value in shown["headers"]:
        words += ["--header", f"{name}: {value}"]
    if shown["body"] is not None:
        words += ["--data-raw", str(shown["body"])]
    return " ".join(shlex.quote(word) for word in words)


# A trace id as the journal holds it: 32 hex digits, anything else is never linked.
TRACE_ID_PLACEHOLDER = "{trace_id}"


def trace_url_template(template: str) -> str:
    """`template` when it is an http(s) URL holding `{trace_id}` (the page puts the trace id
    there), else `BadQuery` saying what would do."""
    parts = urlsplit(template)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadQuery(
            f"trace URL template {template[:80]!r}: an http:// or https:// URL is needed, "
            "e.g. http://localhost:16686/trace/{trace_id}"
        )
    if TRACE_ID_PLACEHOLDER not in template:
        raise BadQuery(
            f"trace URL template {template[:80]!r} has no {TRACE_ID_PLACEHOLDER}: the page "
            "puts the trace id there"
        )
    return template
