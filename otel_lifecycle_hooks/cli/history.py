"""`history [--agent ID] [--session ID] [--hook NAME] [--event EVENT] [--status OUTCOME]...
[--since WHEN] [--failed] [--last N] [--follow] [--json] [--journal URL]`: the journal's
executions, newest first; `history show ID [--json]`: one execution with every attempt, its
request and what the endpoint answered.

A journal shared by a fleet (PostgreSQL, docs/fleet.md) holds every agent's executions: the
filters narrow them to one agent (its AGENT_ID, name, or the start of its id as shown), session
(its id or the start shown), hook, event, outcome or time. Rows beyond the journal's retention
($LIFECYCLE_HOOKS_JOURNAL_RETENTION, default the newest 50000) are not shown.

Each line is one execution: its journal id (what `show` and `replay` take), when it started,
the agent and session, the hook and event, how it ended, its attempts and duration, the HTTP
status or exit code, the error type, and for a replay the id of the row it re-sent.
`--follow` prints the matching rows, then each new one as it is journaled, until Ctrl-C
(exit 0); with --json, one JSON object per line.

Exit 0; 1 when there is no journal, it cannot be read, or `show` names an id it does not hold.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..journal import FAILED_OUTCOMES, AttemptRow, ExecutionRow, journal_location, open_journal
from ..journal.base import Journal
from ..journal.retention import retention_from
from ..journal.rows import RUNNING
from ..journal.views import attempt_dict, execution_dict, visible_execution, visible_executions
from ..template.durations import DurationError, parse_duration
from .console import (
    DIM,
    EXIT_NOTHING,
    EXIT_USAGE,
    OUTCOME_COLOURS,
    Step,
    TableLayout,
    escape_control,
    fit_table,
    output_width,
    paint,
    wants_colour,
)

DEFAULT_LIMIT = 20
FOLLOW_INTERVAL = 1.0  # seconds between two reads of the journal under --follow
SHORT_ID = 8  # characters of an agent or session id shown in the table
_COLUMNS = (
    "ID",
    "STARTED",
    "AGENT",
    "SESSION",
    "HOOK",
    "EVENT",
    "OUTCOME",
    "ATTEMPTS",
    "DURATION",
    "RESULT",
    "ERROR",
    "REPLAY_OF",
)


def add_parser(subparsers: Any) -> None:
    """Register the `history` command."""
    parser = subparsers.add_parser(
        "history",
        help="show hook executions from the journal (`history show ID`: every attempt)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "show", nargs="?", metavar="show", help="`show ID`: one execution with every attempt"
    )
    parser.add_argument("id", nargs="?", metavar="ID", help="the execution's journal id")
    add_filter_options(parser)
    parser.add_argument(
        "--failed", action="store_true", help="only failed and timed-out executions"
    )
    add_last_option(parser, DEFAULT_LIMIT)
    parser.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing new executions as they are journaled, until Ctrl-C",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_journal_option(parser)


def add_journal_option(parser: argparse.ArgumentParser) -> None:
    """`--journal URL`, shared with `replay` and `reconcile`."""
    parser.add_argument(
        "--journal",
        metavar="URL",
        help="execution journal: a path, sqlite:///PATH or postgresql://... (default: "
        "$LIFECYCLE_HOOKS_JOURNAL, else ~/.local/state/otel-lifecycle-hooks/journal.sqlite3)",
    )


def add_last_option(parser: argparse.ArgumentParser, default: int | None) -> None:
    """`--last N` (and its older name `--limit N`): the newest N rows."""
    shown = f" (default {default})" if default is not None else ""
    parser.add_argument(
        "--last",
        "--limit",
        dest="limit",
        type=_positive,
        default=default,
        metavar="N",
        help=f"only the newest N executions{shown}",
    )


def add_filter_options(parser: argparse.ArgumentParser, outcomes: tuple[str, ...] = ()) -> None:
    """The filters `history` and `replay` share."""
    parser.add_argument(
        "--agent", metavar="ID", help="only this agent's executions (AGENT_ID, name, or id start)"
    )
    parser.add_argument(
        "--session", metavar="ID", help="only this session's executions (its id, or its start)"
    )
    parser.add_argument("--hook", metavar="NAME", help="only this hook's executions")
    parser.add_argument("--event", metavar="EVENT", help="only executions for this event")
    parser.add_argument(
        "--status",
        action="append",
        metavar="OUTCOME",
        choices=outcomes
        or ("success", "failed", "timeout", "dropped", "interrupted", "skipped", "refused"),
        help="only executions that ended so (repeat for several)",
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        type=since_time,
        help="only executions started within a duration (1h, 30m) or after an RFC 3339 time",
    )


def since_time(text: str) -> float:
    """`--since`: a duration back from now, or an RFC 3339 moment; unix seconds."""
    try:
        return time.time() - parse_duration(text)
    except DurationError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (30m, 1h) nor an RFC 3339 time (2026-05-01T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def journal_path(args: argparse.Namespace) -> Path | str:
    """--journal, else the environment's or the default location: a SQLite file's path, or
    a PostgreSQL URL."""
    return journal_location(args.journal or None, os.environ)


def run(args: argparse.Namespace) -> int:
    """Print the executions (or one, with `show`); exit 1 when there is nothing to read."""
    execution_id: int | None = None
    if args.show not in (None, "show") or (args.show is None and args.id is not None):
        word = args.show if args.show is not None else args.id
        hint = f"`history show {word}`" if word.isdigit() else "`history show ID`"
        print(
            f"otel-lifecycle-hooks history: unexpected {word!r}; to see one execution, write"
            f" {hint}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.show is not None:
        try:
            execution_id = int(args.id)
        except (TypeError, ValueError):
            got = "nothing" if args.id is None else repr(args.id)
            print(
                f"otel-lifecycle-hooks history show: got {got}; give an execution's journal id,"
                " a number from the ID column of `history`",
                file=sys.stderr,
            )
            return EXIT_USAGE
    path = journal_path(args)
    if isinstance(path, Path) and not path.is_file():  # reading must not create a journal
        if args.json and execution_id is None:
            print("[]")
        # Nothing to show is exit 1, as for `trace` and `replay`.
        print(f"no executions: there is no journal at {path}", file=sys.stderr)
        return EXIT_NOTHING
    journal = open_journal(path)
    try:
        if execution_id is not None:
            return _show(journal, execution_id, args)
        if args.follow:
            return _follow(journal, args)
        rows = select_rows(
            journal,
            args.hook,
            args.failed,
            args.limit,
            agent=args.agent,
            session=args.session,
            statuses=args.status,
            since=args.since,
            event=args.event,
        )
        _note_backlog(journal)
        if not journal.healthy:
            return _unreadable(journal)
        names = agent_names(journal, rows)
    finally:
        journal.close()

    if args.json:
        print(json.dumps([row._asdict() for row in rows], indent=2))
    else:
        width = output_width(sys.stdout)
        print(table(rows, colour=wants_colour(sys.stdout), agent_names=names, width=width))
    return 0


def _note_backlog(journal: Journal) -> None:
    """One line on stderr when journal writes wait on this machine (a shared database was
    unavailable): the table may then lack them."""
    line = journal.backlog()
    if line:
        print(f"otel-lifecycle-hooks history: note: {line}", file=sys.stderr)


def _unreadable(journal: Journal) -> int:
    print(f"otel-lifecycle-hooks history: cannot read the journal {journal.path}", file=sys.stderr)
    return 1


def select_rows(
    journal: Any,
    hook: str | None,
    failed_only: bool,
    limit: int | None,
    *,
    agent: str | None = None,
    session: str | None = None,
    statuses: list[str] | None = None,
    since: float | None = None,
    event: str | None = None,
    after_id: int | None = None,
    oldest_first: bool = False,
    retention: Any = None,
) -> list[ExecutionRow]:
    """The newest `limit` executions that pass every filter given and the journal's
    retention (the environment's, unless `retention` is given)."""
    outcomes = tuple(statuses or ())
    if failed_only:
        outcomes = (
            tuple(o for o in outcomes if o in FAILED_OUTCOMES) if outcomes else FAILED_OUTCOMES
        )
        if not outcomes:
            return []
    return visible_executions(
        journal,
        retention=retention,
        agent_id=agent_ids(journal, agent),
        session_id=session_ids(journal, session),
        hook=hook,
        event=event,
        outcomes=outcomes or None,
        since=since,
        after_id=after_id,
        limit=limit,
        oldest_first=oldest_first,
    )


def agent_ids(journal: Any, given: str | None) -> tuple[str, ...] | None:
    """The agent ids `--agent` names: the id itself, and those of sessions whose agent has
    that name or whose agent id begins with it (what the table shows)."""
    if given is None:
        return None
    found = {given}
    for session in journal.sessions(limit=10_000):
        if session.agent_name == given or session.agent_id.startswith(given):
            found.add(session.agent_id)
    return tuple(sorted(found))


def session_ids(journal: Any, given: str | None) -> tuple[str, ...] | None:
    """The session ids `--session` names: the id itself, and those that begin with it."""
    if given is None:
        return None
    found = {given}
    found.update(
        s.session_id for s in journal.sessions(limit=10_000) if s.session_id.startswith(given)
    )
    return tuple(sorted(found))


def agent_names(journal: Any, rows: list[ExecutionRow]) -> dict[str, str]:
    """Session id -> its agent's name, for the sessions the rows belong to."""
    names: dict[str, str] = {}
    for session_id in {row.session_id for row in rows if row.session_id}:
        session = journal.session(session_id)
        if session is not None and session.agent_name:
            names[session_id] = session.agent_name
    return names


def table(
    rows: list[ExecutionRow],
    colour: bool = False,
    *,
    agent_names: dict[str, str] | None = None,
    header: bool = True,
    width: int | None = None,
    layout: TableLayout | None = None,
) -> str:
    """The rows as aligned text columns within `width` (None: no limit; see `fitting_steps`),
    a note under them naming what was left out; control characters escaped (a hook's message
    or error may quote what an endpoint or the agent wrote), outcomes coloured when `colour`.
    `layout` (from `follow_layout`) keeps the columns of successive calls aligned."""
    if not rows and header:
        return "no executions recorded"
    names = agent_names or {}
    cells = [tuple(escape_control(cell) for cell in _cells(row, names)) for row in rows]
    if layout is None:
        layout = fit_table(_COLUMNS, cells, width, fitting_steps())
    lines = layout.lines(cells, header=header, paint_cell=_outcome_painter(colour))
    note = layout.note(elsewhere=_ELSEWHERE) if header else ""
    return "\n".join([*lines, note] if note else lines)


def _outcome_painter(colour: bool) -> Callable[[int, str, str], str] | None:
    if not colour:
        return None
    outcome = _COLUMNS.index("OUTCOME")

    def painted(index: int, cell: str, padded: str) -> str:
        if index == outcome and cell in OUTCOME_COLOURS:
            return paint(cell, OUTCOME_COLOURS[cell], True) + padded[len(cell) :]
        return padded

    return painted


_ELSEWHERE = "history show ID has every column"


def fitting_steps() -> list[Step]:
    """How the table gets narrower for a terminal, least important first: columns every row
    leaves empty, a shorter STARTED, then ERROR cut, then ATTEMPTS, REPLAY_OF, DURATION,
    SESSION and AGENT left out in turn, hook and event names cut. Ids (ID, SESSION, REPLAY_OF
    and an agent's short id) are never cut; `history show ID` and `--json` have everything."""
    return [
        Step("omit", "REPLAY_OF", when_all="-"),
        Step("omit", "ERROR", when_all="-"),
        Step("compact", "STARTED", width=len("12-01 10:34:37Z"), shorter=_shorter_moment),
        Step("cut", "ERROR", 16),
        Step("omit", "ATTEMPTS"),
        Step("omit", "REPLAY_OF"),
        Step("omit", "DURATION"),
        Step("cut", "HOOK", 16),
        Step("cut", "EVENT", 16),
        Step("omit", "SESSION"),
        Step("cut", "ERROR", 8),
        Step("cut", "HOOK", 12),
        Step("cut", "EVENT", 12),
        Step("cut", "AGENT", SHORT_ID),
        Step("omit", "AGENT"),
    ]


def _shorter_moment(cell: str) -> str:
    """`2026-12-01 14:44:29Z` as `14:44:29Z` when it is today (UTC), else `12-01 14:44:29Z`."""
    day, _, clock = cell.partition(" ")
    if day == datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%d"):
        return clock
    return f"{day[5:]} {clock}" if clock else cell


def _moment(unix: float, *, millis: bool = False) -> str:
    moment = datetime.datetime.fromtimestamp(unix, tz=datetime.UTC)
    if millis:
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _result(status: int | None, exit_code: int | None) -> str:
    if exit_code is not None:
        return f"exit {exit_code}"
    return f"http {status}" if status is not None else "-"


def _cells(row: ExecutionRow, names: dict[str, str]) -> tuple[str, ...]:
    agent = names.get(row.session_id) or row.agent_id[:SHORT_ID]
    return (
        str(row.id),
        _moment(row.started_at),
        agent or "-",
        row.session_id[:SHORT_ID] or "-",
        row.hook,
        row.event + (" (recovered)" if row.recovered else ""),
        row.outcome,
        str(row.attempts),
        f"{row.duration_ms / 1000:.3f}s",
        _result(row.http_status, row.exit_code),
        row.error_type or "-",
        str(row.replayed_from) if row.replayed_from is not None else "-",
    )


# -- history --follow ------------------------------------------------------------------------


def _follow(journal: Journal, args: argparse.Namespace) -> int:
    """The newest matching rows, then every new one, until Ctrl-C (exit 0)."""
    colour = wants_colour(sys.stdout)
    layout = follow_layout(output_width(sys.stdout))

    def emit(rows: list[ExecutionRow]) -> None:
        if args.json:
            for row in rows:
                print(json.dumps(row._asdict()), flush=True)
        elif rows:
            names = agent_names(journal, rows)
            print(table(rows, colour, agent_names=names, header=False, layout=layout), flush=True)

    def read(after_id: int | None, limit: int | None) -> list[ExecutionRow]:
        rows = select_rows(
            journal, args.hook, args.failed, limit, agent=args.agent, session=args.session,
            statuses=args.status, since=args.since, event=args.event, after_id=after_id,
        )  # fmt: skip
        return list(reversed(rows))  # oldest first, as they happened

    try:
        first = read(None, args.limit)
        if not journal.healthy:
            return _unreadable(journal)
        if not args.json:
            header = layout.lines([], header=True) + [layout.note(elsewhere=_ELSEWHERE)]
            print("\n".join(header).rstrip(), flush=True)
        emit(first)
        last = max((row.id or 0 for row in first), default=_newest_id(journal))
        # A delivery journaled while retrying is rewritten in place (same id) when it ends:
        # its line is printed again then, with its outcome.
        running = {row.id or 0 for row in first if row.outcome == RUNNING}
        while True:
            time.sleep(FOLLOW_INTERVAL)
            again = [journal.get(row_id) for row_id in sorted(running)]
            ended = [row for row in again if row is not None and row.outcome != RUNNING]
            running = {row.id or 0 for row in again if row is not None and row.outcome == RUNNING}
            new = read(last, None)
            if ended or new:
                emit(ended + new)
            if new:
                last = max(row.id or 0 for row in new)
                running |= {row.id or 0 for row in new if row.outcome == RUNNING}
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # `history --follow | head`: the reader went away
        return 0


def follow_layout(width: int | None) -> TableLayout:
    """The columns of `--follow`, fixed at its start, wide enough for most rows so that later
    rows line up: RESULT fits "http 200", ERROR "ConnectError"."""
    least = [len(column) for column in _COLUMNS]
    for index, wide in (
        (1, 20), (2, SHORT_ID), (3, SHORT_ID), (4, 16), (5, 14), (8, 8), (9, 8), (10, 12)
    ):  # fmt: skip
        least[index] = max(least[index], wide)
    # No row is known yet: no column is left out for being empty in every row.
    steps = [step for step in fitting_steps() if step.when_all is None]
    return fit_table(_COLUMNS, [], width, steps, least=least)


def _newest_id(journal: Any) -> int:
    newest = journal.executions(limit=1)
    return newest[0].id or 0 if newest else 0


# -- history show ID ---------------------------------------------------------------------------


def _show(journal: Journal, execution_id: int, args: argparse.Namespace) -> int:
    retention = retention_from(os.environ)
    row = visible_execution(journal, execution_id, retention)
    if not journal.healthy:
        return _unreadable(journal)
    if row is None:
        beyond = "" if journal.get(execution_id) is None else " any more (beyond retention)"
        kept = retention.describe()
        print(
            f"otel-lifecycle-hooks history show: no execution {execution_id} in the journal"
            f" {journal.path}{beyond}; `history` lists the ids it holds"
            f" (retention {kept}, set by $LIFECYCLE_HOOKS_JOURNAL_RETENTION)",
            file=sys.stderr,
        )
        return EXIT_NOTHING
    attempts = journal.attempts(row.row_uid)
    session = journal.session(row.session_id) if row.session_id else None
    if args.json:
        shown = execution_dict(row)
        shown["agent_name"] = session.agent_name if session is not None else ""
        # As journal.views.get_execution: the list under "attempts", the count beside it.
        shown["attempt_count"] = row.attempts
        shown["attempts"] = [attempt_dict(attempt) for attempt in attempts]
        print(json.dumps(shown, indent=2))
        return 0
    print(describe(row, attempts, session, colour=wants_colour(sys.stdout)))
    return 0


def describe(
    row: ExecutionRow, attempts: list[AttemptRow], session: Any = None, colour: bool = False
) -> str:
    """One execution and its attempts as text, every value escaped: the endpoint wrote some."""

    def e(value: object) -> str:
        return escape_control(value)

    def body_lines(prefix: str, body: str | None) -> list[str]:
        if body is None or body == "":
            return []
        return [prefix.rstrip()] + [
            f"{prefix}{escape_control(line)}" for line in body.splitlines() or [""]
        ]

    outcome = paint(e(row.outcome), OUTCOME_COLOURS.get(row.outcome, DIM), colour)
    agent = session.agent_name if session is not None and session.agent_name else ""
    lines = [
        f"execution {row.id}: {e(row.hook)} on {e(row.event)}"
        + (" (recovered)" if row.recovered else ""),
        f"  outcome     {outcome} after {row.attempts} attempt{'s' if row.attempts != 1 else ''}"
        f" in {row.duration_ms / 1000:.3f}s"
        + (
            f", {_result(row.http_status, row.exit_code)}"
            if row.http_status or row.exit_code is not None
            else ""
        )
        + (f", {e(row.error_type)}" if row.error_type else ""),
    ]  # fmt: skip
    if row.message:
        lines.append(f"  message     {e(row.message)}")
    lines += [
        f"  started     {_moment(row.started_at, millis=True)}",
        f"  agent       {e(agent) + ' ' if agent else ''}{e(row.agent_id) or '-'}",
        f"  session     {e(row.session_id) or '-'}",
    ]
    if row.idempotency_key:
        lines.append(f"  hook id     {e(row.idempotency_key)}")
    if row.trace_id:
        lines.append(f"  trace       {e(row.trace_id)} span {e(row.span_id)}")
    if row.replayed_from is not None:
        lines.append(f"  replay of   {row.replayed_from}")
    if not attempts:
        lines += ["", "  (no attempt recorded" + _why_no_attempts(row) + ")"]
    for attempt in attempts:
        status = paint(e(attempt.outcome), OUTCOME_COLOURS.get(attempt.outcome, DIM), colour)
        head = (
            f"attempt {attempt.attempt} of {row.attempts}"
            f"  {_moment(attempt.started_at, millis=True)}"
            f"  {status}  {attempt.duration_ms:.0f} ms"
        )
        if attempt.error_type:
            head += f"  {e(attempt.error_type)}"
        lines += ["", head]
        if attempt.message:
            lines.append(f"  {e(attempt.message)}")
        request = attempt.request or {}
        if "method" in request:
            lines.append(f"> {e(request['method'])} {e(request.get('url', ''))}")
            lines += [f"> {e(name)}: {e(value)}" for name, value in request.get("headers") or ()]
            lines += body_lines("> ", request.get("body"))
        elif "argv" in request:
            lines.append("$ " + " ".join(e(arg) for arg in request["argv"]))
        if attempt.response_status is not None or attempt.response_headers:
            lines.append(f"< HTTP {attempt.response_status}")
            lines += [f"< {e(name)}: {e(value)}" for name, value in attempt.response_headers or ()]
            lines += body_lines("< ", attempt.response_body)
        elif "method" in request:
            lines.append("< (no response)")
        if attempt.exit_code is not None:
            lines.append(f"  exit code {attempt.exit_code}")
        lines += body_lines("  stdout| ", attempt.stdout)
        lines += body_lines("  stderr| ", attempt.stderr)
    return "\n".join(lines)


def _why_no_attempts(row: ExecutionRow) -> str:
    if row.outcome in ("skipped", "refused", "dropped"):
        return f": it was {row.outcome} before any was made"
    return ": journaled by an earlier version, or no attempt was made"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
