"""`history` and `list` fit the terminal: 80 columns by default on an 80-column terminal or with
COLUMNS=80 (piped too, as `trace`), the least important columns cut or left out with a note
that says so, ids never cut; a wide terminal shows every column; a pipe without COLUMNS and
`--json` are untouched. The journal rows come from a real `run`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.terminal import run_on_a_terminal

FIXTURE = Path(__file__).parent / "template" / "fixtures" / "scion-agent.yaml"
ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "COLUMNS"))}
    env.update(
        HOME=str(root / "home"),
        LIFECYCLE_HOOKS_JOURNAL=str(root / "journal.sqlite3"),
        LIFECYCLE_HOOKS_LOG=str(root / "agent.log"),
        LIFECYCLE_HOOKS_TRACE_DIR=str(root / "traces"),
        OTEL_METRICS_EXPORTER="none",
        OTEL_TRACES_EXPORTER="none",
        NO_COLOR="1",
        **extra,
    )
    return env


def _cli(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", *args],
        env=_env(root, **env),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def journaled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A journal of real executions: a long-named hook that fails, a request refused by a
    closed loopback port, a hook that succeeds."""
    root = tmp_path_factory.mktemp("journaled")
    (root / "home").mkdir()
    template = root / "scion-agent.yaml"
    template.write_text(
        "lifecycle_hooks:\n"
        "  - name: update-registry-status-for-the-fleet\n"
        "    on: [post-start]\n"
        "    blocking: true\n"
        "    action: {type: script, command: [sh, -c, 'exit 3']}\n"
        "  - name: notify-collector\n"
        "    on: [session-end]\n"
        "    blocking: true\n"
        "    timeout: 2s\n"
        '    action: {type: http, url: "http://127.0.0.1:9/notify"}\n'
        "  - name: say-goodbye\n"
        "    on: [session-end]\n"
        "    action: {type: script, command: [sh, -c, 'exit 0']}\n"
    )
    for _ in range(2):
        result = _cli(root, "run", "-q", "--agent-name", "reviewer", "--template", str(template),
                      "--", "true")  # fmt: skip
        assert result.returncode == 0, result.stderr
    return root


def _widths(text: str) -> list[int]:
    return [len(ESCAPES.sub("", line)) for line in text.splitlines()]


def test_history_fits_80_columns_and_keeps_every_id_whole(journaled: Path) -> None:
    result = _cli(journaled, "history", COLUMNS="80")
    assert result.returncode == 0, result.stderr
    assert max(_widths(result.stdout)) <= 80, result.stdout
    rows = json.loads(_cli(journaled, "history", "--json").stdout)
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["ID", "STARTED"]
    # Every execution's id is there, whole, first on its line.
    assert [line.split()[0] for line in lines[1 : 1 + len(rows)]] == [str(r["id"]) for r in rows]
    assert "OUTCOME" in lines[0] and "HOOK" in lines[0]
    note = " ".join(lines[1 + len(rows) :])
    assert note.startswith("(not shown at 80 columns: ")
    assert "history show ID has every column" in note
    # The hook name cut with an ellipsis, not silently.
    assert "update-registry-status-for-the-fleet" not in result.stdout
    assert re.search(r"update-regis\S*…", result.stdout), result.stdout


def test_history_on_a_wide_terminal_shows_every_column(journaled: Path) -> None:
    result = _cli(journaled, "history", COLUMNS="200")
    header = result.stdout.splitlines()[0].split()
    assert header == [
        "ID", "STARTED", "AGENT", "SESSION", "HOOK", "EVENT", "OUTCOME", "ATTEMPTS",
        "DURATION", "RESULT", "ERROR", "REPLAY_OF",
    ]  # fmt: skip
    assert "update-registry-status-for-the-fleet" in result.stdout
    assert "not shown" not in result.stdout
    # A pipe with no COLUMNS gets the same whole table, for grep and the like.
    assert _cli(journaled, "history").stdout == result.stdout


def test_history_json_is_the_same_whatever_the_width(journaled: Path) -> None:
    narrow = _cli(journaled, "history", "--json", COLUMNS="40").stdout
    assert narrow == _cli(journaled, "history", "--json").stdout
    assert "update-registry-status-for-the-fleet" in narrow


def test_history_follow_fits_80_columns(journaled: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_lifecycle_hooks", "history", "--follow"],
        env=_env(journaled, COLUMNS="80"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        rows = len(json.loads(_cli(journaled, "history", "--json").stdout))
        lines: list[str] = []
        # The header, its note, then a line per row already journaled.
        while sum(1 for line in lines if line[:1].isdigit()) < rows:
            line = process.stdout.readline()
            assert line, "history --follow ended"
            lines.append(line.rstrip("\n"))
    finally:
        process.kill()
        process.wait(timeout=120)
    assert max(len(line) for line in lines) <= 80, lines
    assert lines[0].split()[:2] == ["ID", "STARTED"]


def test_history_reads_the_width_of_its_terminal(journaled: Path) -> None:
    """No COLUMNS: an 80-column terminal is what the table fits."""
    _, text = run_on_a_terminal(
        [sys.executable, "-m", "otel_lifecycle_hooks", "history"],
        _env(journaled),
        columns=80,
        stderr=False,
    )
    assert "not shown at 80 columns" in text.replace("\n", " ")
    assert max(_widths(text)) <= 80, text


def test_list_fits_80_columns_with_the_hook_names_whole(journaled: Path) -> None:
    result = _cli(journaled, "list", str(FIXTURE), COLUMNS="80")
    assert result.returncode == 0, result.stderr
    assert max(_widths(result.stdout)) <= 80, result.stdout
    listed = json.loads(_cli(journaled, "list", "--json", str(FIXTURE)).stdout)
    names = [hook["name"] for hook in listed["hooks"]]
    lines = result.stdout.splitlines()
    for name in names:  # each hook on a line of its own, its name whole
        assert any(line.split()[:1] == [name] for line in lines), name
    # The columns every hook holds at its default are named in a note, not dropped silently.
    assert "(ENABLED yes, ON_ERROR log for every hook)" in lines
    # The target, too long for the row, is on a line of its own under its hook.
    target = next(i for i, line in enumerate(lines) if line.startswith("    POST ${SLACK"))
    assert lines[target - 1].startswith("notify-slack ")


def test_list_on_a_wide_terminal_shows_every_column(journaled: Path) -> None:
    result = _cli(journaled, "list", str(FIXTURE), COLUMNS="200")
    header = result.stdout.splitlines()[0].split()
    assert header == [
        "NAME", "EVENTS", "ACTION", "TARGET", "ON_ERROR", "BLOCKING", "TIMEOUT", "DEBOUNCE",
        "ENABLED",
    ]  # fmt: skip
    assert "for every hook" not in result.stdout
    assert _cli(journaled, "list", str(FIXTURE)).stdout == result.stdout


def test_list_recent_executions_fit_80_columns(journaled: Path) -> None:
    template = journaled / "scion-agent.yaml"
    result = _cli(journaled, "list", str(template), COLUMNS="80")
    assert "RECENT EXECUTIONS" in result.stdout
    assert max(_widths(result.stdout)) <= 80, result.stdout
    assert "update-registry-status-for-the-fleet:" in result.stdout.splitlines()
    assert (
        _cli(journaled, "list", "--json", str(template), COLUMNS="80").stdout
        == _cli(journaled, "list", "--json", str(template)).stdout
    )
