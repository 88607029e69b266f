"""`reconcile --template T... [--journal URL] [--stale-after 60s] [--watch [--interval 10s]]
[--concurrency N] [--dry-run] [--json]`

Runs, from here, the owed pre-stop and session-end hooks of every session in the journal whose
supervisor died: sessions that began post-start, never ended, were never recovered, and whose
heartbeat is older than --stale-after on the journal's own clock, counted from the database's
return when it was away (and, where their pids can be looked up from here, whose supervisor
and agent are gone). Each hook is sent with the X-Scion-Hook-ID the session used or
would have used, rendered from the template named here (--template, parent first, or
$LIFECYCLE_HOOKS_TEMPLATE), never from the one the session journaled: the agent may have
written its row. Only sessions whose rows are sealed under the journal key
($LIFECYCLE_HOOKS_JOURNAL_KEY or the file $LIFECYCLE_HOOKS_JOURNAL_KEY_FILE names: the key the
supervisors seal their session rows with, which their agents never get) are recovered; a row
without a seal, or whose seal does not match it, is left alone and reported, and without a key
every session is. Only sessions that ran that template (their journaled sha256) are recovered;
the others are left alone and reported. The session's journaled metadata (sealed: written by a
supervisor from its operator's values) and variables fill what this
process's environment does not set, as content only: a variable that decides where a request
goes (a URL's scheme, host or port, the Host header) or what a script runs comes from this
environment (and SCION_* for agent metadata) or the template, never the journal; a session
needing one this environment does not set is left alone, naming it. Secrets come from this
process's environment, as they did from the agent's. Exactly once across any number of
reconcilers at once: each session is taken by one atomic claim. --dry-run lists what would be
sent, and sends nothing. Up to --concurrency sessions (default 8) are recovered at once, each by
one thread: a fleet's lost pods are not recovered one after another. As root on a machine with
cgroup v2, each pass also kills what the agents of supervisors that died on this machine left
running (their cgroups). Exit 0; 1 when the journal or template cannot be read; 2 on a bad option or
no template named.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .. import confinement
from .. import events as ev
from ..engine.destination import (
    journaled_metadata,
    journaled_variables,
    operator_metadata,
    unsupplied,
)
from ..engine.engine import HookEngine
from ..journal import open_journal
from ..journal.base import Journal
from ..journal.seal import JournalKeyError, journal_key, unvouched
from ..supervisor import recovery
from ..systems import load_templates
from ..telemetry.metrics import JournalLosses
from ..telemetry.setup import configure_telemetry
from ..template.durations import DurationError, parse_duration
from ..template.problems import TemplateError
from ..variables import format_unix_timestamp
from .history import add_journal_option, journal_path
from .replay import operator_templates

log = logging.getLogger("otel_lifecycle_hooks.reconcile")

DEFAULT_INTERVAL = "10s"
DEFAULT_CONCURRENCY = 8  # sessions recovered at once: each waits mostly on its hooks' endpoints
MAX_CONCURRENCY = 64


def add_parser(subparsers: Any) -> None:
    """Register the `reconcile` command."""
    parser = subparsers.add_parser(
        "reconcile",
        help="run the owed pre-stop and session-end hooks of sessions whose supervisor died",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--stale-after",
        default="60s",
        metavar="DURATION",
        help="a heartbeat older than this, on the database's clock, is a dead supervisor's "
        "(default 60s; the supervisors' heartbeat is every 10s, $LIFECYCLE_HOOKS_HEARTBEAT)",
    )
    parser.add_argument(
        "--watch", action="store_true", help="keep reconciling, every --interval, until stopped"
    )
    parser.add_argument(
        "--interval",
        default=DEFAULT_INTERVAL,
        metavar="DURATION",
        help=f"with --watch: time between passes (default {DEFAULT_INTERVAL})",
    )
    parser.add_argument("--agent", metavar="ID", help="only sessions of this agent id")
    parser.add_argument(
        "--concurrency",
        type=_concurrency,
        default=DEFAULT_CONCURRENCY,
        metavar="N",
        help=f"sessions recovered at once (1 to {MAX_CONCURRENCY}; default {DEFAULT_CONCURRENCY})",
    )
    parser.add_argument(
        "--template", "-t", action="append", default=[], metavar="FILE",
        help="the agents' template files (parent first; default $LIFECYCLE_HOOKS_TEMPLATE): "
        "the only ones owed hooks are rendered from",
    )  # fmt: skip
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would be sent; send nothing"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per session")
    add_journal_option(parser)
    parser.set_defaults(func=run)


def _concurrency(text: str) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(
            f"{text!r}: write a whole number of sessions from 1 to {MAX_CONCURRENCY}"
        )
    return int(text)


def run(args: argparse.Namespace) -> int:
    try:
        stale_after = parse_duration(args.stale_after)
        interval = parse_duration(args.interval)
    except DurationError as exc:
        print(f"otel-lifecycle-hooks reconcile: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="otel-lifecycle-hooks: %(message)s")
    template = _named_template(args)
    if isinstance(template, int):
        return template
    try:
        key = journal_key(os.environ)
    except JournalKeyError as exc:
        print(f"otel-lifecycle-hooks reconcile: {exc}", file=sys.stderr)
        return 2
    if not args.dry_run and not args.watch:
        # What a supervisor killed on this machine left running (root with cgroup v2 only).
        confinement.sweep_orphaned_groups(os.environ)
    location = journal_path(args)
    if isinstance(location, Path) and not location.is_file() and not args.watch:
        print(f"nothing to reconcile: there is no journal at {location}")  # none is made
        return 0
    journal = open_journal(location)
    stop = threading.Event()
    if args.watch and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    try:
        while True:
            if args.watch and not args.dry_run:
                confinement.sweep_orphaned_groups(os.environ)
            for report in reconcile_pass(
                journal, stale_after, args.agent, args.dry_run, template, key,
                concurrency=args.concurrency,
            ):  # fmt: skip
                print(json.dumps(report) if args.json else _line(report), flush=True)
            if not journal.healthy:
                print(
                    f"otel-lifecycle-hooks reconcile: cannot read the journal {journal.path}",
                    file=sys.stderr,
                    flush=True,
                )
                if not args.watch:
                    return 1
            if not args.watch or stop.wait(interval):
                return 0
    finally:
        journal.close()


def _named_template(args: argparse.Namespace) -> Any:
    """The template the operator named, loaded; or the exit code when there is none."""
    paths = operator_templates(args.template, os.environ)
    if not paths:
        print(
            "otel-lifecycle-hooks reconcile: name the agents' template with --template FILE "
            "(parent first) or $LIFECYCLE_HOOKS_TEMPLATE: owed hooks are rendered only from a "
            "template you name, never from the one a session journaled (the agent may have "
            "written it); `reconcile --dry-run --template FILE` lists the sessions of others",
            file=sys.stderr,
        )
        return 2
    try:
        return load_templates([Path(path) for path in paths])
    except (TemplateError, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"otel-lifecycle-hooks reconcile: {first}", file=sys.stderr)
        return 1


def reconcile_pass(
    journal: Any,
    stale_after: float,
    agent_id: str | None,
    dry_run: bool,
    template: Any,
    key: bytes | None = None,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> list[dict[str, Any]]:
    """One pass over the journal's unfinished sessions, recovering with `template` those that
    ran it and whose rows are sealed under `key`, up to `concurrency` at once; a report per
    session acted on, refused or left for another template (and, in a dry run, per session
    that would be, or is left alone), in the order the sessions started."""
    here = recovery.process_namespace()
    digests = recovery.template_digests(template)
    # The journal's clock, read before its rows: a heartbeat written meanwhile is only newer.
    # None: it cannot be read (the caller reports it), and nothing is judged.
    clock = journal.liveness_clock()
    if clock is None:
        return []
    rows = journal.unfinished_sessions(agent_id)

    def one(row: Any) -> dict[str, Any] | None:
        return _reconcile_session(
            journal, row, stale_after, dry_run, template, key, here, digests, clock
        )

    if concurrency <= 1 or len(rows) <= 1:
        found = [one(row) for row in rows]
    else:
        # Claims are atomic (one UPDATE each), so sessions recovered side by side are each
        # recovered once, as they are across reconcilers.
        with ThreadPoolExecutor(concurrency, thread_name_prefix="reconcile") as pool:
            found = list(pool.map(one, rows))
    return [report for report in found if report is not None]


def _reconcile_session(
    journal: Any,
    row: Any,
    stale_after: float,
    dry_run: bool,
    template: Any,
    key: bytes | None,
    here: Any,
    digests: Any,
    clock: Any,
) -> dict[str, Any] | None:
    """What a pass does with one unfinished session; its report, or None when there is
    nothing to say (alive outside a dry run, or taken by another reconciler)."""
    gone, why = recovery.earlier_run_gone(
        row, here=here, now=clock.now, stale_after=stale_after,
        require_stale_heartbeat=True, alive_since=clock.alive_since,
    )  # fmt: skip
    base = {"session": row.session_id, "agent_id": row.agent_id, "agent": row.agent_name}
    if not gone:
        return {**base, "action": "left alone", "reason": why} if dry_run else None
    refused = unvouched(key, row)
    if refused:
        # Nothing is sent and nothing claimed: a supervisor's own rows are sealed.
        return {**base, "action": "left alone", "reason": refused}
    other = recovery.other_template(row, digests)
    if other:
        # Not lost: it stays unfinished for a reconcile with its own template.
        return {**base, "action": "left alone", "reason": other}
    steered = _unsupplied(journal, row, template)
    if steered:
        # Nothing is sent and nothing claimed: it stays owed for a reconcile that sets them.
        return {**base, "action": "left alone", "reason": steered}
    if dry_run:
        return {**base, "action": "would recover", "hooks": _planned(row, template)}
    claimed, refused = recovery.claim_vouched(
        journal, row, key, here, require_seal=True, now=clock.now
    )
    if refused:
        return {**base, "action": "left alone", "reason": refused}
    if claimed is None:
        return None  # another reconciler (or run) has it
    try:
        done = _recover(journal, claimed, template)
    except Exception as exc:  # noqa: BLE001 - one session's failure never stops the pass
        log.error("session %s: recovery failed: %s", row.session_id, exc)
        return {**base, "action": "failed", "reason": str(exc)}
    if not done.failed:
        return {**base, "action": "recovered", "hooks": done.fired}
    # A hook that did not deliver is not done: the session stays owed (the next pass sends it
    # again, with the same id) until it is given up after RECOVERY_PASSES passes.
    action = "given up" if done.gave_up else "still owed"
    return {**base, "action": action, "hooks": done.fired, "failed": done.failed}


def _unsupplied(journal: Any, row: Any, template: Any) -> str:
    """Why `row` cannot be recovered from here: the variables deciding where one of its owed
    hooks' requests goes that this environment does not set ("" when none)."""
    operator = operator_metadata(template, os.environ)
    journaled = journal.executions(session_id=row.session_id)
    missing = [
        item
        for hook in recovery.owed_hooks(template, row, journaled)
        for item in unsupplied(hook, template, os.environ, operator)
    ]
    if not missing:
        return ""
    return "; ".join(item.message() for item in missing) + "; nothing was sent, it stays owed"


