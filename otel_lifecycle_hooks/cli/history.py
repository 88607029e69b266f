"""`history [--hook NAME] [--failed] [--limit N] [--json] [--journal PATH]`: the journal's
executions, newest first.

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
    parser.add_argument("--hook", metavar="NAME", help="only this hook's executions")
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
    """`--journal PATH`, shared with `replay`."""
    parser.add_argument(
        "--journal",
        metavar="PATH",
        help="execution journal (default: $OTEL_LIFECYCLE_HOOKS_JOURNAL, else "
        "~/.local/state/otel-lifecycle-hooks/journal.sqlite3)",
    )


def journal_path(args: argparse.Namespace) -> Path:
    """--journal, else the environment's or the default location."""
    from ..journal import default_journal_path

    return Path(args.journal) if args.journal else default_journal_path(os.environ)


def run(args: argparse.Namespace) -> int:
    """Print the executions; exit 1 when the journal exists but cannot be read."""
    from ..journal import Journal
    from .console import EXIT_NOTHING, wants_colour

    path = journal_path(args)
    if not path.is_file():  # reading must not create a journal
        if args.json:
            print("[]")
        # Nothing to show is exit 1, as for `trace` and `replay`.
        print(f"no executions: there is no journal at {path}", file=sys.stderr)
        return EXIT_NOTHING
    journal = Journal(path)
    try:
        rows = select_rows(journal, args.hook, args.failed, args.limit)
        if not journal.healthy:
            print(f"otel-lifecycle-hooks history: cannot read the journal {path}", file=sys.stderr)
            return 1
    finally:
        journal.close()
    if args.json:
        print(json.dumps([row._asdict() for row in rows], indent=2))
    else:
        print(table(rows, colour=wants_colour(sys.stdout)))
    return 0


def select_rows(
    journal: Any, hook: str | None, failed_only: bool, limit: int
) -> list[ExecutionRow]:
    """The newest `limit` executions, of one hook and/or only the failed ones."""
    if not failed_only:
        return list(journal.recent(hook_name=hook, limit=limit))
    failed = [row for row in journal.failed() if hook is None or row.hook == hook]
    return list(reversed(failed))[:limit]


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
