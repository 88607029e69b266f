"""What the supervisor derives from the real harnesses' events, as SPEC §3 and issue 14 want it:

- within a turn the model keeps working after a tool or model call ends: thinking, not idle;
  idle (or completed) only at the end of the turn;
- waiting_for_input ends when work resumes after the answer, whatever event shows it;
- pre-compact only when the harness really compacts;
- one session id per session;
- the same real moment gives the same activity changes in every harness;
- at stop nothing the agent started outlives `run`, even a tool started with `setsid`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harnesses import scenarios
from tests.harnesses.real import HARNESS_CLASSES, harness_binary
from tests.harnesses.session import SessionResult
from tests.harnesses.test_real_harnesses import check_sigterm_leaves_no_process

END_OF_TURN = ("idle", "completed")


def run_scenario(name: str, scenario: scenarios.Scenario, root: Path) -> SessionResult:
    harness = HARNESS_CLASSES[name](harness_binary(name))
    result = harness.run(
        root, scenario.script, extra=scenario.extra, after_install=scenario.after_install
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def tool_turns(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SessionResult]:
    return {
        name: run_scenario(name, scenarios.tool_turn(name), tmp_path_factory.mktemp(name))
        for name in sorted(HARNESS_CLASSES)
    }


@pytest.mark.parametrize("name", sorted(HARNESS_CLASSES))
def test_the_model_working_on_a_tool_result_is_thinking_and_only_the_turn_ends_idle(
    name: str, tool_turns: dict[str, SessionResult]
) -> None:
    activities = tool_turns[name].activities()
    assert activities[0] == "thinking", activities
    assert "executing" in activities, activities
    after_tool = activities[activities.index("executing") + 1 :]
    assert after_tool and after_tool[0] == "thinking", activities
    assert activities[-1] in END_OF_TURN, activities
    assert "idle" not in activities[:-1], activities


def test_the_same_turn_gives_the_same_activity_changes_in_every_harness(
    tool_turns: dict[str, SessionResult],
) -> None:
    sequences = {name: result.activities() for name, result in tool_turns.items()}
    assert len({tuple(s) for s in sequences.values()}) == 1, sequences


@pytest.mark.parametrize("name", sorted(HARNESS_CLASSES))
def test_a_session_has_one_session_id(name: str, tool_turns: dict[str, SessionResult]) -> None:
    result = tool_turns[name]
    # What ${SESSION_ID} renders to in a runtime-event hook, and in the others.
    ids = {e["context"].get("SESSION_ID", e["session_id"]) for e in result.runtime_events()}
    ids |= {
        r["SESSION_ID"]
        for event in ("activity-change", "post-start", "session-end")
        for r in result.fired(event)
    }
    assert len(ids) == 1, ids


def test_gemini_pre_compress_before_each_model_call_is_no_pre_compact(
    tool_turns: dict[str, SessionResult],
) -> None:
    runtime = [e["hook_event_name"] for e in tool_turns["gemini"].runtime_events()]
    assert "pre-compact" not in runtime, runtime


@pytest.mark.parametrize("name", ["claude", "codex"])
def test_waiting_for_input_ends_when_work_resumes_after_the_answer(
    name: str, tmp_path: Path
) -> None:
    scenario = scenarios.permission(name)
    assert scenario is not None
    result = run_scenario(name, scenario, tmp_path)
    activities = result.activities()
    waiting = activities.index("waiting_for_input")
    # The wait ends (the prompt's event can reach the supervisor after the tool's: our hook is
    # another process, and the harness goes on once the user's own hook has answered).
    assert activities[waiting + 1 :], activities
    assert activities[-1] in END_OF_TURN, activities
    assert result.fired("task-completed") or activities[-1] == "idle"


def test_gemini_tool_started_with_setsid_does_not_outlive_run(tmp_path: Path) -> None:
    check_sigterm_leaves_no_process(HARNESS_CLASSES["gemini"](harness_binary("gemini")), tmp_path)
