"""The real opencode (tests/harnesses/npm_cache.py pins it) under `run`, through the plugin that
`harness install opencode` writes: what a hook receives, and what one prompt costs.

The tests it shares with the other harnesses (a session's hooks, SIGTERM in a tool, doctor) are
in test_real_harnesses.py; these are opencode's own: its plugin runs inside opencode and starts
the `hook` command itself, so the plugin decides how many processes a prompt costs and in
which order the events reach the supervisor.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harnesses import scenarios
from tests.harnesses.real import Opencode, harness_binary
from tests.harnesses.session import PACKAGE_CLI, SessionResult

# A hook program that counts its own starts, then is the package's CLI.
COUNTING_WRAPPER = """\
import os, sys
with open(sys.argv[1], "a") as count:
    count.write(" ".join(sys.argv[3:]) + "\\n")
os.execv(sys.argv[2], [sys.argv[2], *sys.argv[3:]])
"""


def run_counting(root: Path, scenario: scenarios.Scenario) -> tuple[SessionResult, list[str]]:
    """One opencode session whose plugin starts the hook command through COUNTING_WRAPPER."""
    root.mkdir(parents=True, exist_ok=True)
    wrapper, starts = root / "count_hook.py", root / "hook-starts.txt"
    wrapper.write_text(COUNTING_WRAPPER)
    program = [sys.executable, str(wrapper), str(starts), str(PACKAGE_CLI)]
    harness = Opencode(harness_binary("opencode"))
    result = harness.run(root / "session", scenario.script, extra=scenario.extra, program=program)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, starts.read_text().splitlines() if starts.exists() else []


@pytest.fixture(scope="module")
def tool_turn(tmp_path_factory: pytest.TempPathFactory) -> tuple[SessionResult, list[str]]:
    return run_counting(tmp_path_factory.mktemp("opencode"), scenarios.tool_turn("opencode"))


def by_event(result: SessionResult, name: str) -> list[dict[str, Any]]:
    return [e for e in result.runtime_events() if e["hook_event_name"] == name]


def test_a_tool_call_reaches_the_hooks_with_its_name_arguments_output_and_call_id(
    tool_turn: tuple[SessionResult, list[str]],
) -> None:
    result, _ = tool_turn
    [start] = [e["context"] for e in by_event(result, "tool-start")]
    [end] = [e["context"] for e in by_event(result, "tool-end")]
    for context in (start, end):
        assert context["TOOL_NAME"] == "bash"
        assert json.loads(context["TOOL_INPUT"])["command"] == "echo tool-ran", context
        assert context["TOOL_CALL_ID"].startswith("call_"), context
    assert start["TOOL_CALL_ID"] == end["TOOL_CALL_ID"]
    assert end["TOOL_OUTPUT"] == "tool-ran\n"


def test_the_end_of_the_turn_carries_the_assistants_answer(
    tool_turn: tuple[SessionResult, list[str]],
) -> None:
    result, _ = tool_turn
    [turn_end] = by_event(result, "agent-end")
    assert turn_end["context"]["ASSISTANT_TEXT"] == "It printed tool-ran."


def test_the_events_reach_the_supervisor_in_the_order_opencode_sent_them(
    tool_turn: tuple[SessionResult, list[str]],
) -> None:
    result, _ = tool_turn
    names = [e["hook_event_name"] for e in result.runtime_events()]
    assert names == ["session-start", "prompt-submit", "tool-start", "tool-end", "agent-end"]


def test_one_prompt_starts_a_hook_process_only_for_the_events_the_package_uses(
    tool_turn: tuple[SessionResult, list[str]],
) -> None:
    result, starts = tool_turn
    # opencode 1.18.33 publishes about ninety events for this prompt; five mean something here.
    assert len(starts) == len(result.runtime_events()) == 5, starts


def test_a_turn_that_ends_the_headless_task_completes_it_with_the_answer(tmp_path: Path) -> None:
    harness = Opencode(harness_binary("opencode"))
    scenario = scenarios.tool_turn("opencode")
    result = harness.run(
        tmp_path,
        scenario.script,
        extra=scenario.extra,
        env_extra={"LIFECYCLE_HOOKS_TURN_END_COMPLETES_TASK": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [completed] = result.fired("task-completed")
    assert completed["TASK_SUMMARY"] == "It printed tool-ran."
