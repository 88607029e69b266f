"""`validate TEMPLATE...`: load and check templates; every problem, with file:line:col.

One run reports every problem it can find, ordered by file (parent first) and position: the
rules of each file and those of the merged template alike, with the warnings among them.
Only a file that cannot be read (invalid YAML, not UTF-8) stops the check, of the rest of
that file and of the merged template, and the output says so.

Problems, warnings and the count of problems are diagnostics, on stderr, as a compiler prints
them and as `list`, `test` and `run` print the same problems; the result (`ok: ...`, or the
`--json` report, problems included) is on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..systems import read_templates
from ..template.checks import template_warnings
from ..template.loader import TemplateReading, template_file, with_partial_hooks
from ..template.model import Position
from ..template.problems import Problem
from ..template.validate import capture_warnings
from ..variables import captured_variable_names
from .console import GREEN, RED, YELLOW, paint, wants_colour


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `validate`."""
    parser = subparsers.add_parser(
        "validate",
        help="check templates and report every problem",
        description=(
            "Load TEMPLATE files (scion-agent.yaml, or a template directory), parent first, "
            "and check every hook. Exit 0 when they load (warnings on stderr, `ok: ...` on "
            "stdout), 1 with every problem on stderr otherwise."
        ),
    )
    parser.add_argument("templates", nargs="+", metavar="TEMPLATE", help="template file or dir")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    """Validate; print `ok: ...` or one line per problem."""
    files = [template_file(path) for path in args.templates]
    reading = read_templates(args.templates)
    warnings = _warnings(reading)
    if reading.problems:
        if args.json:
            report: dict[str, Any] = {
                "ok": False,
                "files": files,
                "problems": [problem.to_dict() for problem in reading.problems],
                "warnings": [warning.to_dict() for warning in warnings],
                "complete": not reading.unread,
            }
            if reading.unread:
                report["not_checked"] = [_not_checked_view(where) for where in reading.unread]
            print(json.dumps(report, indent=2))
            return 1
        colour = wants_colour(sys.stderr)
        for line in _diagnostics(reading.problems, warnings, colour):
            print(line, file=sys.stderr)
        for where in reading.unread:
            if where.line:  # a file read up to a point; one not read at all says so itself
                print(_not_checked(where), file=sys.stderr)
        count = len(reading.problems)
        noun = "problem" if count == 1 else "problems"
        print(paint(f"{count} {noun} in {', '.join(files)}", RED, colour), file=sys.stderr)
        return 1
    template = reading.template
    assert template is not None  # no problems: every file was read
    disabled = sum(1 for hook in template.hooks if not hook.enabled)
    # The template still loads: exit 0.
    if args.json:
        summary = {
            "ok": True,
            "files": files,
            "hooks": len(template.hooks),
            "disabled": disabled,
            "names": [hook.name for hook in template.hooks],
            "warnings": [warning.to_dict() for warning in warnings],
        }
        print(json.dumps(summary, indent=2))
        return 0
    count = len(template.hooks)
    noun = "hook" if count == 1 else "hooks"
    suffix = f" ({disabled} disabled)" if disabled else ""
    for warning in warnings:
        print(f"{paint('warning:', YELLOW, wants_colour(sys.stderr))} {warning}", file=sys.stderr)
    ok = paint("ok:", GREEN, wants_colour(sys.stdout))
    print(f"{ok} {count} {noun}{suffix} in {', '.join(files)}")
    return 0


def _warnings(reading: TemplateReading) -> list[Problem]:
    """The warnings of every hook, those with problems included (what of them read cleanly).
    A capture of a hook that failed its own rules is left out: its action may not have been
    read, and the author has its problems to fix first."""
    if reading.template is None:
        return []
    template = with_partial_hooks(reading.template, reading.partial_hooks)
    captures = capture_warnings(template)
    failed = {problem.hook for problem in reading.problems if problem.hook is not None}
    stems = {captured_variable_names(name)[0].removesuffix("RESPONSE") for name in failed}
    captures = [w for w in captures if not any("${" + stem in w.message for stem in stems)]
    warnings = captures + template_warnings(template)
    files = {file: index for index, file in enumerate(template.files)}
    return sorted(
        warnings,
        key=lambda w: (files.get(w.position.file, len(files)), w.position.line, w.position.column),
    )


def _diagnostics(
    problems: tuple[Problem, ...], warnings: list[Problem], colour: bool = False
) -> list[str]:
    """Problems and warnings, one line each, in the problems' order (file, line, column);
    on a terminal problems in red and the warnings' label in yellow, as `history` colours."""
    files: dict[str, int] = {}
    for problem in problems:
        files.setdefault(problem.position.file, len(files))
    lines = [(problem, paint(str(problem), RED, colour)) for problem in problems]
    lines += [(warning, f"{paint('warning:', YELLOW, colour)} {warning}") for warning in warnings]

    def key(item: tuple[Problem, str]) -> tuple[int, int, int]:
        position = item[0].position
        return files.get(position.file, len(files)), position.line, position.column

    return [text for _, text in sorted(lines, key=key)]


def _not_checked(where: Position) -> str:
    at = f" past line {where.line}, column {where.column}" if where.line else ""
    return (
        f"{where.file}: its hooks and the merged template were not checked, since the file "
        f"cannot be read{at}; fix that and validate again for the rest"
    )


def _not_checked_view(where: Position) -> dict[str, Any]:
    view: dict[str, Any] = {"file": where.file, "line": where.line, "column": where.column}
    view["text"] = _not_checked(where)
    return view
