"""`schema`: print the JSON Schema of templates, for editors and CI checks."""

from __future__ import annotations

import argparse
import json

from ..template.schema import lifecycle_hooks_schema, template_file_schema


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `schema`."""
    parser = subparsers.add_parser(
        "schema",
        help="print the JSON Schema of scion-agent.yaml's lifecycle_hooks",
        description=(
            "Print the JSON Schema (draft 2020-12) of a whole scion-agent.yaml, whose other "
            "keys are allowed, or with --hooks-only of the lifecycle_hooks list alone."
        ),
    )
    parser.add_argument(
        "--hooks-only", action="store_true", help="the schema of the lifecycle_hooks list alone"
    )


def run(args: argparse.Namespace) -> int:
    """Print the schema as indented JSON."""
    schema = lifecycle_hooks_schema() if args.hooks_only else template_file_schema()
    print(json.dumps(schema, indent=2, ensure_ascii=False))
    return 0
