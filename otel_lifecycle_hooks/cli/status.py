"""`otel-lifecycle-hooks status [ask_user|blocked|task_completed|limits_exceeded [MESSAGE]]`.

Without a signal, `status` shows each running supervisor: its agent, phase and activity (exit
1 when none runs). `--json` prints them for a script or a health check, in a stable shape:
{"supervisors": [{"pid", "agent_name", "agent_id", "phase", "activity", "started_at"}]},
oldest first, `started_at` in RFC 3339 UTC; an empty list (exit 1) when none runs.

Explicit agent signals, as `sciontool status` has: an agent (or its harness) says it waits for
the user, is blocked on something, finished its task, or hit a limit. The signal goes to the
supervisor's socket. Without a supervisor but with a template (`--template`, or
`$LIFECYCLE_HOOKS_TEMPLATE`), the hooks run in-process instead. Exit 0 when the signal was
delivered; 1, with the reason on stderr, when it could not be.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Mapping
from typing import Any

from ..harness import socket_client, without_supervisor

# The message used when none is given, as sciontool words it.
DEFAULT_MESSAGES: dict[str, str] = {
    "ask_user": "Input requested",
    "blocked": "Agent is blocked",
    "task_completed": "Task completed",
    "limits_exceeded": "Agent limits exceeded",
}


def add_parser(subparsers: Any) -> None:
    """Register the `status` command."""
    parser = subparsers.add_parser(
        "status",
        help="signal ask_user, blocked, task_completed or limits_exceeded",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "signal",
        nargs="?",
        choices=list(DEFAULT_MESSAGES),
        help="what the agent signals; without it, show the running supervisors' phase and activity",
    )
    parser.add_argument("message", nargs="*", help="a question, a reason or a task summary")
    parser.add_argument(
        "--template",
        metavar="PATH",
        action="append",
        default=[],
        help="templates to run in-process when no supervisor is reachable",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="without a signal: print the running supervisors as JSON (shape above)",
    )


def run(args: Any) -> int:
    """Send the signal; 0 when delivered, 1 when nothing could take it."""
    # The listings only, not at the top: an agent sends its signal with whatever python it
    # has, and the signal's path needs the standard library alone (the listing needs the SDK).
    if args.signal is None and args.json:
        from ..supervisor.running import running_supervisors

        supervisors = [status_view(entry) for entry in running_supervisors()]
        print(json.dumps({"supervisors": supervisors}, indent=2))
        return 0 if supervisors else 1
    if args.json:
        print("otel-lifecycle-hooks status: --json is for the running supervisors; it takes "
              "no signal", file=sys.stderr)  # fmt: skip
        return 2
    if args.signal is None:
        from ..supervisor.running import describe_running  # as above

        code, text = describe_running()
        print(text, file=sys.stdout if code == 0 else sys.stderr)
        return code
    message = " ".join(args.message).strip() or DEFAULT_MESSAGES[args.signal]
    try:
        socket_client.send_status(args.signal, message)
        return 0
    except socket_client.SupervisorUnavailable as unavailable:
        reason = str(unavailable)
    except OSError as exc:
        reason = f"could not send to the supervisor: {exc.strerror or exc}"
    templates = without_supervisor.template_paths(args.template)
    if not templates:
        print(f"otel-lifecycle-hooks status: {reason}", file=sys.stderr)
        return 1
    try:
        without_supervisor.fire_signal(templates, args.signal, message)
    except without_supervisor.EngineMissing as exc:
        print(f"otel-lifecycle-hooks status: {reason}; {exc}", file=sys.stderr)
        return 1
    return 0


def status_view(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One supervisor as `status --json` shows it: the documented keys only, typed."""
    try:
        started = dt.datetime.fromtimestamp(float(entry.get("started_at") or 0), dt.UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        started = dt.datetime.fromtimestamp(0, dt.UTC)
    return {
        "pid": int(entry["pid"]),
        "agent_name": str(entry.get("agent_name") or ""),
        "agent_id": str(entry.get("agent_id") or ""),
        "phase": str(entry.get("phase") or ""),
        "activity": str(entry.get("activity") or ""),
        "started_at": started.isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
