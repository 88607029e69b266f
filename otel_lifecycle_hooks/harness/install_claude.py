"""Claude Code: command hooks in `settings.json` (`~/.claude/`, or a project's `.claude/`).

Claude Code removes every `OTEL_*` variable from its hooks' environment; the hook command finds
its supervisor through `$LIFECYCLE_HOOKS_SOCKET` or the supervisor's pointer file. Under `run`,
the supervisor also writes a settings file whose hooks are of type `http` and post straight to it
(`http_hooks_settings`): `claude --settings "$LIFECYCLE_HOOKS_CLAUDE_SETTINGS"` then costs no
process per event. Use one or the other for a session, not both, or every event arrives twice.
"""

from __future__ import annotations

from pathlib import Path

from .claude_hooks import EVENTS as CLAUDE_EVENTS
from .install import (
    HOOK_TIMEOUT_SECONDS,
    HookEvent,
    InstallPlan,
    Scope,
    plan_settings_install,
    plan_settings_uninstall,
    settings_json_path,
)

DIALECT = "claude"
EVENTS = tuple(HookEvent(name, matcher) for name, matcher in CLAUDE_EVENTS)


def settings_path(scope: Scope) -> Path:
    return settings_json_path(scope, ".claude")


def plan_install(scope: Scope, program: list[str]) -> InstallPlan:
    return plan_settings_install(
        DIALECT, scope, settings_path(scope), EVENTS, program, HOOK_TIMEOUT_SECONDS
    )


def plan_uninstall(scope: Scope) -> InstallPlan:
    return plan_settings_uninstall(DIALECT, scope, settings_path(scope))
