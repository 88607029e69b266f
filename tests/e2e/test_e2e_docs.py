"""The user documentation stays in step with the code it describes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks import events as ev
from otel_lifecycle_hooks.template.schema import template_file_schema
from otel_lifecycle_hooks.variables import EVENT_VARIABLES, METADATA_VARIABLES

DOCS = Path(__file__).resolve().parents[2] / "docs"
REFERENCE = DOCS / "template-reference.md"
EVENTS_PAGE = DOCS / "events-and-variables.md"

# A reference-table row whose first cell names a field: "| `timeout` | ..."
_TABLE_FIELD = re.compile(r"^\|\s*`([A-Za-z_][A-Za-z0-9_]*)`\s*\|", re.MULTILINE)


def _schema_properties(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(where, property name) for every `properties` entry anywhere in the schema."""
    if isinstance(node, dict):
        properties = node.get("properties")
        if isinstance(properties, dict):
            for name in properties:
                yield path, name
        for key, child in node.items():
            yield from _schema_properties(child, f"{path}/{key}")
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _schema_properties(child, f"{path}/{index}")


def _mentioned(text: str, word: str) -> bool:
    return f"`{word}`" in text


def test_every_schema_property_is_in_the_template_reference() -> None:
    reference = REFERENCE.read_text(encoding="utf-8")
    schema_properties = set(_schema_properties(template_file_schema()))
    hook_level = {name for where, name in schema_properties if where == "/$defs/hook"}
    action_level = {name for where, name in schema_properties if where == "/$defs/action"}
    # The walk must have found the hook and action sections, or this test proves nothing.
    assert {"name", "on", "action", "on_error", "timeout", "blocking"} <= hook_level
    assert {"type", "url", "headers", "body", "auth", "command", "env"} <= action_level
    missing = sorted(
        f"{where or '/'}: {name}"
        for where, name in schema_properties
        if not _mentioned(reference, name)
    )
    assert missing == [], f"template-reference.md does not mention: {missing}"


def test_every_field_the_reference_lists_exists_in_the_schema() -> None:
    reference = REFERENCE.read_text(encoding="utf-8")
    documented = set(_TABLE_FIELD.findall(reference))
    known = {name for _, name in _schema_properties(template_file_schema())}
    assert len(documented) >= 20  # the tables were found
    assert documented - known == set(), "documented fields the schema does not have"


@pytest.mark.parametrize(
    "values",
    [
        ("on_error", ("log", "fail", "retry")),
        ("action type", ("http", "webhook", "script")),
        (
            "auth",
            ("none", "gcp-default", "gcp-service-account", "bearer-token", "api-key-header"),
        ),
    ],
    ids=lambda values: values[0],
)
def test_every_choice_is_in_the_template_reference(values: tuple[str, tuple[str, ...]]) -> None:
    reference = REFERENCE.read_text(encoding="utf-8")
    _, choices = values
    assert [c for c in choices if not _mentioned(reference, c)] == []


def test_events_phases_activities_and_variables_are_documented() -> None:
    page = EVENTS_PAGE.read_text(encoding="utf-8")
    names = (
        *ev.TEMPLATE_EVENTS,
        *ev.RUNTIME_EVENTS,
        *ev.PHASES,
        *ev.ACTIVITIES,
        *EVENT_VARIABLES,
        *METADATA_VARIABLES,
        *ev.EVENT_ATTRIBUTES.values(),
        *ev.METADATA_ATTRIBUTES.values(),
        ev.HOOK_SPAN_NAME,
        ev.HOOK_RETRY_EVENT,
        ev.ATTR_EVENT,
        ev.HOOK_ATTR_NAME,
        ev.HOOK_ATTR_EVENT,
        ev.HOOK_ATTR_ACTION,
        ev.HOOK_ATTR_BLOCKING,
        ev.HOOK_ATTR_ON_ERROR,
        ev.HOOK_ATTR_ATTEMPTS,
        ev.HOOK_ATTR_OUTCOME,
        *ev.OUTCOMES,
    )
    assert [name for name in names if not _mentioned(page, name)] == []


def test_the_docs_link_to_pages_that_exist() -> None:
    pages = [DOCS.parent / "README.md", *sorted(DOCS.glob("*.md"))]
    assert len(pages) > 5
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text("utf-8")):
            if not (page.parent / target).resolve().is_file():
                broken.append(f"{page.name} -> {target}")
    assert broken == []
