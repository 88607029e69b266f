"""The shipped JSON Schema agrees with the loader: same enums, same keys, same verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_lifecycle_hooks.events import RUNTIME_EVENTS, TEMPLATE_EVENTS
from otel_lifecycle_hooks.template.model import ACTION_TYPES, AUTH_TYPES, ERROR_POLICIES
from otel_lifecycle_hooks.template.schema import lifecycle_hooks_schema, template_file_schema
from otel_lifecycle_hooks.template.validate import ACTION_KEYS, AUTH_KEYS, HOOK_KEYS, HTTP_METHODS

jsonschema = pytest.importorskip("jsonschema")

HERE = Path(__file__).parent
DEFS = template_file_schema()["$defs"]


def yaml_as_json(path: Path) -> Any:
    """The document as JSON sees it: a bare `on` key is the text "on", not YAML 1.1's true."""

    def fix(value: Any) -> Any:
        if isinstance(value, dict):
            return {("on" if key is True else key): fix(item) for key, item in value.items()}
        if isinstance(value, list):
            return [fix(item) for item in value]
        return value

    return fix(yaml.safe_load(path.read_text()))


def schema_errors(document: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(template_file_schema())
    return [error.message for error in validator.iter_errors(document)]


def test_both_schemas_are_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(template_file_schema())
    jsonschema.Draft202012Validator.check_schema(lifecycle_hooks_schema())


@pytest.mark.parametrize("name", ["scion-agent.yaml", "agent-registry.yaml"])
def test_the_seed_examples_validate_against_the_schema(name: str) -> None:
    document = yaml_as_json(HERE / "fixtures" / name)
    assert schema_errors(document) == []
    section_validator = jsonschema.Draft202012Validator(lifecycle_hooks_schema())
    assert list(section_validator.iter_errors(document["lifecycle_hooks"])) == []


def test_the_schema_enums_are_the_python_constants() -> None:
    assert DEFS["event"]["enum"] == list(TEMPLATE_EVENTS) + list(RUNTIME_EVENTS)
    assert DEFS["action"]["properties"]["type"]["enum"] == list(ACTION_TYPES)
    assert DEFS["hook"]["properties"]["on_error"]["enum"] == list(ERROR_POLICIES)
    assert DEFS["action"]["properties"]["method"]["enum"] == list(HTTP_METHODS)
    string_form, mapping_form = DEFS["auth"]["oneOf"]
    assert string_form["enum"] == list(AUTH_TYPES)
    assert mapping_form["properties"]["type"]["enum"] == list(AUTH_TYPES)


def test_the_schema_keys_are_the_loaders_keys() -> None:
    assert list(DEFS["hook"]["properties"]) == list(HOOK_KEYS)
    assert list(DEFS["action"]["properties"]) == list(ACTION_KEYS)
    assert list(DEFS["auth"]["oneOf"][1]["properties"]) == list(AUTH_KEYS)


def test_every_field_has_a_description() -> None:
    for definition in ("hook", "action"):
        for name, field in DEFS[definition]["properties"].items():
            described = field.get("description") or DEFS[field["$ref"].split("/")[-1]].get(
                "description"
            )
            assert described, f"{definition}.{name}"
    for name, field in DEFS["auth"]["oneOf"][1]["properties"].items():
        assert field.get("description"), f"auth.{name}"


def test_other_top_level_keys_are_allowed() -> None:
    assert schema_errors({"services": [{"name": "x"}], "anything": 1, "lifecycle_hooks": []}) == []


# Broken templates whose fault a schema can express; the rest need the loader's rules.
SCHEMA_REFUSES = [
    "on_error_invalid",
    "on_empty",
    "on_missing",
    "unknown_event",
    "unknown_hook_key",
    "unknown_action_key",
    "action_type_invalid",
    "action_missing",
    "http_without_url",
    "script_without_command",
    "webhook_with_method",
    "webhook_with_auth",
    "debounce_on_other_event",
    "on_error_fail_not_blocking",
    "timeout_bare_number",
    "timeout_not_duration",
    "timeout_negative",
    "command_as_string",
    "header_name_invalid",
    "auth_unknown",
    "auth_mapping_problems",
    "key_for_another_action_type",
    "token_env_holds_a_value",
    "name_problems",
    "lifecycle_hooks_not_a_list",
    "wrong_types",
]


@pytest.mark.parametrize("name", SCHEMA_REFUSES)
def test_the_schema_refuses_what_the_loader_refuses(name: str) -> None:
    assert schema_errors(yaml_as_json(HERE / "broken" / f"{name}.yaml")) != []


def test_the_schema_checks_limits_as_the_loader_does() -> None:
    assert schema_errors({"limits": {"max_turns": 5, "max_model_calls": "20"}}) == []
    assert schema_errors({"limits": {"max_duration": "1m30s"}}) == []
    for limits in ({"max_turn": 1}, {"max_duration": 3}, {"max_turns": "abc"}, {"max_turns": 0}):
        assert schema_errors({"limits": limits}) != [], limits