def _recover(journal: Journal, row: Any, template: Any) -> Any:
    """Send `row`'s owed hooks; the recovery.Recovery of it (what was sent, what failed)."""
    # The session's journaled values fill only what this environment does not set, and only
    # as content: the agent may have written them, so none decides where a request goes,
    # what runs, which credential is attached, or this process's own settings.
    environ = {**journaled_variables(row.variables or {}, template), **os.environ}
    telemetry = _telemetry(template, environ, row)
    failed: dict[str, int] = {"recovery_failed": 0}
    if telemetry is not None:
        # Owed hooks failed in this recovery, exported with its spans when it ends.
        JournalLosses(lambda: dict(failed), telemetry.meter_provider)
    engine = HookEngine(
        template,
        journal=journal,
        environ=environ,
        tracer_provider=telemetry.tracer_provider if telemetry else None,
        meter_provider=telemetry.meter_provider if telemetry else None,
    )
    try:
        # The row is sealed (a supervisor wrote its metadata from its operator's values); a
        # name deciding where a request goes still takes this environment's value.
        operator = operator_metadata(template, os.environ)
        done = recovery.recover_session(
            journal,
            row,
            lambda hook, event, info, _deadline: engine.executor.run(hook, event, info),
            template,
            journaled_metadata(row.metadata or operator, operator, template),
        )
        failed["recovery_failed"] = len(done.failed)
        journal.flush()  # the recovered mark and rows written now, not at exit (PostgreSQL)
    finally:
        engine.shutdown()
        if telemetry is not None:
            telemetry.shutdown()
    return done


