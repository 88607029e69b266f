"""`validate`, `list` and `schema` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from otel_lifecycle_hooks.cli import list_hooks
from otel_lifecycle_hooks.cli.main import main
from tests.support.terminal import run_on_a_terminal

HERE = Path(__file__).parent
EXAMPLE = HERE / "fixtures" / "scion-agent.yaml"
REGISTRY = HERE / "fixtures" / "agent-registry.yaml"
BROKEN = HERE / "broken"


def expected_problems(path: Path) -> list[str]:
    prefix = "# expect: "
    lines = path.read_text().splitlines()
    return [f"{path}:{line[len(prefix) :]}" for line in lines if line.startswith(prefix)]


@pytest.fixture(autouse=True)
def no_journal_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OTEL_LIFECYCLE_HOOKS_JOURNAL", raising=False)


MISSING_SCRIPT_WARNING = (
    'warning: {}:74:16: hook "cleanup-credentials": field "action.command": '
    "the script /usr/local/bin/revoke-sa-keys.sh does not exist\n"
)


def test_validate_prints_ok_with_the_hook_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE), str(REGISTRY)]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"ok: 8 hooks in {EXAMPLE}, {REGISTRY}\n"
    # The seed's cleanup script lives in the agent's image: a warning here, not an error; a
    # diagnostic, on stderr like the problems.
    assert captured.err == MISSING_SCRIPT_WARNING.format(EXAMPLE)


def test_validate_prints_every_problem_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    first, second = BROKEN / "wrong_types.yaml", BROKEN / "duplicate_names.yaml"
    assert main(["validate", str(first), str(second)]) == 1
    captured = capsys.readouterr()
    expected = expected_problems(first) + expected_problems(second)
    # Diagnostics and their count on stderr, as `list`, `test` and `run` print the same
    # problems; nothing on stdout, where the result (ok, or --json) goes.
    # The warnings of the same pass come among them (a program not on the PATH, say).
    problems = [line for line in captured.err.splitlines() if not line.startswith("warning: ")]
    assert problems == [*expected, f"{len(expected)} problems in {first}, {second}"]
    assert captured.out == ""


def test_validate_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--json", str(BROKEN / "on_error_invalid.yaml")]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    (problem,) = report["problems"]
    assert (problem["line"], problem["column"], problem["hook"], problem["field"]) == (
        6,
        15,
        "register-agent",
        "on_error",
    )
    assert main(["validate", "--json", str(EXAMPLE)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["ok"], report["hooks"], report["disabled"]) == (True, 5, 0)


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_validate_exit_codes_from_a_real_process() -> None:
    good = run_module("validate", str(EXAMPLE))
    assert (good.returncode, good.stdout, good.stderr) == (
        0,
        f"ok: 5 hooks in {EXAMPLE}\n",
        MISSING_SCRIPT_WARNING.format(EXAMPLE),
    )
    bad = run_module("validate", str(BROKEN / "malformed_yaml.yaml"))
    assert (bad.returncode, bad.stdout) == (1, "")
    *problems, not_checked, count = bad.stderr.splitlines()
    assert problems == expected_problems(BROKEN / "malformed_yaml.yaml")
    # Reading stopped at the syntax error: the output says what was not checked.
    assert "its hooks and the merged template were not checked" in not_checked
    assert count == f"1 problem in {BROKEN / 'malformed_yaml.yaml'}"


def test_validate_reports_a_problem_on_stderr_as_list_does(tmp_path: Path) -> None:
    """The same problem, the same line, the same stream, whichever command finds it."""
    path = tmp_path / "t.yaml"
    path.write_text(
        "lifecycle_hooks:\n  - {name: a, on: [post-strat], action: {type: script, command: [x]}}\n"
    )
    validated, listed = run_module("validate", str(path)), run_module("list", str(path))
    assert (validated.returncode, listed.returncode) == (1, 1)
    assert validated.stdout == listed.stdout == ""
    assert validated.stderr.splitlines()[0] == listed.stderr.splitlines()[0]
    # validate also warns, in the same pass, of the program that is not on the PATH.
    assert validated.stderr.splitlines()[1:] == [
        f'warning: {path}:2:65: hook "a": field "action.command": the program x is not on the PATH',
        f"1 problem in {path}",
    ]


@pytest.mark.parametrize("command", ["validate", "list", "schema"])
def test_every_command_has_help(command: str) -> None:
    result = run_module(command, "--help")
    assert result.returncode == 0
    assert f"usage: otel-lifecycle-hooks {command}" in result.stdout


def test_list_shows_a_table_of_hooks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", str(EXAMPLE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "NAME",
        "EVENTS",
        "ACTION",
        "TARGET",
        "ON_ERROR",
        "BLOCKING",
        "TIMEOUT",
        "DEBOUNCE",
        "ENABLED",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["update-registry-status"][1:4] == ["activity-change", "http", "PATCH"]
    assert rows["update-registry-status"][-5:] == ["log", "no", "5s", "10s", "yes"]
    assert rows["notify-slack"][3:5] == ["POST", "${SLACK_WEBHOOK_URL}"]
    assert rows["cleanup-credentials"][3] == "/usr/local/bin/revoke-sa-keys.sh"
    assert rows["cleanup-credentials"][-5:] == ["log", "yes", "30s", "-", "yes"]
    assert len(rows) == 5


def test_list_hides_the_secret_part_of_literal_webhook_urls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "scion-agent.yaml"
    template.write_text(
        "lifecycle_hooks:\n"
        "  - name: slack\n"
        "    on: [session-end]\n"
        "    action: {type: webhook, url: 'https://hooks.slack.com/services/T0/B0/s3cr3t'}\n"
        "  - name: query\n"
        "    on: [session-end]\n"
        "    action: {type: http, url: 'https://user:pw@example.com/x?key=s3cr3t&a=1'}\n"
    )
    assert main(["list", str(template)]) == 0
    table = capsys.readouterr().out
    assert "s3cr3t" not in table and "pw" not in table
    assert "POST https://hooks.slack.com/***" in table
    assert "POST https://***@example.com/x?key=***&a=***" in table


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--json", str(REGISTRY)]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [h["name"] for h in listing["hooks"]] == [
        "register-with-agent-registry",
        "update-registry-activity",
        "deregister-from-agent-registry",
    ]
    first = listing["hooks"][0]
    assert (first["method"], first["auth"], first["on_error"], first["timeout"]) == (
        "POST",
        "gcp-default",
        "retry",
        15.0,
    )
    assert "recent" not in first  # no journal file


def test_list_refuses_a_broken_template(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", str(BROKEN / "unknown_event.yaml")]) == 1
    assert capsys.readouterr().err.splitlines() == expected_problems(BROKEN / "unknown_event.yaml")


@dataclass
class FakeExecution:
    hook_name: str
    event: str
    outcome: str
    started_at: float
    duration: float
    attempts: int
    error_type: str | None = None


def test_list_shows_recent_executions_from_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    journal_path = tmp_path / "journal.sqlite3"
    journal_path.write_bytes(b"")
    calls: list[tuple[str, str, int]] = []

    class Journal:
        def __init__(self, path: str) -> None:
            self.path = path

        def recent(self, hook_name: str, limit: int) -> list[FakeExecution]:
            calls.append((self.path, hook_name, limit))
            if hook_name != "notify-slack":
                return []
            return [
                FakeExecution("notify-slack", "session-end", "failed", 0.0, 1.25, 4, "http.503")
            ]

        def close(self) -> None:
            pass

    monkeypatch.setattr(list_hooks, "Journal", Journal)
    monkeypatch.setenv("OTEL_LIFECYCLE_HOOKS_JOURNAL", str(journal_path))

    assert main(["list", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert (
        "notify-slack:\n  1970-01-01 00:00:00Z  session-end  failed  1.250s  attempts=4  http.503"
        in out
    )
    assert "cleanup-credentials:\n  (none)" in out
    assert {call[0] for call in calls} == {str(journal_path)}
    assert {call[2] for call in calls} == {5}
    assert len(calls) == 5

    other = tmp_path / "other.sqlite3"
    other.write_bytes(b"")
    assert main(["list", "--json", "--journal", str(other), str(EXAMPLE)]) == 0
    listing = json.loads(capsys.readouterr().out)
    slack = next(h for h in listing["hooks"] if h["name"] == "notify-slack")
    assert slack["recent"][0]["outcome"] == "failed"
    assert calls[-1][0] == str(other)


def test_list_without_a_journal_file_shows_no_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list", "--journal", str(tmp_path / "absent.sqlite3"), str(EXAMPLE)]) == 0
    assert "RECENT" not in capsys.readouterr().out
    assert not (tmp_path / "absent.sqlite3").exists()


def test_schema_prints_the_whole_file_schema_or_the_hooks_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["properties"]["lifecycle_hooks"] == {"$ref": "#/$defs/lifecycle_hooks"}
    assert main(["schema", "--hooks-only"]) == 0
    section = json.loads(capsys.readouterr().out)
    assert section["type"] == "array"
    assert section["items"] == {"$ref": "#/$defs/hook"}


def test_validate_accepts_a_template_directory(tmp_path: Path) -> None:
    (tmp_path / "scion-agent.yaml").write_text(EXAMPLE.read_text())
    result = run_module("validate", str(tmp_path))
    assert result.returncode == 0
    file = os.path.join(tmp_path, "scion-agent.yaml")
    assert result.stdout == f"ok: 5 hooks in {file}\n"
    assert result.stderr == MISSING_SCRIPT_WARNING.format(file)


def test_list_reads_the_real_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    journal_module = pytest.importorskip("otel_lifecycle_hooks.journal")
    path = tmp_path / "journal.sqlite3"
    journal = journal_module.Journal(path)
    for attempt_count in (1, 2):
        journal.record_execution(
            journal_module.ExecutionRow(
                hook="deregister-agent",
                event="pre-stop",
                outcome="success" if attempt_count == 2 else "failed",
                started_at=86400.0 * attempt_count,
                attempts=attempt_count,
                duration_ms=250.0,
                http_status=200 if attempt_count == 2 else 503,
            )
        )
    journal.close()
    monkeypatch.setenv("OTEL_LIFECYCLE_HOOKS_JOURNAL", str(path))
    assert main(["list", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert (
        "deregister-agent:\n"
        "  1970-01-03 00:00:00Z  pre-stop  success  0.250s  attempts=2  http=200\n"
        "  1970-01-02 00:00:00Z  pre-stop  failed  0.250s  attempts=1  http=503\n"
    ) in out
    assert "notify-slack:\n  (none)" in out


def _validate_on_a_terminal(path: Path, **env: str) -> str:
    """What `validate` writes on its stderr when that is a terminal (stdout too)."""
    environ = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    return run_on_a_terminal(
        [sys.executable, "-m", "otel_lifecycle_hooks", "validate", str(path)], {**environ, **env}
    )[1]


def test_validate_colours_on_a_terminal_as_history_does_and_honours_no_color(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "lifecycle_hooks:\n  - {name: a, on: [post-strat], action: {type: script, command: [x]}}\n"
    )
    coloured = _validate_on_a_terminal(path)
    assert f"\x1b[31m{path}:2:" in coloured  # the problem, in red
    assert "\x1b[33mwarning:\x1b[0m" in coloured
    plain = _validate_on_a_terminal(path, NO_COLOR="1")
    assert "\x1b[" not in plain and f"{path}:2:" in plain
    assert "\x1b[32mok:\x1b[0m 5 hooks" in _validate_on_a_terminal(EXAMPLE)
