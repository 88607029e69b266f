"""`run`'s options are read by the command line's one argparse parser: the usual forms give
the options and the agent's command, and mistakes exit 2 with argparse's message."""

from __future__ import annotations

import argparse

import pytest

from otel_lifecycle_hooks.cli import main as cli_main
from otel_lifecycle_hooks.cli import run as run_command


def parsed_run(monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, object]:
    """What `run` is handed for `otel-lifecycle-hooks run ARGS...`."""
    handed: list[argparse.Namespace] = []

    def fake_run(parsed: argparse.Namespace) -> int:
        handed.append(parsed)
        return 0

    monkeypatch.setattr(run_command, "run", fake_run)
    assert cli_main.main(["run", *args]) == 0
    [parsed] = handed
    return vars(parsed)


def test_the_usual_forms_give_the_options_and_the_agents_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed = parsed_run(
        monkeypatch,
        "-t", "base.yaml", "--template=agent.yaml", "--grace-period", "5s", "--user=agent",
        "-v", "--", "claude", "--model", "x",
    )  # fmt: skip

    assert parsed["template"] == ["base.yaml", "agent.yaml"]
    assert (parsed["grace_period"], parsed["user"], parsed["verbose"]) == ("5s", "agent", True)
    assert parsed["quiet"] is False
    assert parsed["command"] == ["--", "claude", "--model", "x"]
    assert parsed["subcommand"] == "run"


def test_without_options_the_defaults_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = parsed_run(monkeypatch, "--", "true")

    assert parsed["template"] == []
    assert parsed["grace_period"] == "10s"
    assert [parsed[k] for k in ("agent_name", "agent_id", "agent_slug", "journal")] == [None] * 4
    assert parsed["command"] == ["--", "true"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["-v", "-q", "--", "true"], "not allowed with argument --verbose/-v"),
        (["--bogus", "1", "--", "true"], "unrecognized arguments: --bogus"),
        (["--template"], "expected one argument"),
    ],
)
def test_a_mistake_exits_2_with_argparses_message(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main.main(["run", *args])

    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def test_no_command_exits_2_and_says_how_to_give_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["run"]) == 2
    assert "no command given (usage: run [options] -- CMD...)" in capsys.readouterr().err
