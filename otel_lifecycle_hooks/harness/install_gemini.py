"""Gemini CLI: command hooks in `settings.json` (`~/.gemini/`, or a project's `.gemini/`).

Gemini CLI runs each hook with `bash -c`, the payload on stdin, and shows what a hook writes to
stderr to the user; the hook command writes there only when it cannot deliver an event.
`AfterModel` runs once per streamed chunk (the dialect keeps the last one); `PreCompress` runs
before every model call in 0.61.
"""

from __future__ import annotations

from pathlib import Path

from .install import (
    HOOK_TIMEOUT_SECONDS,
    HookEvent,
    InstallPlan,
    Scope,
    plan_settings_install,
    plan_settings_uninstall,
    settings_json_path,
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
    return settings_json_path(scope, ".gemini")


def plan_install(scope: Scope, program: list[str]) -> InstallPlan:
    return plan_settings_install(DIALECT, scope, settings_path(scope), EVENTS, program, TIMEOUT_MS)


def plan_uninstall(scope: Scope) -> InstallPlan:
    return plan_settings_uninstall(DIALECT, scope, settings_path(scope))
