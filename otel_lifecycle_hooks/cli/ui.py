"""`ui [--port N] [--host ADDRESS] [--journal URL] [--template T]... [--trace-url TEMPLATE]`: a
local web page of the journal: its delivery log (filtered, searched, paged), its sessions, each
delivery's attempts, per-hook figures, and a Redeliver button.

The first line printed is the page's URL, its access token included: open it in a browser on
this machine. The page is served on a loopback address only and answers only requests that
carry the token (docs/ui.md). It follows the journal as sessions run. Redeliver runs what
`replay ID` runs, reading credentials from this command's environment and the hook's template:
one you name with --template (parent first) or $LIFECYCLE_HOOKS_TEMPLATE, never the one the
journal names (the agent may write the journal); without one, Redeliver is refused with the
command that restarts the page with it. Stop it with Ctrl-C.

Exit 0 when stopped, 1 when there is no journal or the port cannot be bound, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

from ..journal import open_journal
from ..ui.server import NotLoopback, PageServer, serve
from ..ui.views import BadQuery, trace_url_template
from .history import add_journal_option, journal_path
from .replay import operator_templates, replay_telemetry, shown_location

# Where `--trace-url` is read from when it is not given.
TRACE_URL_ENV = "LIFECYCLE_HOOKS_TRACE_URL"


def add_parser(subparsers: Any) -> None:
    """Register the `ui` command."""
    parser = subparsers.add_parser(
        "ui",
        help="a local web page of sessions, deliveries and attempts, with redeliver",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=0,
        metavar="N",
        help="port to serve on (default: any free one)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="loopback address to serve on: 127.0.0.1 (default), another 127.x.y.z, or ::1",
    )
    parser.add_argument(
        "--template", "-t", action="append", default=[], metavar="FILE",
        help="the template files Redeliver renders from (parent first; default "
        "$LIFECYCLE_HOOKS_TEMPLATE); without one, Redeliver is refused",
    )  # fmt: skip
    parser.add_argument(
        "--trace-url",
        type=_trace_url,
        default=None,
        metavar="TEMPLATE",
        help="link trace ids to a trace UI: an http(s) URL with {trace_id} in it, e.g. "
        "'http://localhost:16686/trace/{trace_id}' (default $LIFECYCLE_HOOKS_TRACE_URL)",
    )
    add_journal_option(parser)


def run(args: argparse.Namespace) -> int:
    """Serve the page until interrupted."""
    trace_url = args.trace_url
    if trace_url is None and os.environ.get(TRACE_URL_ENV):
        try:
            trace_url = _trace_url(os.environ[TRACE_URL_ENV])
        except argparse.ArgumentTypeError as exc:
            print(f"otel-lifecycle-hooks ui: ${TRACE_URL_ENV}: {exc}", file=sys.stderr)
            return 2
    path = journal_path(args)
    if isinstance(path, Path) and not path.is_file():  # reading must not create a journal
        print(
            f"otel-lifecycle-hooks ui: there is no journal at {path} (run a session first, "
            "or pass --journal)",
            file=sys.stderr,
        )
        return 1
    journal = open_journal(path)
    telemetry = replay_telemetry("ui")
    try:
        try:
            server = PageServer(
                journal,
                secrets.token_urlsafe(32),
                args.host,
                args.port,
                templates=operator_templates(args.template, os.environ),
                environ=dict(os.environ),
                journal_args=("--journal", shown_location(args.journal)) if args.journal else (),
                tracer_provider=telemetry.tracer_provider if telemetry is not None else None,
                meter_provider=telemetry.meter_provider if telemetry is not None else None,
                trace_url=trace_url,
            )
        except NotLoopback as exc:
            print(f"otel-lifecycle-hooks ui: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(
                f"otel-lifecycle-hooks ui: cannot serve on {args.host} port {args.port}: "
                f"{exc.strerror or exc}",
                file=sys.stderr,
            )
            return 1
        # The URL first and flushed: whoever started us (a script, a test) reads this line.
        print(server.url, flush=True)
        print(f"serving the journal {path}; Ctrl-C to stop", file=sys.stderr, flush=True)
        if not server.templates:
            print(
                "Redeliver is refused on this page: it renders only from a template you name "
                "(--template FILE, or $LIFECYCLE_HOOKS_TEMPLATE), never from the journal's",
                file=sys.stderr,
                flush=True,
            )
        signal.signal(signal.SIGTERM, _stop)
        with contextlib.suppress(KeyboardInterrupt):
            serve(server)
    finally:
        journal.close()
        if telemetry is not None:
            telemetry.shutdown()  # the redeliveries' spans and metrics are exported
    return 0


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the page as Ctrl-C does


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0-65535)")
    return value


def _trace_url(text: str) -> str:
    try:
        return trace_url_template(text.strip())
    except BadQuery as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
