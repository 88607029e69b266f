"""`otel-lifecycle-hooks run [--template T]... [--grace-period 10s] -- CMD...`"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..extras import postgres_missing
from ..hooklog import HookLog, default_hook_log_path, diagnostics_to
from ..supervisor.options import SupervisorOptions
from ..supervisor.report import NORMAL, QUIET, VERBOSE, RunReport
from ..supervisor.run import Supervisor, agent_metadata
from ..supervisor.running import RunningFile
from ..systems import load_templates
from ..template.durations import DurationError, parse_duration
from ..template.model import Template
from ..template.problems import TemplateError
from ..variables import JOURNAL_SETTINGS

TEMPLATE_ENV = "OTEL_LIFECYCLE_HOOKS_TEMPLATE"


def add_parser(subparsers: Any) -> None:
    """Add `run` and its options to the command line's subparsers."""
    parser = subparsers.add_parser(
        "run",
        help="supervise an agent command through every phase and fire every hook",
        description=(
            "Run CMD as the agent: fire pre-start, start it, fire post-start, feed it runtime "
            "events from its harness (through `hook --dialect`), and on SIGTERM/SIGINT fire "
            "pre-stop, stop it within the grace period and fire session-end. Exits with the "
            "agent's exit code, 10 when a limit was exceeded, 1 on the supervisor's own failure."
        ),
    )
    parser.add_argument(
        "--template",
        "-t",
        action="append",
        default=[],
        metavar="FILE",
        help="template file (repeat: parent first, child last); default $LIFECYCLE_HOOKS_TEMPLATE "
        "or ./scion-agent.yaml when present",
    )
    parser.add_argument(
        "--grace-period",
        default="10s",
        help="shared by pre-stop hooks and the agent's shutdown (default 10s)",
    )
    parser.add_argument(
        "--agent-name",
        help="agent name (default: $SCION_AGENT_NAME, else the template's name or harness, "
        'else "agent")',
    )
    parser.add_argument(
        "--agent-id", help="stable agent id (default: $SCION_AGENT_ID, else derived from the slug)"
    )
    parser.add_argument("--agent-slug", help="agent slug (default: derived from the name)")
    parser.add_argument(
        "--user", help="run the agent and its script hooks as this user (needs root)"
    )
    parser.add_argument(
        "--journal",
        help="execution journal file (default: $LIFECYCLE_HOOKS_JOURNAL or ~/.local/state/...)",
    )
    parser.add_argument(
        "--hook-log", help="hook log file (default: $LIFECYCLE_HOOKS_LOG or $HOME/agent.log)"
    )
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument(
        "--verbose", "-v", action="store_true", help="a line for every hook execution"
    )
    loudness.add_argument(
        "--quiet", "-q", action="store_true", help="no lines about hooks, and no summary"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    parser.set_defaults(func=run)


def template_paths(given: list[str]) -> list[str]:
    if given:
        return given
    # The name without `OTEL_` first (the one a Claude Code hook or tool can see).
    named = os.environ.get(TEMPLATE_ENV.removeprefix("OTEL_")) or os.environ.get(TEMPLATE_ENV)
    if named:
        return [p for p in named.split(os.pathsep) if p]
    return ["scion-agent.yaml"] if os.path.exists("scion-agent.yaml") else []


def _unsafe_template_files(files: Sequence[str], user: str | None) -> str | None:
    """Why a root supervisor serving an agent of another user must not use these template
    files, or None. A template decides what runs as root (`run_as: root`) and where the
    operator's credentials go: a file the agent's user could write or replace, itself or
    through a directory above it, would let the agent decide that at the next `run`. The
    ownership guard's rule: root's alone, every directory above it too."""
    if os.geteuid() != 0 or not user:
        return None
    # Only for root: the guard brings shutil (with bz2 and lzma), about 2.5 ms of a run's
    # start before its agent may start (python -X importtime).
    from ..actions.root_guard import unsafe_code_file_as_root

    for path in files:
        refusal = unsafe_code_file_as_root(
            path,
            "another user could rewrite what this supervisor runs as root, so the template "
            f"is not used (the agent runs as {user})",
        )
        if refusal is not None:
            return f"template {refusal}"
    return None


def run(args: argparse.Namespace) -> int:
    """Supervise the agent command `args` names; its exit code (see `add_parser`)."""
    # Start-up allocates everything at once (the SDK, the template, the engine), and the cyclic
    # garbage collector would rescan that growing heap many times over: about a tenth of a
    # `run -- true`. Collection waits until the agent is running; then what start-up made is
    # frozen (never scanned again, in this long-lived process) and collection resumes.
    gc.disable()
    try:
        return _run(args)
    finally:
        gc.enable()


def _resume_collection() -> None:
    gc.freeze()
    gc.enable()


def _run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print(
            "otel-lifecycle-hooks run: no command given (usage: run [options] -- CMD...)",
            file=sys.stderr,
        )
        return 2
    try:
        grace = parse_duration(args.grace_period)
    except DurationError as exc:
        print(f"otel-lifecycle-hooks run: --grace-period: {exc}", file=sys.stderr)
        return 2
    paths = template_paths(args.template)
    if not paths and not getattr(args, "quiet", False):
        # Said before the agent starts: a template meant to be found and not found is the
        # first thing the operator must learn, since the agent runs all the same.
        print(
            "otel-lifecycle-hooks run: no template (no --template, $LIFECYCLE_HOOKS_TEMPLATE "
            "unset, no ./scion-agent.yaml): the agent runs without hooks",
            file=sys.stderr,
        )
    journal_setting = args.journal or next(
        (os.environ[name] for name in JOURNAL_SETTINGS if os.environ.get(name)), None
    )
    missing = postgres_missing(journal_setting)
    if missing is not None:  # said before the agent starts: no journal could ever be written
        print(f"otel-lifecycle-hooks run: {missing}", file=sys.stderr)
        return 2
    try:
        template = load_templates(paths) if paths else Template()
    except TemplateError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    template_user = args.user or template.user
    refusal = _unsafe_template_files(template.files, template_user)
    if refusal is not None:
        print(f"otel-lifecycle-hooks run: {refusal}", file=sys.stderr)
        return 2
    options = SupervisorOptions(
        command=command,
        template=template,
        grace_period=grace,
        metadata={
            "AGENT_NAME": args.agent_name or "",
            "AGENT_ID": args.agent_id or "",
            "AGENT_SLUG": args.agent_slug or "",
        },
        journal=args.journal,
        hook_log=args.hook_log,
        user=template_user,
        on_running=_resume_collection,
    )
    verbosity = NORMAL
    if getattr(args, "quiet", False):
        verbosity = QUIET
    elif getattr(args, "verbose", False):
        verbosity = VERBOSE
    report = RunReport(verbosity)  # what the operator sees of the hooks
    running = RunningFile(agent_metadata(options), options.environ)  # what `status` shows
    options.watchers = [report, running]
    # The package's warnings reach the terminal as the report's lines (`-q`: errors only),
    # and the hook log, the one the executions are written to, has them all.
    hook_log = HookLog(args.hook_log or default_hook_log_path(options.environ))
    options.hook_log = hook_log
    with diagnostics_to(hook_log, report.diagnostic):
        try:
            return Supervisor(options).run()
        finally:
            running.remove()
            report.finish()
