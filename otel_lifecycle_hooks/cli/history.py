"""`history [--agent ID] [--session ID] [--hook NAME] [--status OUTCOME]... [--since WHEN]
[--failed] [--limit N] [--json] [--journal URL]`: the journal's executions, newest first.

A journal shared by a fleet (PostgreSQL, docs/fleet.md) holds every agent's executions: the
filters narrow them to one agent, session, hook, outcome or time.

Each line is one execution: its journal id (what `replay` takes), when it started, the hook
and event, how it ended, its attempts and duration, the HTTP status or exit code, the error
type, and for a replay the id of the row it re-sent. Exit 0; 1 when there is no journal or it
cannot be read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..journal import ExecutionRow

DEFAULT_LIMIT = 20
_COLUMNS = (
    "ID",
    "STARTED",
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
        help="show hook executions from the journal, newest first",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_filter_options(parser)
    parser.add_argument(
        "--failed", action="store_true", help="only failed and timed-out executions"
    )
    parser.add_argument(
        "--limit",
        type=_positive,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"at most N rows (default {DEFAULT_LIMIT})",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON array")
    add_journal_option(parser)


def add_journal_option(parser: argparse.ArgumentParser) -> None:
    """`--journal URL`, shared with `replay` and `reconcile`."""
    parser.add_argument(
        "--journal",
        metavar="URL",
        help="execution journal: a path, sqlite:///PATH or postgresql://... (default: "
        "$OTEL_LIFECYCLE_HOOKS_JOURNAL, else ~/.local/state/otel-lifecycle-hooks/journal.sqlite3)",
    )


def add_filter_options(parser: argparse.ArgumentParser) -> None:
    """The fleet views' filters, shared with `replay`."""
    parser.add_argument("--agent", metavar="ID", help="only this agent's executions (its AGENT_ID)")
    parser.add_argument("--session", metavar="ID", help="only this session's executions")
    parser.add_argument("--hook", metavar="NAME", help="only this hook's executions")
    parser.add_argument(
        "--status",
        action="append",
        metavar="OUTCOME",
        choices=("success", "failed", "timeout", "dropped", "skipped", "refused"),
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
    import time

    from ..template.durations import DurationError, parse_duration

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
    from ..journal import journal_location

    return journal_location(args.journal or None, os.environ)


def run(args: argparse.Namespace) -> int:
    """Print the executions; exit 1 when the journal exists but cannot be read."""
    from ..journal import open_journal
    from .console import EXIT_NOTHING, wants_colour

    path = journal_path(args)
    if isinstance(path, Path) and not path.is_file():  # reading must not create a journal
        if args.json:
            print("[]")
        # Nothing to show is exit 1, as for `trace` and `replay`.
        print(f"no executions: there is no journal at {path}", file=sys.stderr)
        return EXIT_NOTHING
    journal = open_journal(path)
    try:
        rows = select_rows(
            journal,
            args.hook,
            args.failed,
            args.limit,
            agent=args.agent,
            session=args.session,
            statuses=args.status,
            since=args.since,
        )
        if not journal.healthy:
            shown = getattr(journal, "path", path)
            print(f"otel-lifecycle-hooks history: cannot read the journal {shown}", file=sys.stderr)
            return 1
    finally:
        journal.close()
    if args.json:
        print(json.dumps([row._asdict() for row in rows], indent=2))
    else:
        print(table(rows, colour=wants_colour(sys.stdout)))
    return 0


def select_rows(
    journal: Any,
    hook: str | None,
    failed_only: bool,
    limit: int,
    *,
    agent: str | None = None,
    session: str | None = None,
    statuses: list[str] | None = None,
    since: float | None = None,
) -> list[ExecutionRow]:
    """The newest `limit` executions that pass every filter given."""
    from ..journal import FAILED_OUTCOMES

    outcomes = tuple(statuses or ())
    if failed_only:
        outcomes = (
            tuple(o for o in outcomes if o in FAILED_OUTCOMES) if outcomes else FAILED_OUTCOMES
        )
        if not outcomes:
            return []
    return list(
        journal.executions(
            agent_id=agent,
            session_id=session,
            hook=hook,
            outcomes=outcomes or None,
            since=since,
            limit=limit,
        )
    )


def table(rows: list[ExecutionRow], colour: bool = False) -> str:
    """The rows as aligned text columns; control characters escaped (a hook's message or error
    may quote what an endpoint or the agent wrote), outcomes coloured when `colour`."""
    from .console import OUTCOME_COLOURS, escape_control, paint

    if not rows:
        return "no executions recorded"
    cells = [_COLUMNS] + [tuple(escape_control(cell) for cell in _cells(row)) for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS))]
    outcome = _COLUMNS.index("OUTCOME")

    def shown(index: int, cell: str, width: int, header: bool) -> str:
        text = cell.ljust(width)
        if colour and index == outcome and not header and cell in OUTCOME_COLOURS:
            return paint(cell, OUTCOME_COLOURS[cell], True) + text[len(cell) :]
        return text

    return "\n".join(
        "  ".join(
            shown(i, cell, width, n == 0) for i, (cell, width) in enumerate(zip(line, widths))
        ).rstrip()
        for n, line in enumerate(cells)
    )


def _cells(row: ExecutionRow) -> tuple[str, ...]:
    started = datetime.datetime.fromtimestamp(row.started_at, tz=datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%SZ"
    )
    result = f"http {row.http_status}" if row.http_status is not None else ""
    if row.exit_code is not None:
        result = f"exit {row.exit_code}"
    return (
        str(row.id),
        started,
        row.hook,
        row.event + (" (recovered)" if row.recovered else ""),
        row.outcome,
        str(row.attempts),
        f"{row.duration_ms / 1000:.3f}s",
        result or "-",
        row.error_type or "-",
        str(row.replayed_from) if row.replayed_from is not None else "-",
    )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
