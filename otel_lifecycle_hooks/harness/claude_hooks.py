"""Claude Code's hook events and the settings that send them to this package.

Kept apart from `install_claude` (which needs diffs and shell quoting) because the supervisor
builds the http-hook settings of every Claude Code session it starts.
"""

from __future__ import annotations

import os
import shlex
import sys

# (event, matcher): every event Claude Code 2.1 has that tells what the agent does; the
# dialect decides what each becomes. Tool events need a matcher; "*" matches every tool.
EVENTS: tuple[tuple[str, str | None], ...] = (
    ("SessionStart", None),
    ("UserPromptSubmit", None),
    ("PreToolUse", "*"),
    ("PermissionRequest", "*"),
    ("PostToolUse", "*"),
    ("PostToolUseFailure", "*"),
    ("Notification", None),
    ("Stop", None),
    ("StopFailure", None),
    ("SubagentStop", None),
    ("PreCompact", None),
    ("PostCompact", None),
    ("SessionEnd", None),
)
HOOK_TIMEOUT_SECONDS = 10
HTTP_TOKEN_ENV = "LIFECYCLE_HOOKS_HTTP_TOKEN"
HTTP_PATH = "/claude"


# Claude Code 2.1 skips http hooks on these (it logs "HTTP hooks are not supported for ...").
COMMAND_ONLY_EVENTS = ("SessionStart", "Setup")


def hook_command() -> str:
    """`<this install's console script> hook --dialect claude`, as one shell command."""
    script = os.path.join(os.path.dirname(sys.executable), "otel-lifecycle-hooks")
    program = (
        [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "otel_lifecycle_hooks"]
    )
    return " ".join(shlex.quote(word) for word in [*program, "hook", "--dialect", "claude"])


def http_hooks_settings(base_url: str) -> dict[str, object]:
    """Claude Code settings whose hooks post every event to the supervisor at `base_url`;
    SessionStart, where Claude Code runs no http hook, keeps the command hook (one process
    per session).

    Claude Code interpolates environment variables in an http hook's headers only (never in
    its URL), and only those listed in `allowedEnvVars`: the token travels as a variable.
    """
    handler = {
        "type": "http",
        "url": base_url.rstrip("/") + HTTP_PATH,
        "headers": {"Authorization": f"Bearer ${HTTP_TOKEN_ENV}"},
        "allowedEnvVars": [HTTP_TOKEN_ENV],
        "timeout": HOOK_TIMEOUT_SECONDS,
    }
    hooks: dict[str, list[dict[str, object]]] = {}
    command = {"type": "command", "command": hook_command(), "timeout": HOOK_TIMEOUT_SECONDS}
    for event, matcher in EVENTS:
        group: dict[str, object] = {} if matcher is None else {"matcher": matcher}
        group["hooks"] = [command if event in COMMAND_ONLY_EVENTS else handler]
        hooks[event] = [group]
    return {"hooks": hooks}
