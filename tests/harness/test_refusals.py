"""A gate's decision in each harness's own protocol (harness/refusals.py)."""

from __future__ import annotations

import json

import pytest

from otel_lifecycle_hooks.harness.refusals import answer, style_for

DENY = {"decision": "deny", "reason": "no \x1b[31mrm\x1b[0m\nplease"}


@pytest.mark.parametrize(
    ("dialect", "payload", "style"),
    [
        ("claude", {"hook_event_name": "PreToolUse"}, "pretool"),
        ("claude", {"hook_event_name": "PermissionRequest"}, "permission"),
        ("claude", {"hook_event_name": "UserPromptSubmit"}, "block"),
        ("claude", {"hook_event_name": "PostToolUse"}, None),
        ("codex", {"hook_event_name": "PreToolUse"}, "pretool"),
        ("codex", {"type": "agent-turn-complete"}, None),
        ("gemini", {"hook_event_name": "BeforeTool"}, "gemini"),
        ("gemini", {"hook_event_name": "AfterTool"}, None),
        ("opencode", {"type": "tool.execute.before"}, "plain"),
        ("opencode", {"type": "tool.execute.after"}, None),
        ("cursor", {"hook_event_name": "preToolUse"}, None),
    ],
)
def test_only_events_a_harness_can_refuse_wait_for_a_decision(
    dialect: str, payload: dict[str, object], style: str | None
) -> None:
    assert style_for(dialect, payload) == style


def test_a_deny_in_each_protocol_with_the_reason_on_one_plain_line() -> None:
    reason = "no [31mrm[0m please"
    assert json.loads(answer("pretool", DENY) or "") == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }
    assert json.loads(answer("permission", DENY) or "")["hookSpecificOutput"]["decision"] == {
        "behavior": "deny",
        "message": reason,
    }
    assert json.loads(answer("block", DENY) or "") == {"decision": "block", "reason": reason}
    assert json.loads(answer("gemini", DENY) or "") == {"decision": "deny", "reason": reason}
    assert json.loads(answer("plain", DENY) or "") == {"decision": "deny", "reason": reason}


def test_allow_says_nothing_and_ask_is_asked_only_where_the_harness_can() -> None:
    for style in ("pretool", "permission", "block", "gemini", "plain"):
        assert answer(style, {"decision": "allow", "reason": "fine"}) is None
        assert answer(style, {"gate": "forged, no decision"}) is None
    ask = {"decision": "ask", "reason": "check"}
    said = json.loads(answer("pretool", ask) or "")["hookSpecificOutput"]
    assert said["permissionDecision"] == "ask"
    assert answer("permission", ask) is None  # the harness asks its user anyway
    assert json.loads(answer("gemini", ask) or "")["decision"] == "deny"  # cannot ask: refused
