"""The command line's habits: a mistyped command gets "did you mean", every command's `--help`
ends with examples that parse, and `status --json` gives the running supervisors in the shape
the docs state."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.cli.examples import HEADING
from otel_lifecycle_hooks.cli.main import COMMANDS, build_parser, main
from tests.supervisor.supervised import Workspace, wait_until

STATUS_KEYS = ["pid", "agent_name", "agent_id", "phase", "activity", "started_at"]


@pytest.mark.parametrize(
    ("typed", "named"),
    [
        ("valdate", "'validate'"),
        ("stauts", "'status'"),
        ("histroy", "'history'"),
        ("replya", "'replay'"),
        ("complete", "'completion'"),
    ],
)
def test_a_mistyped_command_names_the_nearest_in_one_line_and_exits_2(
    typed: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([typed, "x"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"otel-lifecycle-hooks: {typed!r} is not a command; did you mean ")
    assert named in err


def test_a_word_near_no_command_lists_them_all_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["xyzzy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean" not in err
    assert all(name in err for name in COMMANDS)


def test_options_before_a_command_are_still_argparses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as version:
        main(["--version"])
    assert version.value.code == 0
    assert capsys.readouterr().out.startswith("otel-lifecycle-hooks ")


def _help_of(command: str) -> str:
    parser, _ = build_parser([command])
    subparsers = next(a for a in parser._actions if a.dest == "subcommand")
    return str(subparsers.choices[command].format_help())  # type: ignore[attr-defined]


def _example_commands(help_text: str) -> list[list[str]]:
    """Each example line of a help's examples section, as the words given to the program."""
    section = help_text.split(f"\n{HEADING}\n", 1)[1]
    examples = []
    for line in section.splitlines():
        if not line.startswith("  "):
            break  # the section's end
        if line.strip().startswith("#"):
            continue  # a comment on the next example
        lexer = shlex.shlex(line.strip(), posix=True, punctuation_chars="|>")
        lexer.whitespace_split = True
        words = list(lexer)
        start = words.index("otel-lifecycle-hooks") + 1  # after a pipe, if any
        end = next((i for i, w in enumerate(words) if i >= start and w in ("|", ">")), None)
        examples.append(words[start:end])
    return examples


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_commands_help_ends_with_examples_that_parse(command: str) -> None:
    help_text = _help_of(command)
    assert f"\n{HEADING}\n" in help_text, help_text
    examples = _example_commands(help_text)
    assert len(examples) >= 1, help_text
    parser, _ = build_parser(list(COMMANDS))
    for words in examples:
        assert words[0] == command, words
        if command == "hook":  # dispatched before argparse; its parser is for --help only
            continue
        try:
            parsed = parser.parse_args(words)
        except SystemExit as exc:  # argparse's way of refusing
            pytest.fail(f"{shlex.join(words)}: refused by the parser ({exc.code})")
        assert parsed.subcommand == command


def test_examples_keep_their_lines_while_the_description_still_wraps() -> None:
    help_text = _help_of("validate")
    description = help_text.split("\n\n")[1]
    assert max(len(line) for line in description.splitlines()) <= 100
    assert "  otel-lifecycle-hooks validate --json base/scion-agent.yaml scion-agent.yaml" in (
        help_text
    )


def _status_json(env: dict[str, str]) -> tuple[int, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "status", "--json"],
        capture_output=True, text=True, timeout=120, env=env, check=False,  # a hang guard
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def test_status_json_with_no_supervisor_is_an_empty_list_and_exit_1(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}
    assert _status_json(env) == (1, {"supervisors": []})


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    space = Workspace(tmp_path)
    yield space
    space.cleanup()  # every supervisor and agent it started is killed


def test_status_json_shows_a_running_supervisor_in_the_documented_shape(
    workspace: Workspace,
) -> None:
    template = workspace.template("  []\n")
    run = workspace.start(template, workspace.agent_command(), "--agent-id", "agent-7")
    env = {k: v for k, v in workspace.env.items() if k != "XDG_STATE_HOME"}

    def running() -> dict[str, object] | None:
        code, shown = _status_json(env)
        supervisors = shown["supervisors"]
        assert isinstance(supervisors, list)
        if code == 0 and supervisors and supervisors[0]["phase"] == "running":
            return dict(supervisors[0])
        return None

    try:
        entry = wait_until(running, what="the supervisor in status --json")
    finally:
        run.signal(signal.SIGTERM)
        run.wait()

    assert list(entry) == STATUS_KEYS
    assert entry["pid"] == run.process.pid
    assert (entry["agent_name"], entry["agent_id"]) == ("test-agent", "agent-7")
    assert entry["activity"] == "idle"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", str(entry["started_at"]))


def test_status_json_with_a_signal_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--json", "blocked"]) == 2
    assert "--json" in capsys.readouterr().err
