"""The scenarios the real-harness tests run, and that `record_sequences` records.

A scenario is the model's script, the harness's flags and any configuration of the user's own;
the same real moment (a tool call, a permission prompt, the end of a turn) in each harness.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.harnesses.fake_models import Step
from tests.harnesses.real import Session, add_users_permission_hook
from tests.harnesses.session import PACKAGE_CLI

# Flags each needs to run the shell tool headless without asking. Codex's sandbox refuses
# sockets (so `status`) and writes outside the workspace unless told otherwise.
CODEX_SANDBOX = [
    "--sandbox",
    "workspace-write",
    "-c",
    "sandbox_workspace_write.network_access=true",
]
RUN_TOOLS = {
    "claude": ["--allowedTools", "Bash"],
    "gemini": [],
    "codex": CODEX_SANDBOX,
    "opencode": [],
}


@dataclass(frozen=True)
class Scenario:
    script: list[Step]
    extra: list[str] = field(default_factory=list)
    after_install: Callable[[Session], None] | None = None


def tool_turn(harness: str) -> Scenario:
    """One prompt: the model runs a shell command, then answers in text."""
    return Scenario(
        [Step.shell("echo tool-ran"), Step.reply("It printed tool-ran.")], RUN_TOOLS[harness]
    )


def status_in_tool(harness: str) -> Scenario:
    """The model runs `otel-lifecycle-hooks status task_completed ...` in its shell tool (by
    absolute path: Codex runs tools in a login shell, which resets PATH)."""
    command = f"{PACKAGE_CLI} status task_completed 'summary from the tool' && echo tool-ran"
    return Scenario(
        [Step.shell(command), Step.reply("The command printed tool-ran.")], RUN_TOOLS[harness]
    )


SCENARIOS: dict[str, Callable[[str], Scenario | None]] = {}


def permission(harness: str) -> Scenario | None:
    """The model runs a command that needs the user's permission; the user's own hook answers
    "allow". None where the harness cannot ask headless (Gemini CLI: without yolo its
    non-interactive mode does not offer the shell tool at all)."""
    if harness == "claude":
        # No --allowedTools: Bash needs permission, and PermissionRequest asks for it.
        return Scenario(
            [Step.shell("echo allowed > answered.txt"), Step.reply("Done.")],
            [],
            lambda s: add_users_permission_hook(s.home / ".claude" / "settings.json", "*"),
        )
    if harness == "codex":
        # The model asks to run outside the sandbox; --approve-for-me routes the request to
        # PermissionRequest hooks. The user's own hook is not trusted: bypass for this run.
        return Scenario(
            [Step.shell("echo allowed > answered.txt", escalated=True), Step.reply("Done.")],
            ["--approve-for-me", "--dangerously-bypass-hook-trust"],
            lambda s: add_users_permission_hook(s.home / ".codex" / "hooks.json", None),
        )
    return None


SCENARIOS.update(
    {"tool-turn": tool_turn, "status-in-tool": status_in_tool, "permission": permission}
)


def answered(session_root: Path) -> bool:
    return (session_root / "project" / "answered.txt").exists()
