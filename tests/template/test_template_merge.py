"""Templates compose: parent first, the child's hook replaces the parent's of the same name."""

from __future__ import annotations

from pathlib import Path

from otel_lifecycle_hooks.template.loader import load_templates

PARENT = """\
name: base
harness: claude
env: {REGION: us-central1, PROJECT: parent-project}
secrets: [PARENT_TOKEN]
limits: {max_turns: 10}
lifecycle_hooks:
  - name: register
    on: [post-start]
    action: {type: webhook, url: "https://parent.example.com/register"}
  - name: audit
    on: [session-end]
    action: {type: webhook, url: "https://parent.example.com/audit"}
  - name: deregister
    on: [pre-stop]
    action: {type: webhook, url: "https://parent.example.com/deregister"}
"""

CHILD = """\
name: child
env: {PROJECT: child-project}
secrets: [{key: CHILD_TOKEN}]
lifecycle_hooks:
  - name: notify
    on: [task-completed]
    action: {type: webhook, url: "https://child.example.com/notify"}
  - name: audit
    on: [session-end, error]
    action: {type: script, command: [/bin/audit]}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_child_hook_replaces_the_parents_in_place_and_new_hooks_are_appended(
    tmp_path: Path,
) -> None:
    parent, child = write(tmp_path, "parent.yaml", PARENT), write(tmp_path, "child.yaml", CHILD)
    template = load_templates([parent, child])
    assert [h.name for h in template.hooks] == ["register", "audit", "deregister", "notify"]
    audit = template.hooks[1]
    assert audit.action.type == "script"
    assert audit.on == ("session-end", "error")
    assert template.files == (str(parent), str(child))


def test_order_of_files_decides_who_wins(tmp_path: Path) -> None:
    parent, child = write(tmp_path, "parent.yaml", PARENT), write(tmp_path, "child.yaml", CHILD)
    template = load_templates([child, parent])
    assert [h.name for h in template.hooks] == ["notify", "audit", "register", "deregister"]
    assert template.hooks[1].action.type == "webhook"
    assert template.env["PROJECT"] == "parent-project"


def test_env_metadata_and_limits_merge_with_the_child_winning_and_secrets_unite(
    tmp_path: Path,
) -> None:
    parent, child = write(tmp_path, "parent.yaml", PARENT), write(tmp_path, "child.yaml", CHILD)
    template = load_templates([parent, child])
    assert template.env == {"REGION": "us-central1", "PROJECT": "child-project"}
    assert template.metadata == {"TEMPLATE_NAME": "child", "HARNESS_NAME": "claude"}
    assert template.secrets == {"PARENT_TOKEN", "CHILD_TOKEN"}
    assert template.limits == {"max_turns": "10"}


def test_a_child_may_disable_a_parent_hook_by_name(tmp_path: Path) -> None:
    parent = write(tmp_path, "parent.yaml", PARENT)
    child = write(
        tmp_path,
        "child.yaml",
        """\
lifecycle_hooks:
  - name: register
    enabled: false
    on: [post-start]
    action: {type: webhook, url: "https://parent.example.com/register"}
""",
    )
    template = load_templates([parent, child])
    assert [h.name for h in template.hooks] == ["register", "audit", "deregister"]
    assert template.hooks[0].enabled is False
    assert template.hooks_for("post-start") == ()
