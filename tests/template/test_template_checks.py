"""Validation catches what template authors get wrong: references that are not references,
misspelt variables, JSON bodies that are not JSON, scripts that are not there, and a child
turning off its parent's hook."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest

from otel_lifecycle_hooks.cli.dry_run import dry_run
from otel_lifecycle_hooks.template.checks import malformed_references, template_warnings
from otel_lifecycle_hooks.template.loader import load_template_text, load_templates
from otel_lifecycle_hooks.template.problems import TemplateError


def _hook(action: str, extra: str = "") -> str:
    return f"lifecycle_hooks:\n  - name: h\n    on: [session-end]\n{extra}    action:\n{action}"


def _problems(text: str) -> list[str]:
    with pytest.raises(TemplateError) as raised:
        load_template_text(text, "t.yaml")
    return [str(problem) for problem in raised.value.problems]


@pytest.mark.parametrize(
    ("url", "column", "expected"),
    [
        ("http://127.0.0.1/${OK", 30, 'unclosed reference "${OK": write ${OK}'),
        ("http://127.0.0.1/${AGENT-NAME}", 30, "did you mean ${AGENT_NAME}?"),
        ("http://127.0.0.1/${1BAD}", 30, "not starting with a digit (did you mean ${BAD}?)"),
        ("http://127.0.0.1/${}", 30, 'empty reference "${}": write ${NAME}'),
    ],
)
def test_a_malformed_reference_is_refused_where_it_stands_with_the_valid_form(
    url: str, column: int, expected: str
) -> None:
    text = _hook(f'      type: http\n      url: "{url}"\n')
    (problem,) = _problems(text)
    assert problem.startswith(f't.yaml:6:{column}: hook "h": field "action.url": ')
    assert expected in problem
    assert "${NAME:-default}" in problem  # every message shows the valid forms


def test_malformed_references_are_found_in_headers_bodies_commands_and_env() -> None:
    text = (
        "env:\n  BASE: '${BROKEN'\n"
        + _hook(
            '      type: http\n      url: "http://127.0.0.1/"\n'
            "      headers: {X-A: '${A-B}'}\n      body: 'x ${2X} y'\n"
        )
        + "  - name: s\n    on: [pre-start]\n    action:\n      type: script\n"
        '      command: ["echo", "${OOPS"]\n      env: {K: "${-}"}\n'
    )
    fields = sorted(problem.split('field "')[1].split('"')[0] for problem in _problems(text))
    assert fields == [
        "action.body",
        "action.command[1]",
        "action.env.K",
        "action.headers.X-A",
        "env.BASE",
    ]


def test_valid_forms_the_escape_and_a_lone_dollar_are_not_reported() -> None:
    assert malformed_references("${A} ${A.b.0} ${A:-x} ${A:-} $${NOT_A_REF $5 $${") == []
    assert (
        malformed_references("$$${A}") == []
    )  # an escaped `${`, then a literal `A}`? no: `$$` + `${A}`
    template = load_template_text(
        _hook('      type: http\n      url: "http://127.0.0.1/${REGION:-us}/x"\n'), "t.yaml"
    )
    assert template.hooks[0].action.url == "http://127.0.0.1/${REGION:-us}/x"


def test_a_variable_differing_only_by_case_gets_a_did_you_mean() -> None:
    template = load_template_text(
        _hook('      type: http\n      url: "http://127.0.0.1/"\n      body: "${agent_name}"\n'),
        "t.yaml",
    )
    (warning,) = template_warnings(template)
    assert warning.field == "action.body"
    assert "${agent_name} is no known variable (did you mean ${AGENT_NAME}?)" in str(warning)


def test_a_condition_on_a_misspelt_variable_is_refused_with_the_name_meant() -> None:
    """Compared as empty, `ACTIVTY == completed` would load and never fire."""
    (problem,) = _problems(
        _hook(
            '      type: webhook\n      url: "http://127.0.0.1/"\n',
            extra="    condition: ACTIVTY == completed\n",
        )
    )
    assert problem.startswith('t.yaml:4:16: hook "h": field "condition": ACTIVTY is no known ')
    assert "(did you mean ACTIVITY?)" in problem
    assert "env:" in problem  # how to say that the environment sets it


@pytest.mark.parametrize("name", ["activity", "Exit_Code"])
def test_a_condition_on_a_variable_differing_only_by_case_is_refused(name: str) -> None:
    (problem,) = _problems(
        _hook(
            '      type: webhook\n      url: "http://127.0.0.1/"\n',
            extra=f"    condition: {name} == completed\n",
        )
    )
    assert f"did you mean {name.upper()}?" in problem


def test_a_condition_on_a_name_from_the_environment_loads() -> None:
    """A name close to no known variable may come from the environment; one close to a known
    variable loads once the template declares it under env:."""
    for extra, env in (
        ("    condition: DEPLOY_TARGET == prod\n", ""),
        ("    condition: ACTIVITIES == many\n", "env:\n  ACTIVITIES: ''\n"),
    ):
        text = env + _hook('      type: webhook\n      url: "http://127.0.0.1/"\n', extra=extra)
        template = load_template_text(text, "t.yaml")
        assert template_warnings(template) == []


def test_known_names_env_keys_and_captured_responses_raise_no_warning() -> None:
    template = load_template_text(
        "env:\n  Base_Url: http://127.0.0.1\n"
        + _hook(
            '      type: http\n      url: "${Base_Url}/${HOOK_H_STATUS}"\n'
            '      body: "${AGENT_NAME} ${TOOL_NAME} ${SOMETHING_FROM_THE_ENVIRONMENT}"\n',
            extra="    condition: ACTIVITY == completed\n",
        ),
        "t.yaml",
    )
    assert template_warnings(template) == []


def test_a_json_body_that_does_not_parse_once_rendered_is_refused() -> None:
    text = _hook(
        '      type: http\n      url: "http://127.0.0.1/"\n'
        "      headers: {Content-Type: application/json}\n"
        "      body: '{\"count\": ${LIMIT_COUNT}, }'\n"
    )
    (problem,) = _problems(text)
    assert 'field "action.body": sent as JSON but is not JSON once rendered' in problem
    assert "line 1 column" in problem
    fine = text.replace(", }", "}")
    assert load_template_text(fine, "t.yaml").hooks[0].action.body == '{"count": ${LIMIT_COUNT}}'


def test_a_missing_or_not_executable_script_warns_at_validate_and_fails_test(
    tmp_path: Path,
) -> None:
    not_executable = tmp_path / "hook.sh"
    not_executable.write_text("#!/bin/sh\n")
    not_executable.chmod(stat.S_IRUSR | stat.S_IWUSR)
    path = tmp_path / "scion-agent.yaml"
    path.write_text(
        "lifecycle_hooks:\n"
        "  - {name: gone, on: [pre-start], "
        f'action: {{type: script, command: ["{tmp_path}/no.sh"]}}}}\n'
        "  - {name: plain, on: [pre-start], "
        f'action: {{type: script, command: ["{not_executable}"]}}}}\n'
        '  - {name: later, on: [pre-start], action: {type: script, command: ["${HOOKS}/x.sh"]}}\n'
    )
    template = load_templates([path])  # loads: these are warnings
    warnings = {w.hook: w.message for w in template_warnings(template)}
    assert warnings == {
        "gone": f"the script {tmp_path}/no.sh does not exist",
        "plain": f"the script {not_executable} is not executable (chmod +x {not_executable})",
    }
    out, err = io.StringIO(), io.StringIO()
    code = dry_run([str(path)], "pre-start", [], environ=dict(os.environ), out=out, err=err)
    assert code == 1
    assert f"error: the script {tmp_path}/no.sh does not exist" in out.getvalue()
    assert "is not executable" in out.getvalue()


def test_a_child_turns_off_a_parent_hook_with_only_name_and_enabled_false(tmp_path: Path) -> None:
    parent = tmp_path / "parent.yaml"
    parent.write_text(
        "lifecycle_hooks:\n"
        '  - {name: notify, on: [session-end], action: {type: webhook, url: "http://127.0.0.1/"}}\n'
        '  - {name: keep, on: [session-end], action: {type: webhook, url: "http://127.0.0.1/"}}\n'
    )
    child = tmp_path / "child.yaml"
    child.write_text("lifecycle_hooks:\n  - name: notify\n    enabled: false\n")
    template = load_templates([parent, child])
    assert [(hook.name, hook.enabled) for hook in template.hooks] == [
        ("notify", False),
        ("keep", True),
    ]
    assert template.hooks[0].action.url == "http://127.0.0.1/"  # the parent's hook, turned off
    assert [hook.name for hook in template.hooks_for("session-end")] == ["keep"]
    with pytest.raises(TemplateError) as alone:
        load_templates([child])
    assert 'none defines "notify"' in str(alone.value)
    assert str(alone.value).startswith(f'{child}:3:14: hook "notify": field "enabled"')


def test_the_schema_accepts_a_turn_off_entry_and_nothing_looser() -> None:
    import jsonschema

    from otel_lifecycle_hooks.template.schema import template_file_schema

    validator = jsonschema.Draft202012Validator(template_file_schema())

    def errors(hook: dict[str, object]) -> list[str]:
        return [e.message for e in validator.iter_errors({"lifecycle_hooks": [hook]})]

    assert errors({"name": "notify", "enabled": False}) == []
    assert errors({"name": "notify", "enabled": True}) != []
    assert errors({"name": "notify"}) != []
    assert errors({"name": "notify", "enabled": False, "timeout": "5s"}) != []
