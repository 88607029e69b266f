"""`harness install --template`: the hook command of an event where the template has a
fail-closed gate answers deny when no supervisor answers (`--on-unreachable deny`), so the
template's choice holds then too; every other event's command keeps the default (allow)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.harness.dialects import get_dialect
from otel_lifecycle_hooks.harness.install import (
    REFUSABLE_EVENTS,
    Scope,
    fail_closed_events,
    plan,
)
from otel_lifecycle_hooks.harness.refusals import REFUSABLE
from otel_lifecycle_hooks.template.loader import load_template_text
from tests.harnesses.session import PACKAGE_CLI

PROGRAM = ["/opt/bin/otel-lifecycle-hooks"]
DENY = "--on-unreachable deny"


def template(on_error: str, on: str = "tool-start") -> str:
    return textwrap.dedent(
        f"""\
        lifecycle_hooks:
          - name: shell-policy
            on: [{on}]
            action: {{type: http, method: POST, url: "http://127.0.0.1:8099/decide"}}
            blocking: true
            on_error: {on_error}
            timeout: 2s
        """
    )


def scope(home: Path, text: str | None) -> Scope:
    closed = None if text is None else fail_closed_events(load_template_text(text))
    return Scope(home, fail_closed=closed)


def install(harness: str, home: Path, text: str | None) -> None:
    plan("install", harness, scope(home, text), PROGRAM).apply()


def commands(settings_file: Path) -> dict[str, str]:
    hooks = json.loads(settings_file.read_text())["hooks"]
    return {event: groups[-1]["hooks"][-1]["command"] for event, groups in hooks.items()}


def test_fail_closed_events_are_the_gates_with_on_error_fail() -> None:
    assert fail_closed_events(load_template_text(template("fail"))) == {"tool-start"}
    assert fail_closed_events(load_template_text(template("log"))) == set()
    both = template("fail", "[tool-start, prompt-submit]".strip("[]"))
    assert fail_closed_events(load_template_text(both)) == {"tool-start", "prompt-submit"}
    # An event no harness lets a hook refuse has no gate, closed or not.
    assert fail_closed_events(load_template_text(template("fail", "tool-end"))) == set()


def test_claude_gets_deny_only_where_the_gate_is_fail_closed(tmp_path: Path) -> None:
    install("claude", tmp_path, template("fail"))
    written = commands(tmp_path / ".claude" / "settings.json")
    assert written["PreToolUse"].endswith(f"hook --dialect claude {DENY}")
    for event in ("UserPromptSubmit", "PermissionRequest", "Stop", "PostToolUse"):
        assert DENY not in written[event], event


def test_a_fail_open_template_writes_no_deny(tmp_path: Path) -> None:
    install("claude", tmp_path, template("log"))
    assert not any(DENY in c for c in commands(tmp_path / ".claude" / "settings.json").values())


def test_installing_again_follows_the_template_and_without_one_keeps_what_is_there(
    tmp_path: Path,
) -> None:
    settings_file = tmp_path / ".claude" / "settings.json"
    install("claude", tmp_path, template("log"))
    install("claude", tmp_path, template("fail"))
    assert commands(settings_file)["PreToolUse"].endswith(DENY)
    # Without a template (as `harness doctor` plans): nothing to change, the policy is kept.
    assert not plan("install", "claude", scope(tmp_path, None), PROGRAM).changed
    install("claude", tmp_path, template("log"))
    assert not commands(settings_file)["PreToolUse"].endswith(DENY)
    groups = json.loads(settings_file.read_text())["hooks"]["PreToolUse"]
    assert len(groups) == 1  # replaced in place, never a second hook


def test_gemini_codex_and_opencode_get_deny_at_their_tool_event(tmp_path: Path) -> None:
    for harness in ("gemini", "codex", "opencode"):
        install(harness, tmp_path, template("fail"))
    gemini = commands(tmp_path / ".gemini" / "settings.json")
    assert gemini["BeforeTool"].endswith(DENY) and DENY not in gemini["AfterAgent"]
    codex_home = tmp_path / ".codex"
    codex = commands(codex_home / "hooks.json")
    assert codex["PreToolUse"].endswith(DENY) and DENY not in codex["Stop"]
    tomllib.loads((codex_home / "config.toml").read_text())  # still valid after the change
    [plugin] = (tmp_path / ".config" / "opencode" / "plugins").glob("*.js")
    assert '"--on-unreachable", "deny"' in plugin.read_text()
    install("opencode", tmp_path, None)  # no template: the plugin keeps its policy
    assert '"--on-unreachable", "deny"' in plugin.read_text()
    install("opencode", tmp_path, template("log"))
    assert "--on-unreachable" not in plugin.read_text()


CLAUDE_PAYLOADS: dict[str, dict[str, Any]] = {
    "PreToolUse": {"tool_name": "Bash", "tool_input": {"command": "ls"}},
    "UserPromptSubmit": {"prompt": "go"},
    "PermissionRequest": {"tool_name": "Bash", "tool_input": {"command": "ls"}},
    "Stop": {"stop_hook_active": False},
}


def test_the_event_table_is_the_dialects_translation() -> None:
    """REFUSABLE_EVENTS names every refusable harness event, as its dialect translates it."""
    assert set(REFUSABLE_EVENTS) == {e for events in REFUSABLE.values() for e in events}
    samples: list[tuple[str, str, dict[str, Any]]] = [
        ("claude", name, {"hook_event_name": name, "session_id": "s", **body})
        for name, body in CLAUDE_PAYLOADS.items()
    ]
    samples += [
        ("gemini", "BeforeTool", {"hook_event_name": "BeforeTool", "tool_name": "ls"}),
        ("gemini", "AfterAgent", {"hook_event_name": "AfterAgent", "prompt_response": "ok"}),
        ("opencode", "tool.execute.before", {"type": "tool.execute.before", "input": {}}),
    ]
    for dialect, name, payload in samples:
        events = get_dialect(dialect).translate(payload, [])
        assert events and events[0].event == REFUSABLE_EVENTS[name], (dialect, name)


def run_cli(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run(
        [str(PACKAGE_CLI), *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=home,
    )


def test_the_installed_command_refuses_when_no_supervisor_answers(tmp_path: Path) -> None:
    """`harness install claude --template`, then the command it wrote, run as Claude Code
    runs it with no supervisor anywhere: the fail-closed tool call is refused."""
    (tmp_path / "scion-agent.yaml").write_text(template("fail"))
    done = run_cli(tmp_path, "harness", "install", "claude", "--template", "scion-agent.yaml")
    assert done.returncode == 0, done.stderr
    written = commands(tmp_path / ".claude" / "settings.json")
    payload = {"hook_event_name": "PreToolUse", "session_id": "s", **CLAUDE_PAYLOADS["PreToolUse"]}
    argv = shlex.split(written["PreToolUse"])
    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    answered = subprocess.run(
        argv, input=json.dumps(payload), env=env, capture_output=True, text=True, timeout=60
    )
    said = json.loads(answered.stdout)["hookSpecificOutput"]
    assert (
        said["permissionDecision"] == "deny" and "fail-closed" in said["permissionDecisionReason"]
    )
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "go"}
    allowed = subprocess.run(
        shlex.split(written["UserPromptSubmit"]),
        input=json.dumps(prompt),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert allowed.stdout == ""  # no fail-closed gate there: the agent goes on


@pytest.mark.parametrize(
    ("content", "expected"), [(None, "no such file"), ("lifecycle_hooks: 3\n", "lifecycle_hooks")]
)
def test_a_template_that_cannot_be_read_is_a_clear_error_and_nothing_is_written(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    path = tmp_path / "scion-agent.yaml"
    if content is not None:
        path.write_text(content)
    done = run_cli(tmp_path, "harness", "install", "claude", "--template", str(path))
    assert done.returncode == 2
    assert "scion-agent.yaml" in done.stderr and expected in done.stderr.lower()
    assert not (tmp_path / ".claude" / "settings.json").exists()
