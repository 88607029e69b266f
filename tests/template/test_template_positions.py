"""Every problem points at the field it is about: file:line:col of the offending value, not of
the hook that holds it; and `validate --json` gives each hook problem its entry's index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_lifecycle_hooks.cli.main import main
from otel_lifecycle_hooks.template.checks import template_warnings
from otel_lifecycle_hooks.template.loader import load_template_text, load_templates
from otel_lifecycle_hooks.template.problems import TemplateError
from otel_lifecycle_hooks.template.validate import capture_warnings

# The second hook (index 1) is the one with the problem, its action on line 7.
HTTP = """\
lifecycle_hooks:
  - name: fine
    on: [post-start]
    action: {{type: http, url: "https://ok.example.com/"}}
  - name: probe
    on: [tool-start]
    action: {{type: http, {field}}}
"""
SCRIPT = """\
lifecycle_hooks:
  - name: fine
    on: [post-start]
    action: {{type: http, url: "https://ok.example.com/"}}
  - name: run
    on: [tool-start]
    action: {{type: script, {field}}}
"""


def problems_of(text: str) -> list[str]:
    with pytest.raises(TemplateError) as refused:
        load_template_text(text, "t.yaml")
    return [str(problem) for problem in refused.value.problems]


@pytest.mark.parametrize(
    ("template", "field", "value", "path"),
    [
        (HTTP, 'url: "http://${TOOL_NAME}/x"', '"http', "action.url"),
        (HTTP, 'url: "https://a.example.com:${ERROR_MESSAGE}/x"', '"https', "action.url"),
        (HTTP, 'url: "https://${PROMPT}@a.example.com/x"', '"https', "action.url"),
        (
            HTTP,
            'url: "https://a.example.com/", headers: {Host: "${TOOL_NAME}"}',
            '"${TOOL_NAME}"',
            "action.headers.Host",
        ),
        (SCRIPT, 'command: ["${TOOL_NAME}", "--flag"]', '"${TOOL', "action.command[0]"),
        (SCRIPT, 'command: [sh, -c, "echo ${TOOL_NAME}"]', '"echo', "action.command[2]"),
        (
            SCRIPT,
            'command: [/bin/true], env: {PATH: "${ASSISTANT_TEXT}"}',
            '"${ASSISTANT',
            "action.env.PATH",
        ),
    ],
)
def test_an_agent_value_refused_by_the_trust_rules_points_at_its_field(
    template: str, field: str, value: str, path: str
) -> None:
    text = template.format(field=field)
    line = text.splitlines()[6]
    hook = "probe" if template is HTTP else "run"
    [problem] = problems_of(text)
    assert problem.startswith(f't.yaml:7:{line.index(value) + 1}: hook "{hook}"'), problem
    assert f'field "{path}"' in problem


def test_a_refusal_through_a_childs_env_points_at_the_parents_field(tmp_path: Path) -> None:
    parent = tmp_path / "parent.yaml"
    parent.write_text(HTTP.format(field='url: "${REGISTRY}/tools"'))
    child = tmp_path / "child.yaml"
    child.write_text("env:\n  REGISTRY: ${TOOL_NAME}\n")
    with pytest.raises(TemplateError) as refused:
        load_templates([parent, child])
    [problem] = refused.value.problems
    column = parent.read_text().splitlines()[6].index('"${REGISTRY}') + 1
    assert (problem.position.file, problem.position.line, problem.position.column) == (
        str(parent),
        7,
        column,
    )


def test_warnings_point_at_their_field(tmp_path: Path) -> None:
    text = """\
lifecycle_hooks:
  - name: later
    on: [session-end]
    action: {type: http, url: "https://ok.example.com/"}
  - name: notify
    on: [post-start]
    condition: 'ACTIVITY == "completed"'
    action:
      type: http
      url: "https://ok.example.com/${agent_name}"
      body: '{"r": "${HOOK_LATER_RESPONSE}"}'
  - name: clean
    on: [pre-stop]
    action:
      type: script
      command: [/nonexistent/cleanup.sh]
"""
    template = load_template_text(text, "t.yaml")
    found = sorted(
        f"{w.position.line}:{w.position.column} {w.field}"
        for w in template_warnings(template) + capture_warnings(template)
    )
    assert found == [
        "10:12 action.url",
        "11:13 action.body",
        "16:16 action.command",
    ]


def validate_json(capsys: pytest.CaptureFixture[str], path: Path) -> list[dict[str, object]]:
    assert main(["validate", "--json", str(path)]) == 1
    problems: list[dict[str, object]] = json.loads(capsys.readouterr().out)["problems"]
    return problems


def test_json_gives_each_hook_problem_its_entrys_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.yaml"
    # index 1: a named hook with a bad field; index 2: a trust refusal (checked after merging).
    path.write_text(
        HTTP.format(field='url: "https://ok.example.com/", method: PUTT')
        + "  - {on: [post-start], action: {type: http, url: 'https://ok.example.com/'}}\n"
    )
    problems = validate_json(capsys, path)
    assert [(p["hook"], p["index"], p["field"]) for p in problems] == [
        ("probe", 1, "action.method"),
        (None, 2, "name"),
    ]
    path.write_text(HTTP.format(field='url: "http://${TOOL_NAME}/x"'))
    [trust] = validate_json(capsys, path)
    assert (trust["hook"], trust["index"], trust["field"]) == ("probe", 1, "action.url")


def test_json_has_no_index_for_a_problem_outside_the_hooks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("env: [not, a, mapping]\nlifecycle_hooks: []\n")
    [problem] = validate_json(capsys, path)
    assert problem["field"] == "env"
    assert "index" not in problem
    assert problem["hook"] is None
