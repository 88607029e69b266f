"""`replay [ID...] [--failed] [--agent ID] [--session ID] [--hook NAME] [--event EVENT]
[--status OUTCOME]... [--since WHEN] [--last N] [--journal URL] [--template T]... [--dry-run]
[--json]`: re-send failed deliveries from the journal (in a fleet's shared journal, of every
agent, or those the filters name).

The filters are `history`'s: `replay --failed` re-sends what `history --failed` lists (those
not delivered by an earlier replay), oldest first; `replay --session 5e55101a --hook notify`
those of one session and hook; `--last N` only the newest N of them; `--dry-run` shows them.
`--all-failed` is the older name of `--failed`.

Each failed or timed-out http/webhook delivery is sent again, once, with the same idempotency
key (`X-Scion-Hook-ID`, and `webhook-id` when signed); the outcome is recorded as a new journal
row whose REPLAY_OF (`history`) names the original. Secrets are not journaled: credentials
and redacted values are resolved again from the hook's template and the current environment.
That template is one you name, with --template (parent first) or $LIFECYCLE_HOOKS_TEMPLATE:
the journal may be written by the agent, so the template it names is never loaded; a replay
without one is refused with the command that names it. Scripts are not replayed. Each replay
is traced as a delivery is (a hook span linked to the original's, its traceparent on the
request, the delivery metrics), to the telemetry OTEL_* configures (by default the local trace
file).

Exit 0 when every replay was delivered (or there was nothing to replay), 1 when one failed or
was refused, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..journal import FAILED_OUTCOMES, open_journal
from ..replay import Replayer
from ..telemetry.setup import configure_telemetry
from .console import escape_control
from .history import (
    add_filter_options,
    add_journal_option,
    add_last_option,
    agent_ids,
    journal_path,
    session_ids,
)


def add_parser(subparsers: Any) -> None:
    """Register the `replay` command."""
    parser = subparsers.add_parser(
        "replay",
        help="re-send failed deliveries from the journal, with their idempotency keys",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "ids", nargs="*", type=int, metavar="ID", help="journal ids (see `history --failed`)"
    )
    parser.add_argument(
        "--failed", "--all-failed", dest="all_failed", action="store_true",
        help="every failed delivery not yet replayed (`history --failed`'s list)",
    )  # fmt: skip
    add_filter_options(parser, outcomes=FAILED_OUTCOMES)  # what replay may re-send
    add_last_option(parser, None)
    parser.add_argument(
        "--template", "-t", action="append", default=[], metavar="FILE",
        help="the template files to render from (parent first; default "
        "$LIFECYCLE_HOOKS_TEMPLATE); the journal's own are never loaded",
    )  # fmt: skip
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would be sent; send nothing"
    )
    parser.add_argument("--json", action="store_true", help="print the outcomes as a JSON array")
    add_journal_option(parser)


def run(args: argparse.Namespace) -> int:
    """Replay the chosen rows and print each outcome."""
    filtered = any(
        value is not None
        for value in (
            args.agent, args.session, args.hook, args.event, args.status, args.since, args.limit,
        )
    )  # fmt: skip
    if not args.ids and not args.all_failed and not filtered:
        print(
            "otel-lifecycle-hooks replay: name execution IDs, pass --failed, or choose"
            " failed deliveries with history's filters (--agent, --session, --hook, --event,"
            " --status, --since, --last)",
            file=sys.stderr,
        )
        return 2
    since = args.since
    path = journal_path(args)
    if isinstance(path, Path) and not path.is_file():
        print(f"otel-lifecycle-hooks replay: there is no journal at {path}", file=sys.stderr)
        return 1
    journal = open_journal(path)
    telemetry = None if args.dry_run else replay_telemetry("replay")
    replayer = Replayer(
        journal,
        templates=operator_templates(args.template, os.environ),
        environ=dict(os.environ),
        journal_args=("--journal", shown_location(args.journal)) if args.journal else (),
        tracer_provider=telemetry.tracer_provider if telemetry is not None else None,
        meter_provider=telemetry.meter_provider if telemetry is not None else None,
    )
    try:
        outcomes = [
            replayer.replay(row, dry_run=args.dry_run)
            for row in replayer.select(
                args.ids,
                args.all_failed or (filtered and not args.ids),
                since,
                agent=agent_ids(journal, args.agent),
                session=session_ids(journal, args.session),
                hook=args.hook,
                event=args.event,
                outcomes=args.status,
                last=args.limit,
            )
        ]
        if not journal.healthy:
            print(
                f"otel-lifecycle-hooks replay: the journal {path} cannot be used", file=sys.stderr
            )
            return 1
    finally:
        replayer.close()
        journal.close()
        if telemetry is not None:
            telemetry.shutdown()
    if args.json:
        print(json.dumps([outcome.as_dict() for outcome in outcomes], indent=2))
    elif not outcomes:
        print("nothing to replay")
    for outcome in outcomes if not args.json else ():
        print(_line(outcome))
        if outcome.outcome == "dry-run" and outcome.request is not None:
            print("  " + json.dumps(outcome.request))
    done = ("success", "dry-run")
    return 0 if all(outcome.outcome in done for outcome in outcomes) else 1


def replay_telemetry(command: str) -> Any:
    """The telemetry a replay's hook span and metrics go to, from this command's OTEL_* (the
    local trace file when no exporter is named), as a delivery's; None when it cannot be
    built: telemetry never stops a replay."""
    try:
        return configure_telemetry(None, os.environ)
    except Exception as exc:  # noqa: BLE001 - telemetry never stops a replay
        print(f"otel-lifecycle-hooks {command}: telemetry not set up: {exc}", file=sys.stderr)
        return None


def operator_templates(given: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The templates the operator named: --template, else $LIFECYCLE_HOOKS_TEMPLATE (or the
    older $OTEL_LIFECYCLE_HOOKS_TEMPLATE), `os.pathsep`-separated. `run`'s last default,
    ./scion-agent.yaml, is not one: the working directory may be the agent's."""
    if given:
        return list(given)
    named = environ.get("LIFECYCLE_HOOKS_TEMPLATE") or environ.get(
        "OTEL_LIFECYCLE_HOOKS_TEMPLATE", ""
    )
    return [path for path in named.split(os.pathsep) if path]


def shown_location(location: str) -> str:
    """--journal as the operator gave it, but a URL's password left out: it goes into a
    message."""
    try:
        parts = urlsplit(location)
        password = parts.password
    except ValueError:
        return location
    if not password:
        return location
    netloc = parts.netloc.replace(f":{password}@", ":PASSWORD@", 1)
    return parts._replace(netloc=netloc).geturl()


def _line(outcome: Any) -> str:
    """One outcome's line, escaped: its hook, event and message come from the journal and
    the endpoint."""
    target = f"#{outcome.source_id} {outcome.hook}/{outcome.event}"
    result = outcome.outcome
    if outcome.status_code is not None:
        result += f" (http {outcome.status_code})"
    recorded = f" -> #{outcome.new_id}" if outcome.new_id is not None else ""
    detail = f": {outcome.message}" if outcome.message else ""
    return escape_control(f"{target}: {result}{recorded}{detail}")
