"""core-agent's `.agents/config.json` hooks (seed 001) run as this package's script hooks."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.template.loader import TemplateError, load_templates

# A hang check only: far above what a run of these short handlers takes.
HANG_BOUND = 30.0


def write_config(tmp_path: Path, hooks: dict[str, Any]) -> Path:
    config = tmp_path / ".agents" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"model": "gemini", "hooks": hooks}, indent=2), encoding="utf-8")
    return config


def fire(config: Path, events: list[tuple[str, dict[str, str]]], provider: Any = None) -> list[Any]:
    engine = HookEngine(
        load_templates([config]), tracer_provider=provider, journal=False, hook_log=False
    )
    session = AgentSession(
        engine, agent_name="core-agent", session_id="sess-42", tracer_provider=provider
    )
    results = [session.record(event, fields) for event, fields in events]
    session.end()
    engine.shutdown(5)
    return results


def test_the_seed_line_with_our_hook_command_delivers_tool_start_to_the_supervisor_socket(
    tmp_path: Path, supervisor_socket: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seed 001: {"tool-start": [{"command": "sciontool hook --dialect=core-agent"}]}, ours instead.
    socket_path, inbox = supervisor_socket
    monkeypatch.setenv("OTEL_LIFECYCLE_HOOKS_SOCKET", socket_path)
    command = f"{shlex.quote(sys.executable)} -m otel_lifecycle_hooks hook --dialect=core-agent"
    config = write_config(tmp_path, {"tool-start": [{"command": command}]})

    [result] = fire(config, [("tool-start", {"TOOL_NAME": "run_shell"})])

    [execution] = result.executions
    assert execution.hook.name == "core-agent.tool-start.1"
    assert execution.outcome == "success", execution.message
    [message] = inbox.wait_for(1)
    assert message["kind"] == "event"
    assert message["event"] == "tool-start"
    assert message["dialect"] == "core-agent"
    assert message["session_id"] == "sess-42"
    assert message["fields"]["TOOL_NAME"] == "run_shell"


def test_handlers_get_the_envelope_on_stdin_through_sh_and_run_one_after_the_other(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.txt"
    config = write_config(
        tmp_path,
        {
            "agent-end": [
                # A pipe and a redirection: the command is shell text, as in core-agent.
                {
                    "command": f"sleep 0.3; cat | tee {tmp_path}/envelope.json > /dev/null; "
                    f"echo first >> {out}"
                },
                {"command": f"echo second >> {out}"},
            ]
        },
    )

    [result] = fire(config, [("agent-end", {"ASSISTANT_TEXT": "done", "PHASE": "running"})])

    assert [e.outcome for e in result.executions] == ["success", "success"]
    assert out.read_text().split() == ["first", "second"]
    envelope = json.loads((tmp_path / "envelope.json").read_text())
    assert envelope["hook_event_name"] == "agent-end"
    assert envelope["session_id"] == "sess-42"
    assert envelope["assistant_text"] == "done"


def test_a_handler_past_its_timeout_is_ended_and_the_next_handler_still_runs(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.txt"
    config = write_config(
        tmp_path,
        {
            "tool-end": [
                {"command": "sleep 60", "timeout_seconds": 1},
                {"command": "exit 3"},
                {"command": f"echo ran >> {out}"},
            ]
        },
    )
    started = time.monotonic()

    [result] = fire(config, [("tool-end", {})])

    assert time.monotonic() - started < HANG_BOUND
    assert [e.outcome for e in result.executions] == ["timeout", "failed", "success"]
    assert result.executions[1].error_type == "exit.3"
    assert result.ok  # a failing handler is logged; it never stops the agent
    assert out.read_text() == "ran\n"


def test_timeouts_default_to_ten_seconds_and_zero_means_the_default(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {
            "model-start": [
                {"command": "true"},
                {"command": "true", "timeout_seconds": 0},
                {"command": "true", "timeout_seconds": 3},
            ]
        },
    )
    hooks = load_templates([config]).hooks
    assert [h.timeout for h in hooks] == [10.0, 10.0, 3.0]
    assert all(h.blocking and h.on_error == "log" for h in hooks)
    assert hooks[0].action.command == ("sh", "-c", "true")


def test_negative_timeouts_and_unknown_events_are_refused_together_with_their_positions(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path,
        {
            "tool-strat": [{"command": "true"}],
            "tool-end": [{"command": "true", "timeout_seconds": -1}, {}],
        },
    )

    with pytest.raises(TemplateError) as caught:
        load_templates([config])

    text = str(caught.value)
    assert len(caught.value.problems) == 3, text
    assert 'field "hooks.tool-strat": unknown event (did you mean "tool-start"?)' in text
    assert (
        'hook "core-agent.tool-end.1": field "timeout_seconds": '
        "got -1; a timeout cannot be negative" in text
    )
    assert 'hook "core-agent.tool-end.2": field "command": missing' in text
    assert all(
        p.position.file == str(config) and p.position.line > 1 for p in caught.value.problems
    )


def test_an_empty_hooks_map_loads_no_hooks(tmp_path: Path) -> None:
    assert load_templates([write_config(tmp_path, {})]).hooks == ()
    assert load_templates([write_config(tmp_path, {"tool-start": None})]).hooks == ()
