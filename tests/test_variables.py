"""Variable resolution: the priority of the five layers, captures, `env:` expansion, secrets."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from otel_lifecycle_hooks.variables import (
    Reference,
    Variables,
    captured_variable_names,
    format_timestamp,
    format_unix_timestamp,
    parse_template,
    referenced_names,
)

# Highest priority first: the environment the operator sets beats the template's `env:`
# defaults, as it does for OTEL_* settings.
LAYERS = ("event", "metadata", "captured", "environ", "template_env")


def _layered(name: str, present_in: tuple[str, ...]) -> Variables:
    """Variables where `name` is set in each of `present_in`, holding that layer's name."""
    return Variables(**{layer: {name: layer} for layer in present_in})  # type: ignore[arg-type]


@pytest.mark.parametrize("winner", range(len(LAYERS)))
def test_a_layer_beats_every_layer_below_it(winner: int) -> None:
    variables = _layered("X", LAYERS[winner:])
    assert variables.get("X") == LAYERS[winner]


def test_the_environment_beats_a_template_env_default_and_says_so() -> None:
    variables = Variables(
        template_env={"BASE": "https://default"}, environ={"BASE": "https://mine"}
    )
    resolved = variables.resolve("BASE")
    assert resolved is not None and (resolved.value, resolved.layer) == ("https://mine", "environ")
    assert Variables(template_env={"BASE": "https://default"}).resolve("BASE") == (
        "https://default",
        "env",
        True,
    )


def test_a_template_env_entry_that_extends_the_environment_still_applies() -> None:
    variables = Variables(template_env={"PATH": "${PATH}:/opt/hooks"}, environ={"PATH": "/bin"})
    assert variables.get("PATH") == "/bin:/opt/hooks"


def test_a_shell_style_default_fills_an_unset_or_empty_variable() -> None:
    variables = Variables(environ={"SET": "value", "EMPTY": ""})
    assert variables.substitute("${SET:-d}|${EMPTY:-d}|${UNSET:-us-east1}|${UNSET:-}") == (
        "value|d|us-east1|"
    )
    assert variables.unresolved == set()  # a default is not a missing value
    (reference,) = [p for p in parse_template("${REGION:-us-east1}") if isinstance(p, Reference)]
    assert (reference.name, reference.default) == ("REGION", "us-east1")
    assert variables.resolve_reference(reference) == ("us-east1", "default", True)


def test_a_default_inside_template_env_applies_too() -> None:
    variables = Variables(template_env={"URL": "${HOST:-localhost}:8080"})
    assert variables.get("URL") == "localhost:8080"


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_alone_resolves(layer: str) -> None:
    assert _layered("X", (layer,)).get("X") == layer


def test_event_context_beats_metadata_for_the_seed_names() -> None:
    variables = Variables(
        event={"PHASE": "running", "TIMESTAMP": "2026-05-01T00:00:00Z"},
        metadata={"PHASE": "not-this", "AGENT_NAME": "agent-7"},
        environ={"AGENT_NAME": "not-this-either"},
    )
    assert variables.get("PHASE") == "running"
    assert variables.get("AGENT_NAME") == "agent-7"


def test_unresolved_names_are_none_recorded_and_substitute_as_empty() -> None:
    variables = Variables(environ={"HOME_DIR": "/home/a"})
    assert variables.get("NOPE") is None
    assert variables.substitute("a${MISSING}b${HOME_DIR}") == "ab/home/a"
    assert variables.unresolved == {"NOPE", "MISSING"}


def test_a_lookup_without_recording_leaves_unresolved_alone() -> None:
    variables = Variables()
    assert variables.get("NOPE", record=False) is None
    assert variables.unresolved == set()


def test_the_process_environment_is_never_read_implicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONLY_IN_OS_ENVIRON", "leaked")
    assert Variables().get("ONLY_IN_OS_ENVIRON") is None


# --- captured responses ----------------------------------------------------------------------


