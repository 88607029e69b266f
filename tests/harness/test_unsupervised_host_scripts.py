"""`hook --template` without a supervisor and a host-protocol script (`hook_scripts:`): its
`discover` answer is kept for the harness session in the state file, so `discover` runs once
per session and script version, not before every event; a kept answer can only narrow what
runs. Real `hook` processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

from otel_lifecycle_hooks.harness.state import load_state, save_state
from tests.harness import test_in_process_session
from tests.harness.test_in_process_session import environment, hook

TURN = cast("list[dict[str, Any]]", test_in_process_session.TURN)

# Notes each stage it is run for, and handles only `before_stop`.
SCRIPT = """\
#!{python}
import json, sys

stage = sys.argv[1]
json.load(sys.stdin)
with open({calls!r}, "a") as calls:
    calls.write(stage + "\\n")
if stage == "discover":
    print(json.dumps({{"name": "guard", "stages": ["before_stop"]}}))
# {version}
"""


def write_script(path: Path, calls: Path, version: str = "1") -> Path:
    path.parent.mkdir(exist_ok=True)
    path.write_text(SCRIPT.format(python=sys.executable, calls=str(calls), version=version))
    path.chmod(0o755)
    return path


def write_template(directory: Path) -> Path:
    template = directory / "scion-agent.yaml"
    template.write_text("hook_scripts:\n  - hooks/guard.py\n", encoding="utf-8")
    return template


def run_turn(template: Path, env: dict[str, str], session: str = "s-1") -> None:
    for payload in TURN:
        hook(template, env, session, payload)


def stages(calls: Path) -> list[str]:
    return calls.read_text().split() if calls.exists() else []


def test_discover_is_asked_once_per_session_and_again_when_the_script_changes(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls"
    script = write_script(tmp_path / "hooks" / "guard.py", calls)
    template = write_template(tmp_path)
    env = environment(tmp_path)

    run_turn(template, env)
    assert stages(calls) == ["discover", "before_stop"]

    run_turn(template, env)  # the same session, the same script: the kept answer holds
    assert stages(calls) == ["discover", "before_stop", "before_stop"]

    write_script(script, calls, version="2, a longer line")  # another version of the script
    hook(template, env, "s-1", TURN[-1])
    assert stages(calls)[3:] == ["discover", "before_stop"]

    hook(template, env, "s-2", TURN[-1])  # another harness session asks again
    assert stages(calls)[5:] == ["discover", "before_stop"]


def _kept(env: dict[str, str], session: str) -> dict[str, Any]:
    state = load_state(Path(env["OTEL_LIFECYCLE_HOOKS_STATE"]))
    sessions = state["sessions"]
    assert isinstance(sessions, dict)
    kept: dict[str, Any] = sessions[session]["host_v1_discover"]
    return kept


def test_a_kept_answer_that_was_altered_never_widens_what_runs(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    script = write_script(tmp_path / "hooks" / "guard.py", calls)
    template = write_template(tmp_path)
    env = environment(tmp_path)
    hook(template, env, "s-1", TURN[2])  # tool-start: `discover` is asked, nothing else
    assert stages(calls) == ["discover"]
    path = Path(env["OTEL_LIFECYCLE_HOOKS_STATE"])
    [(key, answer)] = _kept(env, "s-1").items()
    assert Path(key) == script.resolve()
    assert answer["stages"] == ["before_stop"]

    # The agent may write the state file: it names another script, widens the stages of this
    # one, and gives an identity that is not the script's.
    other_calls = tmp_path / "other-calls"
    other = write_script(tmp_path / "hooks" / "other.py", other_calls)
    state = load_state(path)
    entry = state["sessions"]["s-1"]  # type: ignore[index]
    entry["host_v1_discover"] = {
        key: {**answer, "stages": ["before_tool", "after_tool", "no_such_stage"]},
        str(other): {**answer, "stages": ["before_tool"]},
    }
    save_state(path, state)
    hook(template, env, "s-1", TURN[2])  # tool-start: only the script's own answer counts
    assert stages(other_calls) == []
    # Its stages count only as a narrowing of the event's stages: not one outside them.
    assert set(stages(calls)) <= {"discover", "before_tool", "tool_before"}

    # An identity that is not the script's: the answer is not used, `discover` asks again.
    state = load_state(path)
    entry = state["sessions"]["s-1"]  # type: ignore[index]
    entry["host_v1_discover"] = {key: {**answer, "identity": [0, 0, 0, 0]}}
    save_state(path, state)
    before = len(stages(calls))
    hook(template, env, "s-1", TURN[2])
    assert stages(calls)[before:] == ["discover"]
    assert json.loads(json.dumps(_kept(env, "s-1")[key]["stages"])) == ["before_stop"]
