"""`run`'s arguments read without argparse give what argparse gives, or are left to argparse."""

from __future__ import annotations

import argparse
import contextlib
import io

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_lifecycle_hooks.cli import run as run_command

TOKENS = [
    "--template", "-t", "--grace-period", "--agent-name", "--agent-id", "--agent-slug",
    "--user", "--journal", "--hook-log", "--", "-h", "--help", "--temp", "--template=a.yaml",
    "-t=b.yaml", "--grace-period=3s", "--user=", "--unknown", "-x", "a.yaml", "10s", "true",
    "sh", "-c", "echo hi", "", "-1", "-v", "-q", "--verbose", "--quiet",
]  # fmt: skip


def parsed_by_argparse(args: list[str]) -> dict[str, object] | None:
    parser = argparse.ArgumentParser(prog="otel-lifecycle-hooks")
    subparsers = parser.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    run_command.add_parser(subparsers)
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            return vars(parser.parse_args(["run", *args]))
        except SystemExit:
            return None


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=8))
def test_the_quick_reading_agrees_with_argparse_or_leaves_it_to_argparse(args: list[str]) -> None:
    quick = run_command.quick_parse(args)

    if quick is not None:
        assert vars(quick) == parsed_by_argparse(args)


def test_the_usual_forms_are_read_quickly() -> None:
    args = ["-t", "base.yaml", "--template=agent.yaml", "--grace-period", "5s", "--", "claude"]

    quick = run_command.quick_parse(args)

    assert quick is not None
    assert (quick.template, quick.grace_period, quick.command) == (
        ["base.yaml", "agent.yaml"],
        "5s",
        ["--", "claude"],
    )
    assert vars(quick) == parsed_by_argparse(args)


def test_help_abbreviations_and_mistakes_go_to_argparse() -> None:
    for args in (["--help"], ["--temp", "a.yaml", "--", "x"], ["--template"], ["--bogus", "1"]):
        assert run_command.quick_parse(args) is None