def test_captured_response_and_status_resolve_by_name() -> None:
    response, status = captured_variable_names("register-agent")
    assert (response, status) == ("HOOK_REGISTER_AGENT_RESPONSE", "HOOK_REGISTER_AGENT_STATUS")
    variables = Variables(captured={response: '{"name": "svc-1"}', status: "201"})
    assert variables.get("HOOK_REGISTER_AGENT_STATUS") == "201"
    assert json.loads(variables.get(response) or "") == {"name": "svc-1"}


def test_dotted_paths_walk_into_a_captured_json_body() -> None:
    body = {
        "service": {"id": "svc-1", "port": 8080, "ready": True, "tags": ["a"], "none": None},
        "items": [{"id": "first"}, {"id": "second"}],
    }
    variables = Variables(captured={"HOOK_X_RESPONSE": json.dumps(body)})
    assert variables.get("HOOK_X_RESPONSE.service.id") == "svc-1"
    assert variables.get("HOOK_X_RESPONSE.items.1.id") == "second"
    assert variables.get("HOOK_X_RESPONSE.service.port") == "8080"
    assert variables.get("HOOK_X_RESPONSE.service.ready") == "true"
    assert variables.get("HOOK_X_RESPONSE.service.none") == "null"
    assert variables.get("HOOK_X_RESPONSE.service.tags") == '["a"]'
    assert variables.unresolved == set()


@pytest.mark.parametrize(
    "reference",
    ["HOOK_X_RESPONSE.service.missing", "HOOK_X_RESPONSE.items.9.id", "HOOK_X_RESPONSE.items.x"],
)
def test_a_path_that_does_not_exist_is_unresolved(reference: str) -> None:
    variables = Variables(captured={"HOOK_X_RESPONSE": '{"service": {}, "items": []}'})
    assert variables.get(reference) is None
    assert variables.unresolved == {reference}


def test_a_path_into_a_body_that_is_not_json_is_unresolved() -> None:
    variables = Variables(captured={"HOOK_X_RESPONSE": "plain text"})
    assert variables.get("HOOK_X_RESPONSE") == "plain text"
    assert variables.get("HOOK_X_RESPONSE.id") is None


def test_captured_values_are_read_when_looked_up_not_when_built() -> None:
    captured: dict[str, str] = {}
    variables = Variables(captured=captured)
    assert variables.get("HOOK_A_STATUS", record=False) is None
    captured["HOOK_A_STATUS"] = "200"
    assert variables.get("HOOK_A_STATUS") == "200"


# --- template env ----------------------------------------------------------------------------


def test_template_env_values_reference_other_variables() -> None:
    variables = Variables(
        metadata={"AGENT_SLUG": "agent-7"},
        template_env={
            "GCP_PROJECT": "my-project",
            "PARENT": "projects/${GCP_PROJECT}/locations/${GCP_REGION}",
            "SERVICE": "${PARENT}/services/${AGENT_SLUG}",
        },
        environ={"GCP_REGION": "us-central1"},
    )
    assert variables.get("SERVICE") == "projects/my-project/locations/us-central1/services/agent-7"


def test_an_env_value_referencing_its_own_name_reads_the_process_environment() -> None:
    variables = Variables(template_env={"PATH": "${PATH}:/opt/hooks"}, environ={"PATH": "/bin"})
    assert variables.get("PATH") == "/bin:/opt/hooks"


def test_an_env_cycle_ends_and_reports_the_names_it_could_not_resolve() -> None:
    variables = Variables(template_env={"A": "a(${B})", "B": "b(${A})"})
    assert variables.get("A") == "a(b())"
    assert variables.get("B") == "b(a())"
    assert variables.unresolved == {"A", "B"}


def test_substituted_values_are_never_expanded_again() -> None:
    variables = Variables(
        event={"ASSISTANT_TEXT": "${SECRET_TOKEN}"},
        template_env={"MESSAGE": "said: ${ASSISTANT_TEXT}", "SECRET_TOKEN": "s3cr3t"},
    )
    assert variables.get("MESSAGE") == "said: ${SECRET_TOKEN}"
    assert variables.substitute("${ASSISTANT_TEXT}") == "${SECRET_TOKEN}"


