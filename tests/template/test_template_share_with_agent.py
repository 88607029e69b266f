"""`share_with_agent:` names the hook credentials the agent's environment keeps: a list of names,
merged as a union; anything else is refused where it is written, with the form to use."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_lifecycle_hooks.template.loader import load_templates
from otel_lifecycle_hooks.template.problems import TemplateError

HOOK = """\
lifecycle_hooks:
  - name: comment
    on: [session-end]
    action:
      type: http
      url: "https://api.example.com/c"
      auth: {type: bearer-token, token_env: GITHUB_TOKEN}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_list_of_names_is_read_and_merged_templates_share_the_union(tmp_path: Path) -> None:
    parent = write(tmp_path, "parent.yaml", "share_with_agent: [GITHUB_TOKEN]\n" + HOOK)
    child = write(tmp_path, "child.yaml", "share_with_agent: [NPM_TOKEN]\n")

    assert load_templates([parent]).share_with_agent == {"GITHUB_TOKEN"}
    assert load_templates([parent, child]).share_with_agent == {"GITHUB_TOKEN", "NPM_TOKEN"}


@pytest.mark.parametrize("value", ["GITHUB_TOKEN", "[GITHUB_TOKEN, 3]", "{GITHUB_TOKEN: yes}"])
def test_anything_but_a_list_of_names_is_refused_saying_how_to_write_it(
    tmp_path: Path, value: str
) -> None:
    path = write(tmp_path, "t.yaml", f"share_with_agent: {value}\n" + HOOK)

    with pytest.raises(TemplateError) as caught:
        load_templates([path])
    assert "share_with_agent" in str(caught.value)
    assert "share_with_agent: [GITHUB_TOKEN]" in str(caught.value)
