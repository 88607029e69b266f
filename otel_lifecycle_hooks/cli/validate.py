"""`validate TEMPLATE...`: load and check templates; every problem, with file:line:col.

Problems, warnings and the count of problems are diagnostics, on stderr, as a compiler prints
them and as `list`, `test` and `run` print the same problems; the result (`ok: ...`, or the
`--json` report, problems included) is on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys


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
    from ..template.loader import load_templates, template_file
    from ..template.validate import TemplateError, capture_warnings

    files = [template_file(path) for path in args.templates]
    try:
        template = load_templates(args.templates)
    except TemplateError as exc:
        if args.json:
            problems = [problem.to_dict() for problem in exc.problems]
            print(json.dumps({"ok": False, "files": files, "problems": problems}, indent=2))
        else:
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            count = len(exc.problems)
            noun = "problem" if count == 1 else "problems"
            print(f"{count} {noun} in {', '.join(files)}", file=sys.stderr)
        return 1
    disabled = sum(1 for hook in template.hooks if not hook.enabled)
    from ..template.checks import template_warnings

    # The template still loads: exit 0.
    warnings = capture_warnings(template) + template_warnings(template)
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
        print(f"warning: {warning}", file=sys.stderr)
    print(f"ok: {count} {noun}{suffix} in {', '.join(files)}")
    return 0