def _telemetry(template: Any, environ: dict[str, str], row: Any) -> Any:
    """The session's telemetry set-up from OTEL_*, so that recovered hooks have their spans
    (under the session's agent attributes); None when it cannot be built."""
    resource = {
        attr: row.metadata[name]
        for name, attr in ev.METADATA_ATTRIBUTES.items()
        if row.metadata.get(name)
    }
    try:
        return configure_telemetry(
            template.env, environ, resource_attributes=resource, session_id=row.session_id
        )
    except Exception as exc:  # noqa: BLE001 - telemetry never stops a hook
        log.warning("session %s: telemetry not set up: %s", row.session_id, exc)
        return None


def _planned(row: Any, template: Any) -> list[str]:
    """What a claim would send: each owed hook with its id where its moment is fixed."""
    agent_id = row.metadata.get("AGENT_ID", row.agent_id)
    planned: list[str] = []
    pre_stop_owed = row.pre_stop_at is not None or row.session_end_at is None
    for event, moment, owed in (
        ("pre-stop", row.pre_stop_at, pre_stop_owed),
        ("session-end", row.session_end_at, True),
    ):
        if not owed:
            continue
        for hook in template.hooks_for(event):
            stamp = "(fixed when claimed)" if moment is None else format_unix_timestamp(moment)
            planned.append(f"{event}/{hook.name} {agent_id}:{hook.name}:{event}:{stamp}")
    return planned


def _line(report: dict[str, Any]) -> str:
    agent = report["agent"] or report["agent_id"]
    head = f"{report['action']}: session {report['session']} of {agent}"
    if "reason" in report:
        return f"{head} ({report['reason']})"
    hooks = report.get("hooks") or []
    failed = set(report.get("failed") or ())
    return head + (
        "".join(f"\n  {hook}" + (" (failed)" if hook in failed else "") for hook in hooks)
        if hooks
        else " (nothing owed)"
    )
