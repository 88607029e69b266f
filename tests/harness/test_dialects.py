"""Each built-in dialect turns its harness's documented payloads into the expected events.

The samples live in payloads/<dialect>/; each block below names the page that documents them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.harness.dialects import (
    UnknownDialectError,
    detect_dialect,
    get_dialect,
)
from otel_lifecycle_hooks.harness.dialects.claude import transcript_final_text
from otel_lifecycle_hooks.harness.normalized import NormalizedEvent

Loader = Callable[[str, str], dict[str, Any]]


def translate(
    dialect: str, payload: dict[str, Any], argv: list[str] | None = None
) -> list[tuple[str, str, dict[str, str]]]:
    events = get_dialect(dialect).translate(payload, argv or [])
    assert all(e.dialect == dialect for e in events)
    return [(e.event, e.raw_event, dict(e.fields)) for e in events]


# Claude Code: https://code.claude.com/docs/en/hooks (common input fields; per-event input).
CLAUDE_CASES = {
    # Recorded from Claude Code 2.1.332 (tests/harnesses/data/claude-tool-turn.jsonl):
    # session_start, user_prompt_submit, pre_tool_use, post_tool_use, stop, session_end.
    "session_start": ("session-start", "SessionStart", {"SOURCE": "startup"}),
    "user_prompt_submit": (
        "prompt-submit",
        "UserPromptSubmit",
        {"PROMPT": "Run the command, then say what it printed."},
    ),
    "pre_tool_use": (
        "tool-start",
        "PreToolUse",
        {
            "TOOL_NAME": "Bash",
            "TOOL_INPUT": '{"command":"echo tool-ran","description":"Run a command"}',
            "TOOL_CALL_ID": "toolu_0001",
        },
    ),
    "pre_tool_use_ask_user": (
        "tool-start",
        "PreToolUse",
        {
            "TOOL_NAME": "AskUserQuestion",
            "TOOL_INPUT": '{"questions":[{"question":"Which database should I use?",'
            '"options":[{"label":"Postgres"},{"label":"SQLite"}]}]}',
            "TOOL_CALL_ID": "toolu_01DEF456",
        },
    ),
    "post_tool_use": (
        "tool-end",
        "PostToolUse",
        {
            "TOOL_NAME": "Bash",
            "TOOL_INPUT": '{"command":"echo tool-ran","description":"Run a command"}',
            "TOOL_CALL_ID": "toolu_0001",
            "TOOL_OUTPUT": '{"stdout":"tool-ran","stderr":"","interrupted":false,'
            '"isImage":false,"noOutputExpected":false}',
        },
    ),
    "post_tool_use_failure": (
        "tool-end",
        "PostToolUseFailure",
        {
            "TOOL_NAME": "Bash",
            "TOOL_INPUT": '{"command":"npm test"}',
            "TOOL_CALL_ID": "toolu_01JKL012",
            "ERROR_MESSAGE": "Command exited with non-zero status code 1",
        },
    ),
    "notification": (
        "notification",
        "Notification",
        {
            "MESSAGE": "Claude needs your permission to use Bash",
            "NOTIFICATION_TYPE": "permission_prompt",
        },
    ),
    "stop": ("agent-end", "Stop", {"ASSISTANT_TEXT": "It printed tool-ran."}),
    "stop_failure": (
        "agent-end",
        "StopFailure",
        {
            "ERROR_TYPE": "rate_limit",
            "ERROR_MESSAGE": "Rate limit exceeded: 100 requests per minute",
        },
    ),
    "subagent_stop": ("subagent-end", "SubagentStop", {"ASSISTANT_TEXT": "Found 3 call sites."}),
    "pre_compact": ("pre-compact", "PreCompact", {"SOURCE": "auto"}),
}


@pytest.mark.parametrize("sample", sorted(CLAUDE_CASES))
def test_claude_payloads_become_their_normalized_event(sample: str, load_payload: Loader) -> None:
    event, raw, fields = CLAUDE_CASES[sample]
    payload = load_payload("claude", sample)
    fields = {"TRANSCRIPT_PATH": payload["transcript_path"], **fields}
    events = get_dialect("claude").translate(payload, [])
    assert events == [
        NormalizedEvent(event, "claude", raw, session_id=payload["session_id"], fields=fields)
    ]


def test_claude_session_end_is_left_to_the_supervisor(load_payload: Loader) -> None:
    assert translate("claude", load_payload("claude", "session_end")) == []


def write_transcript(path: Path, entries: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return str(path)


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"type": "assistant", "message": {"role": "assistant", "content": list(blocks)}}


def user(text: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": text}}


def test_claude_stop_without_last_message_reads_the_final_turn_from_the_transcript(
    tmp_path: Path, load_payload: Loader
) -> None:
    transcript = write_transcript(
        tmp_path / "t.jsonl",
        [
            user("fix it"),
            assistant({"type": "text", "text": "an earlier turn"}),
            user("now run the tests"),
            assistant({"type": "text", "text": "Running them."}, {"type": "tool_use", "id": "t1"}),
            {"type": "user", "message": {"role": "user", "content": [{"type": "tool_result"}]}},
            assistant({"type": "text", "text": "All green."}),
            assistant({"type": "text", "text": "Done."}),
        ],
    )
    stop = load_payload("claude", "stop")
    del stop["last_assistant_message"]
    stop["transcript_path"] = transcript
    [event] = get_dialect("claude").translate(stop, [])
    assert event.fields["ASSISTANT_TEXT"] == "All green.\n\nDone."


def test_transcript_reading_is_bounded_to_the_tail(tmp_path: Path) -> None:
    filler = [assistant({"type": "text", "text": "x" * 1000}) for _ in range(50)]
    transcript = write_transcript(
        tmp_path / "t.jsonl", [*filler, user("q"), assistant({"type": "text", "text": "tail"})]
    )
    # A 4 KB tail starts mid-line: the cut line is skipped, the final turn still found.
    assert transcript_final_text(transcript, tail_bytes=4096) == "tail"


def test_a_missing_or_garbled_transcript_gives_no_text(tmp_path: Path) -> None:
    assert transcript_final_text(str(tmp_path / "missing.jsonl")) == ""
    garbled = tmp_path / "garbled.jsonl"
    garbled.write_bytes(b"\x00\xff not json\n[1,2]\n")
    assert transcript_final_text(str(garbled)) == ""


# Gemini CLI: https://geminicli.com/docs/hooks/reference (base input schema; per-event fields).
GEMINI_SHELL_INPUT = '{"command":"echo tool-ran","description":"Run a command"}'
GEMINI_CASES = {
    # Recorded from Gemini CLI 0.61.0 by the real-harness suite (tests/harnesses/data/
    # gemini-tool-turn.jsonl) and tests/harnesses/record_gemini_payloads.py, but for
    # after_model_chunk.
    "session_start": ("session-start", "SessionStart", {"SOURCE": "startup"}),
    "before_agent": (
        "agent-start",
        "BeforeAgent",
        {"PROMPT": "Run the command, then say what it printed."},
    ),
    "after_agent": ("agent-end", "AfterAgent", {"ASSISTANT_TEXT": "It printed tool-ran."}),
    "before_model": ("model-start", "BeforeModel", {}),
    "after_model_final": ("model-end", "AfterModel", {}),
    "before_tool": (
        "tool-start",
        "BeforeTool",
        {"TOOL_NAME": "run_shell_command", "TOOL_INPUT": GEMINI_SHELL_INPUT},
    ),
    "after_tool": (
        "tool-end",
        "AfterTool",
        {
            "TOOL_NAME": "run_shell_command",
            "TOOL_INPUT": GEMINI_SHELL_INPUT,
            # `llmContent`, what the model is given back.
            "TOOL_OUTPUT": "<untrusted_context>\nOutput: tool-ran\nProcess Group PGID: 4354\n"
            "</untrusted_context>",
        },
    ),
    # Recorded from Gemini CLI 0.61.0 (tests/harnesses/record_gemini_payloads.py): the
    # shell tool's permission prompt names no tool, only `details.type` "exec".
    "notification": (
        "notification",
        "Notification",
        {
            "MESSAGE": "Tool Confirm Shell Command requires execution",
            "NOTIFICATION_TYPE": "permission_prompt",
            "TOOL_NAME": "run_shell_command",
        },
    ),
    "pre_compress_manual": ("pre-compact", "PreCompress", {"SOURCE": "manual"}),
}


@pytest.mark.parametrize("sample", sorted(GEMINI_CASES))
def test_gemini_payloads_become_their_normalized_event(sample: str, load_payload: Loader) -> None:
    event, raw, fields = GEMINI_CASES[sample]
    payload = load_payload("gemini", sample)
    fields = {"TRANSCRIPT_PATH": payload["transcript_path"], **fields}
    events = get_dialect("gemini").translate(payload, [])
    assert events == [
        NormalizedEvent(event, "gemini", raw, session_id=payload["session_id"], fields=fields)
    ]


def test_gemini_failed_tool_gives_its_error_message(load_payload: Loader) -> None:
    # Gemini CLI 0.61.0 sends `tool_response.error` as the tool result's `{message, type}`
    # (absent for a shell command that merely exits non-zero, whose exit code is in
    # `llmContent`); this is the recorded payload with the error its shell tool gives when
    # the command cannot be started.
    payload = load_payload("gemini", "after_tool")
    error = {"message": "spawn bash ENOENT", "type": "shell_execute_error"}
    payload["tool_response"] = {**payload["tool_response"], "error": error}
    [(_, _, fields)] = translate("gemini", payload)
    assert fields["ERROR_MESSAGE"] == "spawn bash ENOENT"


def test_gemini_counts_a_streamed_model_call_once(load_payload: Loader) -> None:
    assert translate("gemini", load_payload("gemini", "after_model_chunk")) == []
    assert [e for e, _, _ in translate("gemini", load_payload("gemini", "after_model_final"))] == [
        "model-end"
    ]


def test_gemini_automatic_pre_compress_is_not_a_compaction(load_payload: Loader) -> None:
    # Gemini CLI fires PreCompress (trigger auto) before every model call, whether or not the
    # history is over the compression threshold: only /compress (manual) surely compacts.
    assert translate("gemini", load_payload("gemini", "pre_compress")) == []


def test_gemini_session_end_is_left_to_the_supervisor(load_payload: Loader) -> None:
    assert translate("gemini", load_payload("gemini", "session_end")) == []


# Codex hooks: https://developers.openai.com/codex/hooks (and codex-rs/hooks/schema/generated);
# legacy notify: the JSON object passed as the last argv element of the `notify` program.
def test_codex_hooks_translate_like_claude_hooks(load_payload: Loader) -> None:
    # Recorded from Codex 0.171.0 (tests/harnesses/data/codex-tool-turn.jsonl).
    transcript = {"TRANSCRIPT_PATH": load_payload("codex", "pre_tool_use")["transcript_path"]}
    assert translate("codex", load_payload("codex", "pre_tool_use")) == [
        (
            "tool-start",
            "PreToolUse",
            {
                **transcript,
                "TOOL_NAME": "Bash",
                "TOOL_INPUT": '{"command":"echo tool-ran"}',
                "TOOL_CALL_ID": "call_0001",
            },
        )
    ]
    assert translate("codex", load_payload("codex", "post_tool_use")) == [
        (
            "tool-end",
            "PostToolUse",
            {
                **transcript,
                "TOOL_NAME": "Bash",
                "TOOL_INPUT": '{"command":"echo tool-ran"}',
                "TOOL_CALL_ID": "call_0001",
                "TOOL_OUTPUT": "tool-ran\n",
            },
        )
    ]
    assert translate("codex", load_payload("codex", "user_prompt_submit")) == [
        (
            "prompt-submit",
            "UserPromptSubmit",
            {**transcript, "PROMPT": "Run the command, then say what it printed."},
        )
    ]
    assert translate("codex", load_payload("codex", "stop")) == [
        ("agent-end", "Stop", {**transcript, "ASSISTANT_TEXT": "It printed tool-ran."})
    ]


def test_codex_model_requests_and_approval_prompts_are_mapped(load_payload: Loader) -> None:
    assert translate("codex", load_payload("codex", "pre_model_request")) == [
        ("model-start", "PreModelRequest", {})
    ]
    # Recorded from Codex 0.171.0 (tests/harnesses/data/codex-permission.jsonl).
    permission = load_payload("codex", "permission_request")
    assert translate("codex", permission) == [
        (
            "notification",
            "PermissionRequest",
            {
                "TRANSCRIPT_PATH": permission["transcript_path"],
                "TOOL_NAME": "Bash",
                "MESSAGE": "Permission requested for Bash",
                "NOTIFICATION_TYPE": "permission_prompt",
            },
        )
    ]


def test_codex_notify_approval_is_the_same_permission_prompt() -> None:
    events = get_dialect("codex").translate({}, ['{"type": "approval-requested"}'])
    assert [(e.event, e.fields.get("NOTIFICATION_TYPE")) for e in events] == [
        ("notification", "permission_prompt")
    ]


def test_codex_notify_reads_its_json_from_the_last_argument(load_payload: Loader) -> None:
    notify = json.dumps(load_payload("codex", "notify_agent_turn_complete"))
    events = get_dialect("codex").translate({}, ["--flag", notify])
    assert events == [
        NormalizedEvent(
            "agent-end",
            "codex",
            "agent-turn-complete",
            session_id="01a230f4-9ced-7b12-bd92-064255a3aa57",
            fields={"ASSISTANT_TEXT": "It printed tool-ran."},
        )
    ]


def test_codex_passes_normalized_names_through() -> None:
    assert translate("codex", {"type": "tool-start", "tool_name": "shell"}) == [
        ("tool-start", "tool-start", {"TOOL_NAME": "shell"})
    ]
    assert translate("codex", {"type": "something-new"}) == []


# opencode: tests/harness/test_dialect_opencode.py (payloads recorded from the binary).


# core-agent: seed 001, the `{hook_event_name, session_id, ...}` envelope with normalized names.
@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        ("tool_start", ("tool-start", {"TOOL_NAME": "read_file"}, "core-1")),
        ("tool_end", ("tool-end", {"TOOL_NAME": "read_file"}, "core-1")),
        ("model_start", ("model-start", {}, "core-1")),
        ("agent_end", ("agent-end", {}, "")),
    ],
)
def test_core_agent_names_pass_through(
    sample: str, expected: tuple[str, dict[str, str], str], load_payload: Loader
) -> None:
    event, fields, session = expected
    events = get_dialect("core-agent").translate(load_payload("core-agent", sample), [])
    assert events == [
        NormalizedEvent(event, "core-agent", event, session_id=session, fields=fields)
    ]


def test_core_agent_refuses_names_outside_the_vocabulary() -> None:
    assert translate("core-agent", {"hook_event_name": "PreToolUse"}) == []


@pytest.mark.parametrize(
    ("dialect", "sample"),
    [
        ("claude", "pre_tool_use"),
        ("gemini", "before_tool"),
        ("codex", "pre_tool_use"),
        ("opencode", "tool_execute_before"),
        ("opencode", "session_idle"),
        ("core-agent", "tool_start"),
    ],
)
def test_the_dialect_is_recognised_from_the_payload_shape(
    dialect: str, sample: str, load_payload: Loader
) -> None:
    assert detect_dialect(load_payload(dialect, sample), []) == dialect


def test_a_json_last_argument_means_codex_notify() -> None:
    assert detect_dialect({}, ['{"type": "agent-turn-complete"}']) == "codex"


def test_an_unknown_dialect_is_refused_with_the_known_ones_listed() -> None:
    with pytest.raises(UnknownDialectError, match="claude.*core-agent.*cursor"):
        get_dialect("no-such-harness", environ={})


def test_a_dialect_name_cannot_walk_out_of_the_dialect_directories(tmp_path: Path) -> None:
    (tmp_path / "evil.yaml").write_text("dialect: evil\nmappings: {X: tool-start}\n")
    inner = tmp_path / "dialects"
    inner.mkdir()
    with pytest.raises(UnknownDialectError):
        get_dialect("../evil", environ={"OTEL_LIFECYCLE_HOOKS_DIALECTS": str(inner)})
