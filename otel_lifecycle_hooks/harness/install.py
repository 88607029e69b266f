"""`harness install|uninstall`: a harness's own configuration, written to call this package.

Each harness has a small module (`install_claude`, `install_gemini`, `install_codex`,
`install_opencode`) that turns a `Scope` into an `InstallPlan`: the files it would change, each
as its text before and after. Planning reads files and never writes; `InstallPlan.apply` writes
them (atomically, keeping a file's mode). So `--dry-run` is the same plan printed as a diff.

What we add is recognisable by its command (`... hook --dialect NAME`), so installing twice
changes nothing, a user's own hooks are kept where they are, and uninstalling removes exactly
what an install added.

`supervisor.channel` imports this module on every `run` (for Claude Code's http settings): what
only install and uninstall use (difflib, shlex, shutil) is imported where it is used.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import json
import os
import re
import shlex
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine.gates import GATE_EVENTS, is_gate
from ..engine.policies import fails_transition
from ..errors import LifecycleHooksError
from ..private_files import replace_file
from . import install_record

if TYPE_CHECKING:
    from ..template.model import Template

PROGRAM = "otel-lifecycle-hooks"
HOOK_TIMEOUT_SECONDS = 10  # what a harness allows one hook call; ours take milliseconds


class InstallError(LifecycleHooksError):
    """A configuration that cannot be read or changed; the message says which and why."""


@dataclass(frozen=True)
class Scope:
    """Where to install: the user's own configuration (under `home`), or a project's."""

    home: Path
    project: Path | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    # The lifecycle events at which the template has a fail-closed gate (`fail_closed_events`):
    # their hook commands answer deny when no supervisor does. None: no template was given,
    # and what is installed keeps its policy.
    fail_closed: frozenset[str] | None = None

    def unreachable_deny(self, harness_event: str) -> bool | None:
        """Whether the hook command of `harness_event` is written with `--on-unreachable
        deny`; None when no template says (an installed command is kept as it is)."""
        if self.fail_closed is None:
            return None
        return REFUSABLE_EVENTS.get(harness_event) in self.fail_closed

    @property
    def label(self) -> str:
        return f"project {self.project}" if self.project is not None else "user"


@dataclass
class FileChange:
    """One file's text before and after (None: the file does not exist)."""

    path: Path
    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        before = [] if self.before is None else self.before.splitlines(keepends=True)
        after = [] if self.after is None else self.after.splitlines(keepends=True)
        lines = difflib.unified_diff(
            before,
            after,
            fromfile=str(self.path) if self.before is not None else "/dev/null",
            tofile=str(self.path) if self.after is not None else "/dev/null",
        )
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@dataclass
class InstallPlan:
    """What an install or uninstall changes, and what the user should know about it."""

    harness: str
    action: str  # "install" | "uninstall"
    scope: Scope
    changes: list[FileChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> list[FileChange]:
        return [change for change in self.changes if change.changed]

    def diff(self) -> str:
        return "".join(change.diff() for change in self.changed)

    def apply(self) -> None:
        """Write the changes; an install keeps a record of each file it wrote (what was
        there before, the folders it made), an uninstall forgets them (install_record.py)."""
        targets = {change.path: followed_link(change.path) for change in self.changed}
        # Before anything is written: the folders this install makes, for each file.
        missing = {path: install_record.missing_folders(target) for path, target in targets.items()}
        home = self.scope.home
        forgotten: list[install_record.InstalledFile] = []
        for change in self.changes:
            previous = install_record.read(home, change.path)
            created = missing.get(change.path, [])
            if change.changed:
                if change.after is None:
                    with contextlib.suppress(FileNotFoundError):
                        change.path.unlink()
                else:
                    write_text_atomically(targets[change.path], change.after)
            if self.action == "install" and change.after is not None and change.changed:
                if previous is None or change.before == previous.after:
                    install_record.write(
                        home,
                        install_record.InstalledFile(
                            path=str(change.path.absolute()),
                            before=previous.before if previous else change.before,
                            after=change.after,
                            created=previous.created
                            if previous
                            else tuple(str(folder) for folder in created),
                        ),
                    )
                else:  # changed by the user since: uninstall edits it, it does not restore
                    forgotten.append(previous)
            elif self.action == "uninstall" and previous is not None:
                forgotten.append(previous)
        install_record.forget(home, forgotten)

    def to_json(self) -> dict[str, object]:
        return {
            "harness": self.harness,
            "action": self.action,
            "scope": self.scope.label,
            "changed": [str(change.path) for change in self.changed],
            "unchanged": [str(change.path) for change in self.changes if not change.changed],
            "notes": self.notes,
        }


# -- reading and writing -------------------------------------------------------------------


def read_text(path: Path) -> str | None:
    """The file's text, None when it does not exist; `InstallError` when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InstallError(f"{path}: cannot be read ({reason}); nothing was changed") from None


def read_json_object(path: Path) -> tuple[str | None, dict[str, object]]:
    """The file's text and its JSON object ({} for a missing or empty file)."""
    text = read_text(path)
    if text is None or not text.strip():
        return text, {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        position = ""
        if isinstance(exc, json.JSONDecodeError):
            position = f" at line {exc.lineno}, column {exc.colno}"
        raise InstallError(
            f"{path}: not valid JSON{position}; fix or move it and run again (nothing was changed)"
        ) from None
    if not isinstance(value, dict):
        raise InstallError(
            f"{path}: holds a JSON {type(value).__name__}, but a settings object is expected; "
            "nothing was changed"
        )
    return text, value


def json_text(value: Mapping[str, object], like: str | None = None) -> str:
    """`value` as JSON, indented as the text `like` is (two spaces when it says nothing),
    ending with a newline unless `like` does not."""
    indent: str | int = 2
    found = re.search(r"^\{[ \t]*\r?\n([ \t]+)\S", like or "")
    if found:
        indent = found.group(1)
    ending = "" if like and not like.endswith("\n") else "\n"
    return json.dumps(value, indent=indent, ensure_ascii=False) + ending


MAX_LINKS = 8  # links followed to a configuration file before giving up


def followed_link(path: Path) -> Path:
    """Where writing `path` must go: a configuration kept as a link (a dotfiles set-up) is
    written where the link points, so it stays a link. Only a link of the installing user's
    own is followed: `install` may run as root in a project another user can write, where a
    link of theirs must never make root write through it."""
    for _ in range(MAX_LINKS):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return path
        if not stat.S_ISLNK(info.st_mode):
            return path
        if info.st_uid != os.geteuid():
            raise InstallError(
                f"{path}: a link owned by another user (uid {info.st_uid}); not written "
                "through, nothing was changed"
            )
        path = path.parent / os.readlink(path)
    raise InstallError(f"{path}: more than {MAX_LINKS} links in a row; nothing was changed")


def write_text_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` in one rename, keeping its mode (a new file gets the
    umask's). The text goes first to a temporary file of a random name, created exclusively
    and without following a link, in the same folder (through its descriptor): `install`
    runs as root, perhaps in a project another user can write, where a link planted at a
    name we would use must never be written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        replace_file(folder, path.name, text.encode("utf-8"), mode)
    finally:
        os.close(folder)


def _umask() -> int:
    # The only way to read it is to set it; install and uninstall run on one thread.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- our command -------------------------------------------------------------------------------


def package_command() -> list[str]:
    """How a harness runs this package: the console script beside this interpreter, else the
    one on PATH, else `python -m otel_lifecycle_hooks` (absolute paths, as harnesses may run
    hooks with another PATH)."""
    beside = Path(sys.executable).with_name(PROGRAM)
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]

    found = shutil.which(PROGRAM)
    if found:
        return [os.path.abspath(found)]
    return [sys.executable, "-m", "otel_lifecycle_hooks"]


def hook_argv(
    dialect: str, program: list[str] | None = None, unreachable_deny: bool | None = False
) -> list[str]:
    """Our hook command; `unreachable_deny`: it answers deny when no supervisor answers."""
    argv = [*(program or package_command()), "hook", "--dialect", dialect]
    return [*argv, *UNREACHABLE_DENY] if unreachable_deny else argv


# -- the template's policy when no supervisor answers (docs/gates.md) --------------------------

UNREACHABLE_DENY = ("--on-unreachable", "deny")
# The lifecycle event each harness event a hook can refuse becomes (the dialects' translation,
# pinned by tests/harness/test_install_unreachable.py); refusals.REFUSABLE names the events.
REFUSABLE_EVENTS: dict[str, str] = {
    "PreToolUse": "tool-start",
    "UserPromptSubmit": "prompt-submit",
    "PermissionRequest": "notification",
    "Stop": "agent-end",
    "BeforeTool": "tool-start",
    "AfterAgent": "agent-end",
    "tool.execute.before": "tool-start",
}


def fail_closed_events(template: Template) -> frozenset[str]:
    """The lifecycle events at which `template` has a fail-closed gate: a blocking hook with
    `on_error: fail` on an event a harness can refuse (at those its `refuse_on` names)."""
    return frozenset(
        event
        for event in GATE_EVENTS
        if any(
            is_gate(hook, event) and fails_transition(hook, "failure", event)
            for hook in template.hooks_for(event)
        )
    )


def shell_command(argv: Iterable[str]) -> str:
    return " ".join(shlex.quote(arg) for arg in argv)


def is_our_command(command: object, dialect: str) -> bool:
    """Whether a hook command is one an install of `dialect` wrote."""
    if not isinstance(command, str):
        return False

    try:
        words = shlex.split(command)
    except ValueError:
        return False
    for index in range(len(words) - 2):
        if words[index : index + 3] == ["hook", "--dialect", dialect]:
            before = " ".join(words[:index])
            return PROGRAM in before or "otel_lifecycle_hooks" in before
    return False


def is_our_handler(handler: Mapping[str, object], dialect: str) -> bool:
    """Whether a Claude-shaped hook handler is a command hook an install of `dialect` wrote."""
    return handler.get("type") == "command" and is_our_command(handler.get("command"), dialect)


# -- Claude-shaped hook settings (Claude Code, Gemini CLI, Codex hooks.json) -------------------


@dataclass(frozen=True)
class HookEvent:
    """One harness event to hook, with the matcher its groups need (None: no matcher)."""

    name: str
    matcher: str | None = None


def add_command_hooks(
    settings: dict[str, object],
    path: Path,
    events: Iterable[HookEvent],
    handler: dict[str, object],
    is_ours: Callable[[Mapping[str, object]], bool],
    replace: bool = False,
) -> dict[str, object]:
    """`settings` with `handler` in its own group on every event that does not have one of
    ours yet; the user's groups are left as they are, in their order. `replace`: a handler of
    ours that differs from `handler` (another unreachable policy) becomes `handler`."""
    # A deep copy through JSON: the input stays as read, and the result holds only JSON types.
    result: dict[str, object] = json.loads(json.dumps(settings))
    hooks = result.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InstallError(f'{path}: "hooks" is not an object; nothing was changed')
    for event in events:
        groups = hooks.setdefault(event.name, [])
        if not isinstance(groups, list):
            raise InstallError(
                f'{path}: "hooks.{event.name}" is not a list of groups; nothing was changed'
            )
        if any(_group_has(group, is_ours) for group in groups):
            if replace:
                for found in groups:
                    if _group_has(found, is_ours):
                        found["hooks"] = [
                            dict(handler) if isinstance(h, dict) and is_ours(h) else h
                            for h in found["hooks"]
                        ]
            continue
        group: dict[str, object] = {}
        if event.matcher is not None:
            group["matcher"] = event.matcher
        group["hooks"] = [dict(handler)]
        groups.append(group)
    return result


def remove_command_hooks(
    settings: dict[str, object], is_ours: Callable[[Mapping[str, object]], bool]
) -> dict[str, object]:
    """`settings` without our handlers; a group left empty, then an event left empty, go too."""
    result: dict[str, object] = json.loads(json.dumps(settings))
    hooks = result.get("hooks")
    if not isinstance(hooks, dict):
        return result
    for name in list(hooks):
        groups = hooks[name]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                remaining = [h for h in group["hooks"] if not (isinstance(h, dict) and is_ours(h))]
                if not remaining and group["hooks"]:
                    continue
                group = {**group, "hooks": remaining}
            kept.append(group)
        if kept:
            hooks[name] = kept
        else:
            del hooks[name]
    if not hooks:
        del result["hooks"]
    return result


def _group_has(group: object, is_ours: Callable[[Mapping[str, object]], bool]) -> bool:
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return False
    return any(isinstance(h, dict) and is_ours(h) for h in group["hooks"])


def json_settings_change(
    path: Path, transform: Callable[[dict[str, object]], dict[str, object]]
) -> FileChange:
    """The change `transform` makes to the JSON object in `path`; a file whose content would
    not change keeps its text byte for byte."""
    before, settings = read_json_object(path)
    updated = transform(settings)
    if updated == settings:
        return FileChange(path, before, before)
    return FileChange(path, before, json_text(updated, like=before))


def settings_json_path(scope: Scope, folder: str) -> Path:
    """`settings.json` in the harness's `folder` (`.claude`, `.gemini`) of the scope."""
    base = scope.project if scope.project is not None else scope.home
    return base / folder / "settings.json"


def plan_settings_install(
    dialect: str,
    scope: Scope,
    path: Path,
    events: Iterable[HookEvent],
    program: list[str],
    timeout: int,
) -> InstallPlan:
    """Our command hook on every one of `events` in a settings.json, beside the user's hooks;
    `timeout` in the harness's own unit. An event where the scope's template has a
    fail-closed gate gets `--on-unreachable deny`."""

    def is_ours(found: Mapping[str, object]) -> bool:
        return is_our_handler(found, dialect)

    def add_all(settings: dict[str, object]) -> dict[str, object]:
        for event in events:
            deny = scope.unreachable_deny(event.name)
            command = shell_command(hook_argv(dialect, program, deny))
            handler = {"type": "command", "command": command, "timeout": timeout}
            settings = add_command_hooks(
                settings, path, [event], handler, is_ours, replace=deny is not None
            )
        return settings

    change = json_settings_change(path, add_all)
    return InstallPlan(dialect, "install", scope, [change])


def plan_settings_uninstall(dialect: str, scope: Scope, path: Path) -> InstallPlan:
    """The settings.json without the command hooks an install of `dialect` wrote."""

    def is_ours(found: Mapping[str, object]) -> bool:
        return is_our_handler(found, dialect)

    change = json_settings_change(path, lambda settings: remove_command_hooks(settings, is_ours))
    return InstallPlan(dialect, "uninstall", scope, [change])


# -- the harnesses -------------------------------------------------------------------------


HARNESSES = ("claude", "gemini", "codex", "opencode")


def harness_module(name: str) -> Any:
    """The install module of harness `name`; `InstallError` naming the known ones."""
    if name not in HARNESSES:
        raise InstallError(f"unknown harness {name!r}: expected one of {', '.join(HARNESSES)}")

    return importlib.import_module(f"{__package__}.install_{name}")


def plan(action: str, harness: str, scope: Scope, program: list[str] | None = None) -> InstallPlan:
    """The install or uninstall plan of `harness` for `scope`, without writing anything."""
    module = harness_module(harness)
    if action == "install":
        return module.plan_install(scope, program or package_command())  # type: ignore[no-any-return]
    result: InstallPlan = module.plan_uninstall(scope)
    for change in result.changes:
        # A file still holding exactly what install wrote gets its old text back, byte for
        # byte (none: it is removed); one the user changed since keeps the structural edit.
        record = install_record.read(scope.home, change.path)
        if record is not None and change.before == record.after:
            change.after = record.before
    return result
