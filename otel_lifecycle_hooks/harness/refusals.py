"""What each harness lets a hook refuse, and how a gate's decision is told to it (docs/gates.md).

`hook` asks the supervisor for the decision of an event's gates only at the harness events
below; what it then prints on stdout is the harness's own answer. `allow` prints nothing: a
gate that does not object never skips the harness's own permission checks. `ask` is told as
such where the harness can ask its user (a tool call for Claude Code and Codex) and as a
refusal where it cannot (fail-safe).

Standard library only: it runs inside `hook`, once per harness event.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

# How a harness reads a refusal:
#   pretool     Claude Code / Codex PreToolUse: hookSpecificOutput.permissionDecision
#   permission  Claude Code / Codex PermissionRequest: hookSpecificOutput.decision.behavior
#   block       Claude Code / Codex UserPromptSubmit and Stop: {"decision": "block"}
#   gemini      Gemini CLI BeforeTool, AfterAgent: {"decision": "deny"}
#   plain       the opencode plugin: the decision itself; the plugin throws on deny
_CLAUDE_LIKE = {
    "PreToolUse": "pretool",
    "PermissionRequest": "permission",
    "UserPromptSubmit": "block",
    "Stop": "block",
}
REFUSABLE: dict[str, dict[str, str]] = {
    "claude": _CLAUDE_LIKE,
    "codex": _CLAUDE_LIKE,
    # BeforeAgent is agent-start here (not a gate event), so only these two wait.
    "gemini": {"BeforeTool": "gemini", "AfterAgent": "gemini"},
    "opencode": {"tool.execute.before": "plain"},
}
MAX_REASON_CHARS = 1000
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def style_for(dialect: str, payload: Mapping[str, object]) -> str | None:
    """How harness `dialect` reads a decision for this payload's event; None when it cannot
    refuse that event (then no decision is asked for)."""
    events = REFUSABLE.get(dialect)
    if events is None:
        return None
    raw = payload.get("type" if dialect == "opencode" else "hook_event_name")
    return events.get(raw) if isinstance(raw, str) else None


def answer(style: str, decision: Mapping[str, object]) -> str | None:
    """The text to print on stdout for `decision` (`{"decision", "reason"}`), or None."""
    verdict = decision.get("decision")
    if verdict not in ("deny", "ask"):
        return None
    reason = _plain(decision.get("reason")) or "refused by a policy gate"
    if style == "plain":
        return json.dumps({"decision": verdict, "reason": reason})
    if style == "pretool":
        output = {
            "hookEventName": "PreToolUse",
            "permissionDecision": verdict,
            "permissionDecisionReason": reason,
        }
        return json.dumps({"hookSpecificOutput": output})
    if style == "permission":
        if verdict == "ask":
            return None  # the harness asks its user anyway: that is what a permission is
        behaviour = {"behavior": "deny", "message": reason}
        return json.dumps(
            {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": behaviour}}
        )
    if style == "block":
        return json.dumps({"decision": "block", "reason": reason})
    if style == "gemini":
        return json.dumps({"decision": "deny", "reason": reason})
    return None


def _plain(text: object) -> str:
    """A reason as one plain line (the supervisor sanitised it; this is the last gate)."""
    if not isinstance(text, str):
        return ""
    return " ".join(_UNSAFE.sub(" ", text.replace("\x1b", "")).split())[:MAX_REASON_CHARS]
