"""Codex: command hooks in `hooks.json` and the `notify` program in `config.toml`.

`codex exec` silently skips every user hook that is not trusted. Codex records trust in
`config.toml` as `[hooks.state."<hooks.json path>:<event>:<group>:<handler>"]` with
`trusted_hash`, the sha256 of the handler's normalized identity (its event label, matcher and
handler, with `timeout` and `async` always present, as canonical JSON). Install writes those
entries for the hooks it adds, so the hooks run headless from the first session; changing a
hook by hand makes Codex treat it as modified (and skip it) until it is trusted again, for
example by running install again or with `/hooks` in the TUI.

Our additions to `config.toml` sit between marked comment lines: `notify` at the top (TOML wants
top-level keys before any table) and the trust entries at the end. A `notify` of the user's own
is kept; the `Stop` hook still reports the end of each turn.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .install import (
    HOOK_TIMEOUT_SECONDS,
    FileChange,
    HookEvent,
    InstallError,
    InstallPlan,
    Scope,
    add_command_hooks,
    hook_argv,
    is_our_handler,
    json_settings_change,
    read_text,
    remove_command_hooks,
    shell_command,
)

DIALECT = "codex"
# No matchers: Codex reads a matcher as a regular expression, and none matches every tool.
EVENTS = tuple(
    HookEvent(name)
    for name in (
        "SessionStart",
        "UserPromptSubmit",
        "PreModelRequest",
        "PreToolUse",
        "PermissionRequest",
        "PostToolUse",
        "PreCompact",
        "PostCompact",
        "SubagentStop",
        "Stop",
        "SessionEnd",
    )
)
# Codex clamps a SessionEnd hook's timeout to 1..3 s (and any other to at least 1 s).
SESSION_END_TIMEOUT = 3
MATCHERLESS_EVENTS = ("UserPromptSubmit", "Stop")  # Codex drops their matcher before hashing
NOTIFY_BEGIN = "# BEGIN otel-lifecycle-hooks notify (harness install codex)"
NOTIFY_END = "# END otel-lifecycle-hooks notify"
TRUST_BEGIN = "# BEGIN otel-lifecycle-hooks hook trust (harness install codex)"
TRUST_END = "# END otel-lifecycle-hooks hook trust"


def codex_home(scope: Scope) -> Path:
    explicit = scope.environ.get("CODEX_HOME")
    return Path(explicit) if explicit else scope.home / ".codex"


def hooks_path(scope: Scope) -> Path:
    if scope.project is not None:
        return scope.project / ".codex" / "hooks.json"
    return codex_home(scope) / "hooks.json"


def config_path(scope: Scope) -> Path:
    return codex_home(scope) / "config.toml"


def event_label(event: str) -> str:
    """`PreToolUse` -> `pre_tool_use`, the name Codex uses in trust keys."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()


def trusted_hash(event: str, group: Mapping[str, Any]) -> str:
    """The hash Codex compares with `trusted_hash` for the one handler of `group`."""
    [handler] = group["hooks"]
    timeout = int(handler.get("timeout", 600))
    if event == "SessionEnd":
        timeout = min(max(timeout, 1), SESSION_END_TIMEOUT)
    else:
        timeout = max(timeout, 1)
    normalized: dict[str, Any] = {
        "type": "command",
        "command": handler["command"],
        "timeout": timeout,
        "async": bool(handler.get("async", False)),
    }
    if handler.get("statusMessage") is not None:
        normalized["statusMessage"] = handler["statusMessage"]
    identity: dict[str, Any] = {"event_name": event_label(event), "hooks": [normalized]}
    if group.get("matcher") is not None and event not in MATCHERLESS_EVENTS:
        identity["matcher"] = group["matcher"]
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _is_ours(handler: Mapping[str, Any]) -> bool:
    return is_our_handler(handler, DIALECT)


def _our_handler(program: list[str], event: str, deny: bool | None) -> dict[str, Any]:
    timeout = SESSION_END_TIMEOUT if event == "SessionEnd" else HOOK_TIMEOUT_SECONDS
    return {
        "type": "command",
        "command": shell_command(hook_argv(DIALECT, program, deny)),
        "timeout": timeout,
    }


