"""Whatever a file holds, the loader answers with a Template or a TemplateError, never a crash."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.model import Template
from otel_lifecycle_hooks.template.problems import TemplateError

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KEYS = [
    "lifecycle_hooks", "name", "on", "action", "type", "method", "url", "headers", "body",
    "auth", "token_env", "header", "credentials_file", "scopes", "command", "env", "on_error",
    "timeout", "blocking", "debounce", "condition", "enabled", "signing_secret_env", "secrets",
    "key", "limits", "user", "harness", "image", "<<",
]  # fmt: skip
WORDS = [
    "http", "webhook", "script", "post-start", "activity-change", "log", "fail", "retry",
    "gcp-default", "bearer-token", "api-key-header", "none", "10s", "500ms", "1500", "-1s",
    "https://example.com/a", "http://example.com/a", "${URL}", "ACTIVITY == completed",
    "Authorization", "Bearer ${T}", "TOKEN", "a\r\nb", "", "on",
]  # fmt: skip
TOKENS = [
    "lifecycle_hooks:", "- ", "  ", "    ", "\n", "\t", "on:", '"on":', "name: x", "action:",
    "type: http", "url:", "&a ", "*a", "<<: ", "!!int ", "!!binary ", "!foo ", "!!set ", "[",
    "]", "{", "}", ": ", ", ", "'", '"', "|\n", ">\n", "# c", "---\n", "...\n", "%YAML 1.1\n",
    "? ", "~", "2020-13-45", "0x1F", "1:30", "yes", "\ufeff", "\x00", "\u2028", "\\",
]  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WORDS),
    st.text(max_size=20),
)
structures = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), children, max_size=5
        ),
    ),
    max_leaves=30,
)
valid_hook: dict[str, Any] = {
    "name": "h",
    "on": ["activity-change"],
    "action": {"type": "http", "url": "https://example.com", "auth": "none"},
    "timeout": "5s",
}


def loads_or_refuses(text: str) -> None:
    try:
        result = load_template_text(text, "fuzz.yaml")
    except TemplateError as exc:
        assert exc.problems, "a TemplateError always holds a problem"
        for problem in exc.problems:
            assert str(problem).startswith("fuzz.yaml")
        return
    assert isinstance(result, Template)


@FUZZ
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    loads_or_refuses(text)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS + WORDS + KEYS), max_size=60))
def test_random_yaml_shaped_text(tokens: list[str]) -> None:
    loads_or_refuses("".join(tokens))


@FUZZ
@given(structures)
def test_random_structures_dumped_to_yaml(document: Any) -> None:
    loads_or_refuses(yaml.safe_dump(document))


@FUZZ
@given(st.lists(structures, max_size=3))
def test_random_hook_lists(hooks: list[Any]) -> None:
    loads_or_refuses(yaml.safe_dump({"lifecycle_hooks": hooks}))


@FUZZ
@given(
    st.sampled_from(["name", "on", "action", "timeout", "debounce", "condition", "on_error"]),
    st.sampled_from(["type", "url", "method", "headers", "body", "auth", "command", "env"]),
    structures,
)
def test_a_valid_hook_with_one_field_replaced(hook_key: str, action_key: str, value: Any) -> None:
    hook = {**valid_hook, hook_key: value}
    loads_or_refuses(yaml.safe_dump({"lifecycle_hooks": [hook]}))
    action = {**valid_hook["action"], action_key: value}
    loads_or_refuses(yaml.safe_dump({"lifecycle_hooks": [{**valid_hook, "action": action}]}))


def refusal(text: str) -> str:
    try:
        load_template_text(text, "f.yaml")
    except TemplateError as exc:
        return str(exc)
    raise AssertionError("loaded")


def test_recursive_aliases_and_alias_bombs_are_answered() -> None:
    assert refusal("lifecycle_hooks: &a [*a]\n") == (
        "f.yaml:1:18: lifecycle_hooks[0]: got a list; "
        "each hook is a mapping with name, on and action"
    )
    assert 'f.yaml:2:5: hook "x": field "on": missing' in refusal(
        "lifecycle_hooks:\n  - &h {name: x, <<: *h}\n"
    )
    # nine to the ninth strings if expanded; read as a graph, it is a few dozen nodes.
    # An alias reports the position where its anchor was written.
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n"
        for i in range(8)
    )
    assert refusal(bomb + "lifecycle_hooks: []\nenv: {A: *i}\n") == (
        'f.yaml:9:4: field "env.A": got a list; an env value is a string'
    )


def test_deep_nesting_is_answered() -> None:
    text = "lifecycle_hooks: " + "[" * 5000 + "]" * 5000
    assert refusal(text) == "f.yaml:1:1: invalid YAML: nested too deeply to read"


def test_control_characters_are_refused_with_their_position() -> None:
    assert refusal("lifecycle_hooks: []\nname: a\x08b\n") == (
        "f.yaml:2:8: invalid YAML: #x0008 is not allowed in YAML text"
    )
