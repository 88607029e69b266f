"""`list TEMPLATE...`: the configured hooks, and their recent executions from the journal."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shlex
import sqlite3
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from ..journal import Journal
from ..systems import load_templates
from ..template.durations import format_duration
from ..template.model import HookSpec, Template
from ..template.problems import TemplateError
from .console import (
    OUTCOME_COLOURS,
    Step,
    escape_control,
    fit_table,
    output_width,
    paint,
    shorten,
    wants_colour,
)

JOURNAL_ENV = "OTEL_LIFECYCLE_HOOKS_JOURNAL"
RECENT_LIMIT = 5
_COLUMNS = (
    "NAME",
    "EVENTS",
    "ACTION",
    "TARGET",
    "ON_ERROR",
    "BLOCKING",
    "TIMEOUT",
    "DEBOUNCE",
    "ENABLED",
)
_TARGET_WIDTH = 72


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `list`."""
    parser = subparsers.add_parser(
        "list",
        help="show the configured hooks and their recent executions",
        description=(
            "Load TEMPLATE files, parent first, and show each hook: its events, action, "
            "target, error policy, blocking, timeout, debounce and whether it is enabled; "
            "then, when the execution journal exists, each hook's recent executions."
        ),
    )
    parser.add_argument("templates", nargs="+", metavar="TEMPLATE", help="template file or dir")
    parser.add_argument("--json", action="store_true", help="print the hooks as JSON")
    parser.add_argument(
        "--journal",
        metavar="PATH",
        help=f"execution journal (default: ${JOURNAL_ENV.removeprefix('OTEL_')}, else "
        "~/.local/state/otel-lifecycle-hooks/journal.sqlite3)",
    )


def default_journal_path() -> str:
    """Where the journal is when neither --journal nor the environment says."""
    return os.path.join(
        os.path.expanduser("~"), ".local", "state", "otel-lifecycle-hooks", "journal.sqlite3"
    )


def run(args: argparse.Namespace) -> int:
    """Print the hooks table (or JSON); exit 1 when the templates do not load."""
    try:
        template = load_templates(args.templates)
    except TemplateError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    journal_path = (
        args.journal
        or os.environ.get(JOURNAL_ENV.removeprefix("OTEL_"))
        or os.environ.get(JOURNAL_ENV)
        or default_journal_path()
    )
    recent = _recent_executions(journal_path, [hook.name for hook in template.hooks])
    if args.json:
        print(json.dumps(_as_json(template, recent), indent=2, default=str))
    else:
        width = output_width(sys.stdout)
        print(_table(template, width))
        if recent is not None:
            print()
            print(_recent_text(recent, colour=wants_colour(sys.stdout), width=width))
    return 0


def _table(template: Template, width: int | None = None) -> str:
    """The hooks as aligned columns within `width` (None: no limit), as `_fitting_steps` says."""
    rows = [tuple(escape_control(cell) for cell in _row(hook)) for hook in template.hooks]
    layout = fit_table(_COLUMNS, rows, width, _fitting_steps())
    lines = layout.lines(rows)
    if not template.hooks:
        lines.append(f"(no hooks in {', '.join(template.files)})")
    note = layout.note("hook", "list --json has every field")
    return "\n".join([*lines, note] if note else lines)


def _fitting_steps() -> list[Step]:
    """How the table gets narrower for a terminal: first the columns every hook holds at
    its default (named in a note), then TARGET cut, then on a line of its own under its hook,
    EVENTS cut, then the policy columns left out, ENABLED last. A hook's name is never cut:
    it is what `history --hook` and `replay` take."""
    return [
        Step("omit", "ENABLED", when_all="yes"),
        Step("omit", "ON_ERROR", when_all="log"),
        Step("omit", "BLOCKING", when_all="no"),
        Step("omit", "DEBOUNCE", when_all="-"),
        Step("cut", "TARGET", 40),
        Step("cut", "EVENTS", 24),
        Step("wrap", "TARGET"),
        Step("cut", "EVENTS", 16),
        Step("omit", "DEBOUNCE"),
        Step("omit", "TIMEOUT"),
        Step("omit", "BLOCKING"),
        Step("omit", "ON_ERROR"),
        Step("cut", "EVENTS", 10),
        Step("omit", "ENABLED"),
    ]


def _row(hook: HookSpec) -> tuple[str, ...]:
    target = _target(hook)
    if len(target) > _TARGET_WIDTH:
        target = target[: _TARGET_WIDTH - 1] + "…"
    return (
        hook.name,
        ",".join(hook.on),
        hook.action.type,
        target,
        hook.on_error,
        "yes" if hook.blocking else "no",
        format_duration(hook.timeout),
        format_duration(hook.debounce) if hook.debounce else "-",
        "yes" if hook.enabled else "no",
    )