def plan_install(scope: Scope, program: list[str]) -> InstallPlan:
    path = hooks_path(scope)

    def add_all(settings: dict[str, Any]) -> dict[str, Any]:
        for event in EVENTS:
            deny = scope.unreachable_deny(event.name)
            handler = _our_handler(program, event.name, deny)
            settings = add_command_hooks(
                settings, path, [event], handler, _is_ours, replace=deny is not None
            )
        return settings

    hooks_change = json_settings_change(path, add_all)
    hooks_after = json.loads(hooks_change.after) if hooks_change.after else {}
    trust = _trust_entries(path.absolute(), hooks_after)
    notify = hook_argv(DIALECT, program)
    config_change, notes = _config_change(config_path(scope), trust, notify)
    plan = InstallPlan(DIALECT, "install", scope, [hooks_change, config_change], notes)
    if scope.project is not None:
        plan.notes.append(
            f'Codex loads {path} only for a trusted project: [projects."{scope.project}"] '
            'trust_level = "trusted" in your config.toml'
        )
    return plan


def plan_uninstall(scope: Scope) -> InstallPlan:
    path = hooks_path(scope)
    hooks_change = json_settings_change(path, lambda s: remove_command_hooks(s, _is_ours))
    config = config_path(scope)
    before = read_text(config)
    after = None if before is None else _without_our_blocks(before)
    if before is not None and after is not None and not after.strip() and before.strip():
        after = ""
    config_change = FileChange(config, before, after)
    return InstallPlan(DIALECT, "uninstall", scope, [hooks_change, config_change])


def _trust_entries(hooks_file: Path, settings: Mapping[str, Any]) -> dict[str, str]:
    entries: dict[str, str] = {}
    hooks = settings.get("hooks") or {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            continue
        for group_index, group in enumerate(groups):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(handlers, list):
                continue
            for handler_index, handler in enumerate(handlers):
                if isinstance(handler, dict) and _is_ours(handler):
                    key = f"{hooks_file}:{event_label(event)}:{group_index}:{handler_index}"
                    single = {**group, "hooks": [handler]}
                    entries[key] = trusted_hash(event, single)
    return entries


def _config_change(
    path: Path, trust: Mapping[str, str], notify: list[str]
) -> tuple[FileChange, list[str]]:
    before = read_text(path)
    notes: list[str] = []
    users = _without_our_blocks(before or "")
    try:
        parsed = tomllib.loads(users)
    except tomllib.TOMLDecodeError as exc:
        raise InstallError(f"{path}: not valid TOML ({exc}); nothing was changed") from None
    parts: list[str] = []
    if "notify" in parsed:
        notes.append(f"{path} has a notify program of its own: kept (the Stop hook reports turns)")
    else:
        parts += [NOTIFY_BEGIN, f"notify = {json.dumps(notify)}", NOTIFY_END, ""]
    parts.append(users.rstrip("\n") + "\n" if users.strip() else "")
    trust_lines = [TRUST_BEGIN]
    for key, digest in sorted(trust.items()):
        trust_lines += [
            f"[hooks.state.{json.dumps(key)}]",
            "enabled = true",
            f"trusted_hash = {json.dumps(digest)}",
        ]
    trust_lines.append(TRUST_END)
    after = "\n".join(parts).lstrip("\n")
    if after and not after.endswith("\n\n"):
        after = after.rstrip("\n") + "\n\n"
    after += "\n".join(trust_lines) + "\n"
    try:
        tomllib.loads(after)
    except tomllib.TOMLDecodeError as exc:
        raise InstallError(
            f"{path}: adding the hook trust entries would make it invalid TOML ({exc}); "
            "is a [hooks.state] entry of ours already written by hand? nothing was changed"
        ) from None
    if before is not None and _without_our_blocks(before) == users and before == after:
        return FileChange(path, before, before), notes
    return FileChange(path, before, after), notes


def _without_our_blocks(text: str) -> str:
    kept: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped in (NOTIFY_BEGIN, TRUST_BEGIN):
            skipping = True
            continue
        if skipping and stripped in (NOTIFY_END, TRUST_END):
            skipping = False
            continue
        if not skipping:
            kept.append(line)
    result = "".join(kept)
    return result.strip("\n") + "\n" if result.strip() else ""
