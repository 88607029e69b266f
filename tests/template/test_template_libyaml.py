"""Templates are parsed by libyaml when it is there, and read exactly as PyYAML alone reads them:
the same hooks, the same positions, and the same problems in the same words."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from otel_lifecycle_hooks.template import loader
from otel_lifecycle_hooks.template.loader import load_template_text, load_templates
from otel_lifecycle_hooks.template.model import Template
from otel_lifecycle_hooks.template.problems import TemplateError

SPEC_TESTS = Path(__file__).parent
REPOSITORY = SPEC_TESTS.parent.parent
TEMPLATES = sorted(
    [
        *(SPEC_TESTS / "fixtures").glob("*.yaml"),
        *(SPEC_TESTS / "broken").glob("*.yaml"),
        *(REPOSITORY / "examples").rglob("*.yaml"),
        *(REPOSITORY / "benchmarks" / "templates").glob("*.yaml"),
    ]
)

needs_libyaml = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")


def _outcome(path: Path) -> Template | list[str]:
    """The loaded template, or the problems it is refused with."""
    try:
        return load_templates([path])
    except TemplateError as exc:
        return [str(problem) for problem in exc.problems]


@needs_libyaml
@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_libyaml_reads_every_template_as_pyyaml_does(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    through_libyaml = _outcome(path)
    monkeypatch.setattr(loader, "_compose_with_libyaml", lambda text, file: None)
    assert _outcome(path) == through_libyaml


@needs_libyaml
def test_a_valid_template_is_composed_by_libyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    composed: list[object] = []
    original = loader._compose_with_libyaml

    def spy(text: str, file: str) -> object:
        composed.append(original(text, file))
        return composed[-1]

    monkeypatch.setattr(loader, "_compose_with_libyaml", spy)
    template = load_templates([SPEC_TESTS / "fixtures" / "agent-registry.yaml"])
    assert template.hooks and composed and composed[0] is not None


@needs_libyaml
@pytest.mark.parametrize(
    "text",
    [
        "lifecycle_hooks: [\n",  # unclosed flow sequence
        "lifecycle_hooks:\n  - name: a\n   on: [post-start]\n",  # bad indentation
        "lifecycle_hooks: []\nbad: \x07\n",  # a control character PyYAML refuses
        'lifecycle_hooks: []\nq: "unterminated\n',
    ],
)
def test_yaml_that_is_refused_is_refused_in_pyyaml_words(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(TemplateError) as first:
        load_template_text(text, "t.yaml")
    monkeypatch.setattr(loader, "_compose_with_libyaml", lambda text, file: None)
    with pytest.raises(TemplateError) as pure:
        load_template_text(text, "t.yaml")
    assert [str(p) for p in first.value.problems] == [str(p) for p in pure.value.problems]
    assert all("invalid YAML" in str(p) for p in first.value.problems)


def test_a_duplicate_on_key_bare_and_quoted_is_told_apart_whichever_parser_reads_it() -> None:
    # libyaml gives a plain scalar the style "" where PyYAML gives None.
    text = 'lifecycle_hooks:\n  - name: a\n    on: [post-start]\n    "on": [pre-stop]\n'
    with pytest.raises(TemplateError) as caught:
        load_template_text(text, "t.yaml")
    assert any("bare (on:) and quoted" in str(p) for p in caught.value.problems)