def _target(hook: HookSpec) -> str:
    action = hook.action
    if action.type == "script":
        return shlex.join(action.command)
    if action.type == "python":
        return f"python {action.module or action.path}" + (
            f":{action.executor}" if action.executor else ""
        )
    if action.type == "jsonrpc":
        return f"JSON-RPC {safe_url(action.url or '')}"
    return f"{action.method} {safe_url(action.url or '', hides_path=action.type == 'webhook')}"


def safe_url(url: str, hides_path: bool = False) -> str:
    """A url fit to print: user info and query values masked, a webhook's path too.

    A webhook URL carries its own secret (seed 000), usually in the path.
    """
    if url.startswith("${"):
        return url
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<invalid url>"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    if "@" in parts.netloc:
        netloc = "***@" + netloc
    path = "/***" if hides_path and parts.path not in ("", "/") else parts.path
    query = "&".join(
        f"{name}=***" for name, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, query, ""))


def _as_json(template: Template, recent: Mapping[str, list[Any]] | None) -> dict[str, Any]:
    hooks = []
    for hook in template.hooks:
        action = hook.action
        entry: dict[str, Any] = {
            "name": hook.name,
            "on": list(hook.on),
            "action": action.type,
            "on_error": hook.on_error,
            "blocking": hook.blocking,
            "timeout": hook.timeout,
            "debounce": hook.debounce,
            "enabled": hook.enabled,
            "condition": hook.condition.source if hook.condition else None,
        }
        if action.type == "script":
            entry["command"] = list(action.command)
        elif action.type == "python":
            entry["module"] = action.module
            entry["path"] = action.path
            entry["executor"] = action.executor
        else:
            entry["method"] = action.method
            entry["url"] = safe_url(action.url or "", hides_path=action.type == "webhook")
            entry["auth"] = action.auth.type
        if recent is not None:
            entry["recent"] = [_record_dict(record) for record in recent.get(hook.name, [])]
        hooks.append(entry)
    return {"files": list(template.files), "hooks": hooks}


# --- the journal ------------------------------------------------------------------------


def _recent_executions(path: str, names: Sequence[str]) -> dict[str, list[Any]] | None:
    """Each hook's recent executions, or None when there is no journal to read."""
    if not os.path.isfile(path):
        return None
    try:
        journal = Journal(path)
        try:
            return {
                name: list(journal.recent(hook_name=name, limit=RECENT_LIMIT)) for name in names
            }
        finally:
            journal.close()
    except (sqlite3.Error, OSError) as exc:
        print(f"warning: cannot read the journal {path}: {exc}", file=sys.stderr)
        return None


def _recent_text(
    recent: Mapping[str, list[Any]], colour: bool = False, width: int | None = None
) -> str:
    """Each hook's recent executions, a line each, cut to `width` (the error type last)."""
    lines = ["RECENT EXECUTIONS"]
    for name, records in recent.items():
        lines.append(f"{name}:")
        if not records:
            lines.append("  (none)")
        for record in records:
            line = escape_control(_record_line(record))  # an error type may quote an endpoint
            if width is not None:
                line = shorten(line, width - 2)
            outcome = str(_record_dict(record).get("outcome") or "")
            if colour and outcome in OUTCOME_COLOURS:
                line = line.replace(
                    f"  {outcome}  ", f"  {paint(outcome, OUTCOME_COLOURS[outcome], True)}  ", 1
                )
            lines.append("  " + line)
    return "\n".join(lines)


def _record_dict(record: Any) -> dict[str, Any]:
    if hasattr(record, "_asdict"):  # the journal's rows
        return dict(record._asdict())
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return dataclasses.asdict(record)
    if isinstance(record, Mapping):
        return dict(record)
    if isinstance(record, sqlite3.Row):
        return dict(zip(record.keys(), tuple(record), strict=True))
    return dict(vars(record)) if hasattr(record, "__dict__") else {"record": str(record)}


def _record_line(record: Any) -> str:
    fields = _record_dict(record)

    def first(*names: str) -> Any:
        return next((fields[n] for n in names if fields.get(n) is not None), None)

    when = first("started_at", "start_time", "timestamp", "time", "ended_at")
    if isinstance(when, (int, float)):
        when = datetime.datetime.fromtimestamp(when, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    duration = first("duration", "seconds")
    if duration is None and isinstance(first("duration_ms"), (int, float)):
        duration = first("duration_ms") / 1000
    parts = [
        str(when or "?"),
        str(first("event") or "?"),
        str(first("outcome", "status") or "?"),
        f"{duration:.3f}s" if isinstance(duration, (int, float)) else "",
        f"attempts={first('attempts')}" if first("attempts") is not None else "",
        f"http={first('http_status')}" if first("http_status") is not None else "",
        f"exit={first('exit_code')}" if first("exit_code") is not None else "",
        str(first("error_type") or ""),
    ]
    return "  ".join(part for part in parts if part)
