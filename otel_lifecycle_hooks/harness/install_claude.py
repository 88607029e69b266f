"""Claude Code: command hooks in `settings.json` (`~/.claude/`, or a project's `.claude/`).

Claude Code removes every `OTEL_*` variable from its hooks' environment; the hook command finds
its supervisor through `$LIFECYCLE_HOOKS_SOCKET` or the supervisor's pointer file. Under `run`,
the supervisor also writes a settings file whose hooks are of type `http` and post straight to it
(`http_hooks_settings`): `claude --settings "$LIFECYCLE_HOOKS_CLAUDE_SETTINGS"` then costs no
process per event. Use one or the other for a session, not both, or every event arrives twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .claude_hooks import EVENTS as CLAUDE_EVENTS
from .install import (
    HOOK_TIMEOUT_SECONDS,
    FileChange,
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

DIALECT = "claude"
EVENTS = tuple(HookEvent(name, matcher) for name, matcher in CLAUDE_EVENTS)


def settings_path(scope: Scope) -> Path:
    base = scope.project if scope.project is not None else scope.home
    return base / ".claude" / "settings.json"


def _is_ours(handler: Mapping[str, Any]) -> bool:
    return handler.get("type") == "command" and is_our_command(handler.get("command"), DIALECT)


def plan_install(scope: Scope, program: list[str]) -> InstallPlan:
    handler = {
        "type": "command",
        "command": shell_command(hook_argv(DIALECT, program)),
        "timeout": HOOK_TIMEOUT_SECONDS,
    }
    path = settings_path(scope)
    change = json_settings_change(
        path, lambda settings: add_command_hooks(settings, path, EVENTS, handler, _is_ours)
    )
    return InstallPlan(DIALECT, "install", scope, [change])


def plan_uninstall(scope: Scope) -> InstallPlan:
    path = settings_path(scope)
    change: FileChange = json_settings_change(
        path, lambda settings: remove_command_hooks(settings, _is_ours)
    )
    return InstallPlan(DIALECT, "uninstall", scope, [change])
