"""One `validate` run reports every problem it can find, whichever rule finds it: the rules of
each file (keys written twice, tags, durations) and those of the merged template (misspelt
conditions, turned-off hooks, trust), ordered by file and position. Only a file that cannot be
read stops the check, and the output says what was not checked. `test` and `run`, which load
through the same path, still refuse the whole template."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_lifecycle_hooks.template.loader import load_template_text, load_templates
from otel_lifecycle_hooks.template.problems import TemplateError

BROKEN = Path(__file__).parent / "broken"
EVERY_KIND = BROKEN / "every_kind_at_once.yaml"


def expected_problems(path: Path) -> list[str]:
    prefix = "# expect: "
    lines = path.read_text(encoding="utf-8").splitlines()
    return [f"{path}:{line[len(prefix) :]}" for line in lines if line.startswith(prefix)]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


@pytest.fixture(autouse=True)
def quiet_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_validate_prints_the_file_rules_and_the_merged_rules_together_in_position_order() -> None:
    result = cli("validate", str(EVERY_KIND))
    expected = expected_problems(EVERY_KIND)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [*expected, f"{len(expected)} problems in {EVERY_KIND}"]
    # one of each kind: a file rule, a merged-template rule, a trust rule, a YAML tag
    assert any("written twice" in line for line in expected)
    assert any("no known variable" in line for line in expected)
    assert any("chosen by the agent" in line for line in expected)
    assert any("YAML tag" in line for line in expected)


def test_validate_json_holds_the_same_problems_in_the_same_order() -> None:
    result = cli("validate", "--json", str(EVERY_KIND))
    report = json.loads(result.stdout)
    assert result.returncode == 1
    assert (report["ok"], report["complete"]) == (False, True)
    assert [problem["text"] for problem in report["problems"]] == expected_problems(EVERY_KIND)
    positions = [(problem["line"], problem["column"]) for problem in report["problems"]]
    assert positions == sorted(positions)
    assert "not_checked" not in report


def test_a_parent_and_a_child_are_checked_in_one_pass(tmp_path: Path) -> None:
    parent, child = tmp_path / "parent.yaml", tmp_path / "child.yaml"
    parent.write_text(
        "lifecycle_hooks:\n"
        "  - name: notify\n"
        "    on: [session-start]\n"
        "    timeout: soon\n"
        '    action: {type: http, url: "http://127.0.0.1:9/a"}\n'
    )
    child.write_text(
        "env:\n"
        "  TARGET: http://${TOOL_NAME}/\n"
        "lifecycle_hooks:\n"
        "  - {name: notify, enabled: false}\n"
        "  - name: watch\n"
        "    on: [tool-start]\n"
        "    condition: activity == completed\n"
        '    action: {type: http, url: "${TARGET}x"}\n'
    )
    with pytest.raises(TemplateError) as caught:
        load_templates([parent, child])
    problems = caught.value.problems
    assert [(p.position.file, p.hook, p.field) for p in problems] == [
        (str(parent), "notify", "timeout"),
        (str(child), "watch", "condition"),
        (str(child), "watch", "action.url"),
    ]
    # The child turns off a hook the parent defines, though that hook has a problem of its
    # own: no "none defines notify" beside it.
    assert not any("turn off" in p.message for p in problems)
    assert "did you mean ACTIVITY?" in problems[1].message


def test_a_turn_off_of_a_hook_no_file_names_is_still_reported_with_the_rest(
    tmp_path: Path,
) -> None:
    child = tmp_path / "child.yaml"
    child.write_text(
        "lifecycle_hooks:\n"
        "  - {name: nowhere, enabled: false}\n"
        "  - name: late\n"
        "    on: [session-end]\n"
        "    debounce: 1s\n"
        '    action: {type: http, url: "http://127.0.0.1:9/a"}\n'
    )
    with pytest.raises(TemplateError) as caught:
        load_templates([child])
    assert [(p.position.line, p.hook, p.field) for p in caught.value.problems] == [
        (2, "nowhere", "enabled"),
        (5, "late", "debounce"),
    ]


def test_invalid_yaml_stops_only_its_own_file_and_says_what_was_not_checked(
    tmp_path: Path,
) -> None:
    unreadable, other = tmp_path / "tabs.yaml", tmp_path / "other.yaml"
    unreadable.write_text("lifecycle_hooks:\n  - name: a\n\ton: [session-start]\n")
    other.write_text(
        "lifecycle_hooks:\n"
        '  - {name: b, on: [sesion-start], action: {type: http, url: "http://127.0.0.1:9/"}}\n'
    )
    result = cli("validate", str(unreadable), str(other))
    lines = result.stderr.splitlines()
    assert result.returncode == 1
    assert lines[0].startswith(f"{unreadable}:3:1: invalid YAML: found character '\\t'")
    assert lines[1].startswith(f'{other}:2:20: hook "b": field "on[0]": got "sesion-start"')
    assert lines[2] == (
        f"{unreadable}: its hooks and the merged template were not checked, since the file "
        "cannot be read past line 3, column 1; fix that and validate again for the rest"
    )
    assert lines[3] == f"2 problems in {unreadable}, {other}"
    report = json.loads(cli("validate", "--json", str(unreadable), str(other)).stdout)
    assert report["complete"] is False
    assert [(entry["file"], entry["line"], entry["column"]) for entry in report["not_checked"]] == [
        (str(unreadable), 3, 1)
    ]
    assert [problem["file"] for problem in report["problems"]] == [str(unreadable), str(other)]


def test_warnings_are_shown_among_the_problems(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "lifecycle_hooks:\n"
        "  - name: cleanup\n"
        "    on: [session-end]\n"
        f"    action: {{type: script, command: [{tmp_path}/missing.sh]}}\n"
        "  - name: broken\n"
        "    on: [session-end]\n"
        "    timeout: 0s\n"
        f"    action: {{type: script, command: [{tmp_path}/missing.sh]}}\n"
    )
    result = cli("validate", str(path))
    lines = result.stderr.splitlines()
    assert result.returncode == 1
    assert lines[0] == (
        f'warning: {path}:4:37: hook "cleanup": field "action.command": '
        f"the script {tmp_path}/missing.sh does not exist"
    )
    assert lines[1].startswith(f'{path}:7:14: hook "broken": field "timeout": ')
    # The hook with a problem of its own is looked at for warnings too.
    assert lines[2] == (
        f'warning: {path}:8:37: hook "broken": field "action.command": '
        f"the script {tmp_path}/missing.sh does not exist"
    )
    assert lines[3] == f"1 problem in {path}"
    report = json.loads(cli("validate", "--json", str(path)).stdout)
    assert [w["hook"] for w in report["warnings"]] == ["cleanup", "broken"]


def test_load_template_text_reports_a_tag_and_a_misspelt_condition_together() -> None:
    text = (
        "lifecycle_hooks:\n"
        "  - name: a\n"
        "    on: [activity-change]\n"
        "    condition: ACTIVTY == idle\n"
        "    blocking: !!bool true\n"
        '    action: {type: http, url: "http://127.0.0.1:9/"}\n'
        "  - name: b\n"
        "    on: [activity-change]\n"
        "    condition: ACTIVTY == idle\n"
        '    action: {type: http, url: !str "http://127.0.0.1:9/"}\n'
    )
    with pytest.raises(TemplateError) as caught:
        load_template_text(text, "t.yaml")
    assert [(p.position.line, p.field) for p in caught.value.problems] == [
        (4, "condition"),
        (9, "condition"),
        (10, None),
    ]


@pytest.mark.parametrize(
    "command",
    [
        ["test", str(EVERY_KIND), "--event", "session-start"],
        ["run", "--template", str(EVERY_KIND), "--", "sh", "-c", "touch started"],
    ],
    ids=["test", "run"],
)
def test_test_and_run_refuse_the_whole_template_with_every_problem(
    command: list[str], tmp_path: Path
) -> None:
    result = cli(*command, cwd=tmp_path)
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.splitlines() == expected_problems(EVERY_KIND)
    assert not (tmp_path / "started").exists()  # the agent never started on half a template