def test_configuration_is_trusted_and_agent_values_are_not() -> None:
    variables = Variables(
        event={"TOOL_NAME": "bash"},
        metadata={"AGENT_NAME": "a"},
        template_env={"PLAIN": "x/y", "MIXED": "x/${TOOL_NAME}", "FROM_OS": "${HOME_DIR}"},
        environ={"HOME_DIR": "/home/a"},
    )
    trust = {
        name: variables.resolve(name).trusted
        for name in ("TOOL_NAME", "AGENT_NAME", "PLAIN", "MIXED", "FROM_OS", "HOME_DIR")  # type: ignore[union-attr]
    }
    assert trust == {
        "TOOL_NAME": False,
        "AGENT_NAME": False,
        "PLAIN": True,
        "MIXED": False,
        "FROM_OS": True,
        "HOME_DIR": True,
    }


# --- syntax ------------------------------------------------------------------------------


def test_a_doubled_dollar_writes_a_literal_reference() -> None:
    variables = Variables(environ={"X": "value"})
    assert variables.substitute("$${X} is ${X}, $$ and $ stay") == "${X} is value, $$ and $ stay"
    assert referenced_names("$${X}") == set()


def test_text_that_is_not_a_valid_reference_stays_as_written() -> None:
    variables = Variables(environ={"X": "value"})
    assert variables.substitute("${} ${1X} ${X-Y} $X") == "${} ${1X} ${X-Y} $X"
    assert variables.unresolved == set()


def test_parse_template_splits_literals_and_references() -> None:
    assert parse_template("a${B}c${D.e.0}") == (
        "a",
        Reference("B", (), 1),
        "c",
        Reference("D", ("e", "0"), 6),
    )


def test_referenced_names_drop_the_path() -> None:
    text = "${A} and ${HOOK_X_RESPONSE.items.0.id} and ${A}"
    assert referenced_names(text) == {"A", "HOOK_X_RESPONSE"}


# --- secrets and timestamps ----------------------------------------------------------------


def test_secret_values_are_the_resolved_values_of_secret_names() -> None:
    variables = Variables(
        template_env={"API_TOKEN": "tok-${SUFFIX}"},
        environ={"SUFFIX": "123", "EMPTY_SECRET": ""},
        secret_names={"API_TOKEN", "EMPTY_SECRET", "UNSET_SECRET"},
    )
    assert variables.secret_values() == {"tok-123"}
    assert variables.unresolved == set()


def test_timestamps_are_rfc3339_in_utc() -> None:
    moment = datetime(2026, 5, 1, 14, 0, 5, tzinfo=timezone(timedelta(hours=2)))
    assert format_timestamp(moment) == "2026-05-01T12:00:05.000000Z"
    assert format_timestamp(moment.replace(microsecond=250001)) == "2026-05-01T12:00:05.250001Z"


def test_a_unix_moment_is_shown_to_its_exact_microsecond() -> None:
    """Two moments a microsecond apart never show the same text (it ends X-Scion-Hook-ID),
    and one moment shows the same text wherever it is formatted."""
    base = 1_796_000_000_000_000  # microseconds, in 2026
    texts = {format_unix_timestamp((base + step) / 1_000_000) for step in range(5000)}
    assert len(texts) == 5000
    assert (
        format_unix_timestamp(1_796_000_000.9999996) == "2026-11-30T00:53:21.000000Z"
    )  # rounds, carries


def test_a_default_renders_in_a_json_body_like_any_value() -> None:
    from otel_lifecycle_hooks.render import render_body

    body = render_body('{"region": "${REGION:-us-east1}", "n": ${COUNT:-3}}', Variables())
    assert json.loads(body) == {"region": "us-east1", "n": 3}
