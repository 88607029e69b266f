"""Gemini CLI: command hooks in `settings.json` (`~/.gemini/`, or a project's `.gemini/`).

Gemini CLI runs each hook with `bash -c`, the payload on stdin, and shows what a hook writes to
stderr to the user; the hook command writes there only when it cannot deliver an event.
`AfterModel` runs once per streamed chunk (the dialect keeps the last one); `PreCompress` runs
before every model call in 0.61.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .install import (
    HOOK_TIMEOUT_SECONDS,
    HookEvent,
    InstallPlan,
    Scope,
    add_command_hooks,
    hook_argv,
    is_our_command,
    json_settings_change,
    remove_command_hooks,
    shell_command,
)

DIALECT = "gemini"
TOOL_MATCHER = "*"
EVENTS = (
    HookEvent("SessionStart"),
    HookEvent("BeforeAgent"),
    HookEvent("BeforeModel"),
    HookEvent("AfterModel"),
    HookEvent("BeforeTool", TOOL_MATCHER),
    HookEvent("AfterTool", TOOL_MATCHER),
    HookEvent("Notification"),
    HookEvent("PreCompress"),
    HookEvent("AfterAgent"),
    HookEvent("SessionEnd"),
)
# Gemini CLI's timeouts are milliseconds.
TIMEOUT_MS = HOOK_TIMEOUT_SECONDS * 1000


def settings_path(scope: Scope) -> Path:
    base = scope.project if scope.project is not None else scope.home
    return base / ".gemini" / "settings.json"


def _is_ours(handler: Mapping[str, Any]) -> bool:
    return handler.get("type") == "command" and is_our_command(handler.get("command"), DIALECT)


def plan_install(scope: Scope, program: list[str]) -> InstallPlan:
    handler = {
        "type": "command",
        "command": shell_command(hook_argv(DIALECT, program)),
        "timeout": TIMEOUT_MS,
    }
    path = settings_path(scope)
    change = json_settings_change(
        path, lambda settings: add_command_hooks(settings, path, EVENTS, handler, _is_ours)
    )
    return InstallPlan(DIALECT, "install", scope, [change])


def plan_uninstall(scope: Scope) -> InstallPlan:
    path = settings_path(scope)
    change = json_settings_change(path, lambda settings: remove_command_hooks(settings, _is_ours))
    return InstallPlan(DIALECT, "uninstall", scope, [change])
