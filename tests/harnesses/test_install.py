"""`harness install|uninstall`: the harness's own configuration, merged, idempotent, reversible.

Whether the harnesses really run what is written is checked against the real binaries in
test_claude.py, test_gemini.py and test_codex.py; these pin the file handling."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from otel_lifecycle_hooks.harness.install import Scope, plan
from tests.harnesses.session import PACKAGE_CLI

PROGRAM = ["/opt/bin/otel-lifecycle-hooks"]
USER_HOOK = {"type": "command", "command": "my-own-linter --check"}


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    env.pop("CODEX_HOME", None)
    return subprocess.run(
        [str(PACKAGE_CLI), "harness", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def install(harness: str, home: Path, **scope: object) -> None:
    plan("install", harness, Scope(home, **scope), PROGRAM).apply()  # type: ignore[arg-type]


def test_claude_install_adds_one_hook_per_event_and_keeps_the_users_own(tmp_path: Path) -> None:
    settings_file = tmp_path / ".claude" / "settings.json"
    settings_file.parent.mkdir()
    users = {"model": "opus", "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [USER_HOOK]}]}}
    settings_file.write_text(json.dumps(users))
    install("claude", tmp_path)
    settings = json.loads(settings_file.read_text())
    assert settings["model"] == "opus"
    pre_tool = settings["hooks"]["PreToolUse"]
    assert pre_tool[0] == {"matcher": "Bash", "hooks": [USER_HOOK]}
    assert (
        pre_tool[1]["hooks"][0]["command"] == "/opt/bin/otel-lifecycle-hooks hook --dialect claude"
    )
    for event in ("SessionStart", "UserPromptSubmit", "PostToolUse", "PermissionRequest", "Stop"):
        [group] = settings["hooks"][event]
        assert group["hooks"][0]["type"] == "command"


def test_installing_twice_changes_nothing(tmp_path: Path) -> None:
    for harness in ("claude", "gemini", "codex", "opencode"):
        install(harness, tmp_path)
        again = plan("install", harness, Scope(tmp_path), PROGRAM)
        assert again.changed == [], harness


def test_uninstall_removes_only_what_install_added(tmp_path: Path) -> None:
    settings_file = tmp_path / ".gemini" / "settings.json"
    settings_file.parent.mkdir()
    original = (
        json.dumps(
            {
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "hooks": {"BeforeTool": [{"matcher": "*", "hooks": [USER_HOOK]}]},
            },
            indent=2,
        )
        + "\n"
    )
    settings_file.write_text(original)
    install("gemini", tmp_path)
    assert len(json.loads(settings_file.read_text())["hooks"]) == 10
    plan("uninstall", "gemini", Scope(tmp_path)).apply()
    assert settings_file.read_text() == original


def test_codex_install_trusts_its_hooks_and_uninstall_restores_config_toml(tmp_path: Path) -> None:
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    original = 'model = "gpt-5"\n\n[model_providers.fake]\nname = "fake"\n'
    config.write_text(original)
    install("codex", tmp_path)
    parsed = tomllib.loads(config.read_text())
    assert parsed["notify"] == [*PROGRAM, "hook", "--dialect", "codex"]
    assert parsed["model_providers"]["fake"]["name"] == "fake"
    hooks_file = (tmp_path / ".codex" / "hooks.json").absolute()
    states = parsed["hooks"]["state"]
    assert f"{hooks_file}:pre_tool_use:0:0" in states
    assert f"{hooks_file}:pre_model_request:0:0" in states
    assert all(s["trusted_hash"].startswith("sha256:") for s in states.values())
    plan("uninstall", "codex", Scope(tmp_path)).apply()
    assert config.read_text() == original


def test_codex_keeps_a_notify_program_of_the_users_own(tmp_path: Path) -> None:
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('notify = ["notify-send", "codex"]\n')
    change = plan("install", "codex", Scope(tmp_path), PROGRAM)
    change.apply()
    assert tomllib.loads(config.read_text())["notify"] == ["notify-send", "codex"]
    assert any("notify program of its own" in note for note in change.notes)


def test_opencode_plugin_is_written_and_removed_but_a_foreign_file_is_left_alone(
    tmp_path: Path,
) -> None:
    install("opencode", tmp_path)
    plugin = tmp_path / ".config" / "opencode" / "plugins" / "otel-lifecycle-hooks.js"
    assert '"hook", "--dialect", "opencode"' in plugin.read_text()
    plan("uninstall", "opencode", Scope(tmp_path)).apply()
    assert not plugin.exists()
    assert not plugin.parent.exists()  # the folder install made for it went with it
    plugin.parent.mkdir(parents=True)
    plugin.write_text("// someone else's plugin\n")
    result = cli(tmp_path, "install", "opencode")
    assert result.returncode == 2
    assert "was not written by this package" in result.stderr
    assert plugin.read_text() == "// someone else's plugin\n"


def test_project_scope_writes_into_the_project(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    result = cli(tmp_path / "home", "install", "claude", "--project", str(project))
    assert result.returncode == 0, result.stderr
    assert (project / ".claude" / "settings.json").exists()
    assert not (tmp_path / "home" / ".claude").exists()


def test_dry_run_prints_a_diff_and_writes_nothing(tmp_path: Path) -> None:
    result = cli(tmp_path, "install", "claude", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("--- /dev/null\n+++ ")
    assert '+            "command": ' in result.stdout
    assert not (tmp_path / ".claude").exists()


def test_json_output_names_the_changed_files(tmp_path: Path) -> None:
    result = cli(tmp_path, "install", "codex", "--json")
    summary = json.loads(result.stdout)
    assert summary["action"] == "install" and summary["scope"] == "user"
    assert sorted(Path(p).name for p in summary["changed"]) == ["config.toml", "hooks.json"]
    again = json.loads(cli(tmp_path, "install", "codex", "--json").stdout)
    assert again["changed"] == []


def test_an_unknown_harness_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    result = cli(tmp_path, "install", "vscode")
    assert result.returncode == 2
    assert (
        "unknown harness 'vscode': expected one of claude, gemini, codex, opencode" in result.stderr
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{\n  "hooks": [,]\n}\n', "not valid JSON at line 2, column 13"),
        ("[1, 2]", "holds a JSON list"),
    ],
)
def test_a_settings_file_that_is_not_a_json_object_is_refused_untouched(
    tmp_path: Path, content: str, expected: str
) -> None:
    settings_file = tmp_path / ".claude" / "settings.json"
    settings_file.parent.mkdir()
    settings_file.write_text(content)
    result = cli(tmp_path, "install", "claude")
    assert result.returncode == 2
    assert str(settings_file) in result.stderr and expected in result.stderr
    assert settings_file.read_text() == content


def test_an_unreadable_settings_file_is_named_in_the_error(tmp_path: Path) -> None:
    (tmp_path / ".claude" / "settings.json").mkdir(parents=True)  # a directory: cannot be read
    result = cli(tmp_path, "install", "claude")
    assert result.returncode == 2
    assert "settings.json: cannot be read" in result.stderr
