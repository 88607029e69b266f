"""Every broken template under broken/ is refused with exactly the problems it announces.

Each file opens with `# expect: LINE:COL: message` lines, one per problem, in order; the
test prefixes the file name, as `validate` prints it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_lifecycle_hooks.template.loader import load_templates
from otel_lifecycle_hooks.template.problems import TemplateError

BROKEN = Path(__file__).parent / "broken"
BROKEN_FILES = sorted(BROKEN.glob("*.yaml"))


def expected_problems(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    prefix = "# expect: "
    return [f"{path}:{line[len(prefix) :]}" for line in lines if line.startswith(prefix)]


def test_the_catalogue_covers_every_rule() -> None:
    names = {path.stem for path in BROKEN_FILES}
    # seed 000's ten rules, then ours
    for required in (
        "duplicate_names",
        "on_missing",
        "unknown_event",
        "action_type_invalid",
        "http_without_url",
        "script_without_command",
        "timeout_above_maximum",
        "debounce_on_other_event",
        "on_error_invalid",
        "webhook_with_method",
        "auth_unknown",
        "on_error_fail_not_blocking",
        "credentials_over_plain_http",
        "webhook_with_auth",
        "header_name_invalid",
        "header_value_line_break",
        "timeout_bare_number",
        "timeout_bare_milliseconds",
        "timeout_zero",
        "timeout_negative",
        "unknown_hook_key",
        "unknown_action_key",
        "wrong_types",
        "name_problems",
        "condition_syntax",
        "bearer_without_token_env",
        "api_key_without_token_env",
        "token_env_holds_a_value",
        "malformed_yaml",
        "lifecycle_hooks_not_a_list",
        "on_bare_and_quoted",
        "command_as_string",
    ):
        assert required in names


@pytest.mark.parametrize("path", BROKEN_FILES, ids=[p.stem for p in BROKEN_FILES])
def test_broken_template_is_refused_with_its_expected_problems(path: Path) -> None:
    expected = expected_problems(path)
    assert expected, f"{path.name} announces no problem"
    with pytest.raises(TemplateError) as caught:
        load_templates([path])
    assert [str(problem) for problem in caught.value.problems] == expected
    assert str(caught.value) == "\n".join(expected)


def test_problems_of_several_files_are_reported_together_in_file_order() -> None:
    first, second = BROKEN / "on_error_invalid.yaml", BROKEN / "unknown_hook_key.yaml"
    with pytest.raises(TemplateError) as caught:
        load_templates([first, second])
    assert [str(p) for p in caught.value.problems] == (
        expected_problems(first) + expected_problems(second)
    )


def test_a_good_file_beside_a_broken_one_does_not_hide_the_problems() -> None:
    good = Path(__file__).parent / "fixtures" / "scion-agent.yaml"
    broken = BROKEN / "duplicate_names.yaml"
    with pytest.raises(TemplateError) as caught:
        load_templates([good, broken])
    assert [str(p) for p in caught.value.problems] == expected_problems(broken)


def test_one_bad_hook_means_nothing_is_loaded() -> None:
    with pytest.raises(TemplateError) as caught:
        load_templates([BROKEN / "one_bad_hook_among_good.yaml"])
    assert [p.hook for p in caught.value.problems] == ["bad-one"]


def test_problems_carry_file_position_hook_and_field() -> None:
    with pytest.raises(TemplateError) as caught:
        load_templates([BROKEN / "on_error_invalid.yaml"])
    (problem,) = caught.value.problems
    assert (problem.position.line, problem.position.column) == (6, 15)
    assert problem.position.file == str(BROKEN / "on_error_invalid.yaml")
    assert (problem.hook, problem.field) == ("register-agent", "on_error")
    assert problem.to_dict()["message"] == 'got "explode"; valid values are log, fail, retry'


def test_messages_never_repeat_a_secret_written_in_the_wrong_place() -> None:
    for name in ("token_env_holds_a_value", "literal_authorization_header"):
        with pytest.raises(TemplateError) as caught:
            load_templates([BROKEN / name])
        assert "sk-live" not in str(caught.value)
        assert "abc123" not in str(caught.value)
