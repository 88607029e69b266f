"""`harness install` writes through a symlinked configuration (a dotfiles set-up) and
`harness uninstall` gives back every file byte for byte, and removes what install created."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from otel_lifecycle_hooks.harness.install import InstallError, Scope, plan

PROGRAM = ["/opt/bin/otel-lifecycle-hooks"]
HARNESSES = ("claude", "gemini", "codex", "opencode")


def _install(harness: str, home: Path) -> None:
    plan("install", harness, Scope(home), PROGRAM).apply()


def _uninstall(harness: str, home: Path) -> None:
    plan("uninstall", harness, Scope(home)).apply()


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` (folders as None), with each file's bytes."""
    return {
        str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
        for path in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("harness", HARNESSES)
def test_on_a_fresh_home_uninstall_leaves_nothing_install_created(
    tmp_path: Path, harness: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    _install(harness, home)
    assert _tree(home) != {}
    _uninstall(harness, home)
    assert _tree(home) == {}


def test_uninstall_gives_back_a_hand_formatted_settings_file_byte_for_byte(
    tmp_path: Path,
) -> None:
    # Four-space indents, an empty "hooks": {} of the user's, no final newline.
    original = '{\n    "model": "opus",\n    "hooks": {},\n    "env": {"A": "1"}\n}'
    for harness, folder in (("claude", ".claude"), ("gemini", ".gemini")):
        settings = tmp_path / folder / "settings.json"
        settings.parent.mkdir(parents=True)
        settings.write_text(original)
        _install(harness, tmp_path)
        assert json.loads(settings.read_text())["hooks"]  # installed
        _uninstall(harness, tmp_path)
        assert settings.read_text() == original, harness


def test_codex_config_with_comments_comes_back_byte_for_byte(tmp_path: Path) -> None:
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    original = '# my codex\nmodel = "gpt-5"   # pinned\n\n[tui]\nnotifications = true\n'
    config.write_text(original)
    _install("codex", tmp_path)
    _uninstall("codex", tmp_path)
    assert config.read_text() == original
    assert not (tmp_path / ".codex" / "hooks.json").exists()


def test_a_file_the_user_changed_after_install_keeps_the_change_at_uninstall(
    tmp_path: Path,
) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{\n    "model": "opus"\n}\n')
    _install("claude", tmp_path)
    changed = json.loads(settings.read_text())
    changed["theme"] = "dark"
    settings.write_text(json.dumps(changed, indent=4) + "\n")
    _uninstall("claude", tmp_path)
    assert json.loads(settings.read_text()) == {"model": "opus", "theme": "dark"}
    assert settings.read_text().startswith('{\n    "model"')  # the user's indentation


@pytest.mark.parametrize(
    ("harness", "relative"),
    [("claude", ".claude/settings.json"), ("codex", ".codex/config.toml")],
)
def test_a_symlinked_configuration_stays_a_symlink_and_its_target_is_written(
    tmp_path: Path, harness: str, relative: str
) -> None:
    home = tmp_path / "home"
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / Path(relative).name
    original = "{}\n" if relative.endswith(".json") else 'model = "gpt-5"\n'
    target.write_text(original)
    link = home / relative
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    _install(harness, home)
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert "hook" in target.read_text() and "--dialect" in target.read_text()
    _uninstall(harness, home)
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert target.read_text() == original


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a link of another user's")
def test_a_link_another_user_planted_is_not_written_through(tmp_path: Path) -> None:
    # Root installing into a project another user can write: a link of theirs at the
    # settings' name must not make root write where the link points.
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    victim = tmp_path / "victim.json"
    victim.write_text("{}\n")
    link = project / ".claude" / "settings.json"
    link.symlink_to(victim)
    os.lchown(link, 65534, 65534)
    with pytest.raises(InstallError, match="link"):
        plan("install", "claude", Scope(tmp_path / "home", project=project), PROGRAM).apply()
    assert victim.read_text() == "{}\n"
