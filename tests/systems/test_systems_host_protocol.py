"""Scripts of the host-agnostic protocol (seed 003) run unchanged: `<script> <stage>`, one JSON
object on stdin, JSONL `result` / `log` lines on stdout, the exit code honoured."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.systems.host_protocol import STAGES, deny_reason, merge
from otel_lifecycle_hooks.template.loader import TemplateError, load_templates

HANG_BOUND = 30.0

# A hook script as a seed-003 host runs it: it reads its stage from argv and the request from
# stdin, answers what it was asked for, and keeps a copy of its request for the test to read.
AUDIT_SCRIPT = """\
#!{python}
import json, sys

stage = sys.argv[1]
request = json.load(sys.stdin)
with open(__file__ + "." + stage + ".json", "w") as copy:
    json.dump({{"argv": sys.argv[1:], "request": request}}, copy)
if stage == "before_tool":
    print(json.dumps({{"log": "auditing " + request["context"]["tool_name"]}}))
    print(json.dumps({{"result": {first}}}))
    print(json.dumps({{"result": {second}}}))
sys.exit({exit_code})
"""


def write_script(
    directory: Path,
    name: str,
    first: Any = ("a",),
    second: Any = ("b",),
    exit_code: int = 0,
    body: str | None = None,
) -> Path:
    script = directory / "hooks" / name
    script.parent.mkdir(exist_ok=True)
    text = body or AUDIT_SCRIPT.format(
        python=sys.executable,
        first=json.dumps(first),
        second=json.dumps(second),
        exit_code=exit_code,
    )
    script.write_text(text, encoding="utf-8")
    script.chmod(0o755)
    return script


def write_template(directory: Path, scripts: list[str], timeout: str | None = None) -> Path:
    entries = [
        f"  - {{path: hooks/{s}, timeout: {timeout}}}" if timeout else f"  - hooks/{s}"
        for s in scripts
    ]
    template = directory / "scion-agent.yaml"
    template.write_text(
        "harness: hrns\nhook_scripts:\n" + "\n".join(entries) + "\n", encoding="utf-8"
    )
    return template


def fire(
    template: Path, events: list[tuple[str, dict[str, str]]], hook_log: Path
) -> tuple[list[Any], AgentSession]:
    engine = HookEngine(load_templates([template]), journal=False, hook_log=hook_log)
    session = AgentSession(engine, agent_name="hrns-agent", session_id="sess-7")
    results = [session.record(event, fields) for event, fields in events]
    session.end()
    engine.shutdown(5)
    return results, session


def test_a_script_answering_with_result_and_log_runs_unchanged(tmp_path: Path) -> None:
    script = write_script(tmp_path, "audit.py")
    log = tmp_path / "agent.log"

    [result], session = fire(
        write_template(tmp_path, ["audit.py"]), [("tool-start", {"TOOL_NAME": "bash"})], log
    )

    [execution] = result.executions
    assert execution.outcome == "success", execution.message
    copy = json.loads(Path(f"{script}.before_tool.json").read_text())
    assert copy["argv"] == ["before_tool"]
    request = copy["request"]
    assert request["hook"] == "before_tool"
    assert request["session_id"] == "sess-7"
    assert request["host"]["stages"] == list(STAGES)
    assert "[hook-script.audit.py log] auditing bash" in log.read_text()
    # Two result lines of one script merge: arrays concatenate.
    assert json.loads(session.info.captured["HOOK_RESULT_BEFORE_TOOL"]) == ["a", "b"]


def test_results_merge_across_scripts_in_order_arrays_concatenated_scalars_joined(
    tmp_path: Path,
) -> None:
    write_script(tmp_path, "one.py", first=["x"], second=["y"])
    write_script(tmp_path, "two.py", first=["z"], second=[])
    write_script(tmp_path, "three.py", first="first note", second="second note")
    template = write_template(tmp_path, ["one.py", "two.py"])

    _, session = fire(
        template,
        [("tool-start", {"TOOL_NAME": "a"}), ("tool-start", {"TOOL_NAME": "b"})],
        tmp_path / "log",
    )
    # Each event starts its own merge; within one, the listed scripts' results concatenate.
    assert json.loads(session.info.captured["HOOK_RESULT_BEFORE_TOOL"]) == ["x", "y", "z"]

    _, session = fire(
        write_template(tmp_path, ["three.py"]),
        [("tool-start", {"TOOL_NAME": "a"})],
        tmp_path / "log",
    )
    assert session.info.captured["HOOK_RESULT_BEFORE_TOOL"] == "first note\nsecond note"


def test_the_exit_code_is_honoured_and_a_failing_script_never_stops_the_agent(
    tmp_path: Path,
) -> None:
    write_script(tmp_path, "deny.py", exit_code=2)
    after = write_script(tmp_path, "after.py")

    [result], _ = fire(
        write_template(tmp_path, ["deny.py", "after.py"]),
        [("tool-start", {"TOOL_NAME": "rm"})],
        tmp_path / "log",
    )

    assert [e.outcome for e in result.executions] == ["failed", "success"]
    assert result.executions[0].error_type == "exit.2"
    assert result.ok
    assert Path(f"{after}.before_tool.json").exists()


def test_a_script_that_hangs_or_prints_garbage_is_contained(tmp_path: Path) -> None:
    write_script(tmp_path, "hang.py", body=f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    write_script(
        tmp_path, "noise.py", body=f"#!{sys.executable}\nprint('not json')\nprint('{{\"result\"')\n"
    )
    log = tmp_path / "agent.log"
    started = time.monotonic()

    [result], session = fire(
        write_template(tmp_path, ["hang.py", "noise.py"], timeout="10s"), [("agent-end", {})], log
    )

    assert time.monotonic() - started < HANG_BOUND
    assert [e.outcome for e in result.executions] == ["timeout", "success"]
    assert result.ok
    assert "[hook-script.noise.py log] not json" in log.read_text()
    assert "HOOK_RESULT_BEFORE_STOP" not in session.info.captured


def test_each_script_is_run_for_every_stage_this_host_fires_and_no_other_event(
    tmp_path: Path,
) -> None:
    script = write_script(tmp_path, "audit.py")
    events = [
        "tool-start",
        "tool-end",
        "model-start",
        "model-end",
        "agent-end",
        "error",
        "phase-change",
        "prompt-submit",
    ]
    fire(write_template(tmp_path, ["audit.py"]), [(e, {}) for e in events], tmp_path / "log")
    ran = sorted(p.name.split(".")[2] for p in script.parent.glob("audit.py.*.json"))
    assert ran == sorted(STAGES)


def test_a_bad_hook_scripts_entry_is_refused_with_its_position(tmp_path: Path) -> None:
    template = tmp_path / "scion-agent.yaml"
    template.write_text("hook_scripts:\n  - {path: a.sh, timeout: 10}\n  - 42\n", encoding="utf-8")
    with pytest.raises(TemplateError) as caught:
        load_templates([template])
    text = str(caught.value)
    assert ":2:" in text and "hook_scripts[0].timeout" in text
    assert ":3:" in text and "hook_scripts[1]" in text


@pytest.mark.parametrize(
    ("earlier", "later", "merged"),
    [
        (None, ["a"], ["a"]),
        (["a"], ["b", "c"], ["a", "b", "c"]),
        ("one", "two", "one\ntwo"),
        ("one", 2, "one\n2"),
        (["a"], "b", ["a", "b"]),
        ({"k": 1, "j": 1}, {"k": 2}, {"k": 2, "j": 1}),
        ("kept", None, "kept"),
    ],
)
def test_merge_concatenates_arrays_and_joins_scalars_with_a_newline(
    earlier: Any, later: Any, merged: Any
) -> None:
    assert merge(earlier, later) == merged


# A script of the published protocol: it keeps each request, answers `discover` with the
# stages it handles, and at before_tool answers with keys only a harness could act on.
PUBLISHED_SCRIPT = """\
#!{python}
import json, sys

stage = sys.argv[1]
request = json.load(sys.stdin)
with open(__file__ + "." + stage + ".json", "w") as copy:
    json.dump(request, copy)
if stage == "discover":
    print(json.dumps({{"name": "guard", "stages": {stages}, "tools": []}}))
elif stage == "before_tool":
    print(json.dumps({{"log": "guarding " + request["tool"]}}))
    print(json.dumps({{"deny": {{"reason": "no"}}, "args": {{}}}}))
"""


def published_script(directory: Path, stages: list[str]) -> Path:
    body = PUBLISHED_SCRIPT.format(python=sys.executable, stages=json.dumps(stages))
    return write_script(directory, "guard.py", body=body)


def kept(script: Path, stage: str) -> dict[str, Any]:
    return json.loads(Path(f"{script}.{stage}.json").read_text())


def test_every_stage_carries_the_published_base_payload_and_its_own_keys(tmp_path: Path) -> None:
    script = published_script(tmp_path, list(STAGES))
    tool_input = json.dumps({"command": "ls -la"})
    fire(
        write_template(tmp_path, ["guard.py"]),
        [
            ("tool-start", {"TOOL_NAME": "Bash", "TOOL_INPUT": tool_input, "TOOL_CALL_ID": "t1"}),
            ("tool-end", {"TOOL_NAME": "Bash", "TOOL_CALL_ID": "t1", "TOOL_OUTPUT": "a\nb"}),
            ("model-start", {}),
            ("model-end", {}),
            ("agent-end", {"ASSISTANT_TEXT": "All done."}),
            ("error", {"ERROR_MESSAGE": "the model API answered 529"}),
        ],
        tmp_path / "agent.log",
    )

    for stage in STAGES:
        request = kept(script, stage)
        assert request["hook"] == stage
        assert request["session"] == {"id": "sess-7", "agent": "hrns-agent"}
        assert request["host"]["name"] == "otel-lifecycle-hooks"
        assert request["host"]["version"] == 2
        assert request["host"]["stages"] == list(STAGES)
        assert request["prompts"] == dict.fromkeys(
            ("preamble", "chat", "heartbeat", "compaction", "recover"), ""
        )
        assert request["session_id"] == "sess-7"  # this package's own keys stay beside them
    for stage in ("before_tool", "tool_before"):
        request = kept(script, stage)
        assert (request["tool"], request["args"], request["callID"]) == (
            "Bash",
            {"command": "ls -la"},
            "t1",
        )
    for stage in ("after_tool", "tool_after"):
        request = kept(script, stage)
        assert (request["tool"], request["callID"]) == ("Bash", "t1")
        assert request["output"] == request["result"] == "a\nb"
    for stage in ("before_stop", "idle", "observe_message"):
        request = kept(script, stage)
        assert request["answer"] == "All done."
        assert (request["exit_reason"], request["final"]) == ("stop", True)
    assert kept(script, "on_error")["error"] == "the model API answered 529"


def test_a_turn_that_failed_reaches_before_stop_as_exit_reason_error(tmp_path: Path) -> None:
    script = published_script(tmp_path, ["before_stop"])
    fire(
        write_template(tmp_path, ["guard.py"]),
        [("agent-end", {"ERROR_TYPE": "rate_limit", "ERROR_MESSAGE": "429 from the API"})],
        tmp_path / "agent.log",
    )
    request = kept(script, "before_stop")
    assert (request["exit_reason"], request["error"], request["answer"]) == (
        "error",
        "429 from the API",
        "",
    )


def test_discover_is_asked_once_and_only_the_stages_it_names_are_fired(tmp_path: Path) -> None:
    template = write_template(tmp_path, ["guard.py"])
    calls = tmp_path / "calls"
    counting = PUBLISHED_SCRIPT.replace(
        "stage = sys.argv[1]\n",
        f"stage = sys.argv[1]\nopen({str(calls)!r}, 'a').write(stage + '\\n')\n",
    )
    script = write_script(
        tmp_path,
        "guard.py",
        body=counting.format(python=sys.executable, stages='["before_stop", "not_a_stage"]'),
    )

    [tool_start, tool_end, agent_end], _ = fire(
        template,
        [("tool-start", {"TOOL_NAME": "Bash"}), ("tool-end", {}), ("agent-end", {})],
        tmp_path / "agent.log",
    )

    assert calls.read_text().split() == ["discover", "before_stop"]
    # Asked at the first event it saw; an event of a stage it did not name runs no stage, so
    # it is journaled as skipped, even the one at which `discover` was asked.
    assert [e.outcome for e in tool_start.executions] == ["skipped"]
    assert "tool-start fires no stage this script handles" in tool_start.executions[0].message
    assert [e.outcome for e in tool_end.executions] == ["skipped"]
    assert [e.outcome for e in agent_end.executions] == ["success"]
    assert kept(script, "discover")["hook"] == "discover"


def test_answers_this_host_cannot_act_on_are_recorded_as_not_applied(tmp_path: Path) -> None:
    published_script(tmp_path, ["before_tool"])
    log = tmp_path / "agent.log"

    [result], _ = fire(
        write_template(tmp_path, ["guard.py"]), [("tool-start", {"TOOL_NAME": "Bash"})], log
    )

    [execution] = result.executions
    assert execution.outcome == "success"
    # `deny` before a tool is a gate's refusal (test_a_before_tool_deny_is_a_gate_decision).
    assert "before_tool: args not applied by this host" in execution.message
    assert "discover: tools not applied by this host" in execution.message
    text = log.read_text()
    assert "[hook-script.guard.py log] guarding Bash" in text
    assert "[hook-script.guard.py not-applied] before_tool: args not applied by this host" in text


def test_answers_not_applied_are_events_on_the_hook_span(tmp_path: Path, spans: Any) -> None:
    provider, exporter = spans
    published_script(tmp_path, ["before_tool"])
    engine = HookEngine(
        load_templates([write_template(tmp_path, ["guard.py"])]),
        journal=False,
        hook_log=tmp_path / "agent.log",
        tracer_provider=provider,
    )
    session = AgentSession(engine, agent_name="hrns-agent", session_id="sess-7")
    session.record("tool-start", {"TOOL_NAME": "Bash"})
    session.end()
    engine.shutdown(5)

    [span] = [
        s for s in exporter.get_finished_spans() if s.name.startswith("agent.lifecycle_hook ")
    ]
    found = [
        (dict(e.attributes or {}))
        for e in span.events
        if e.name == "agent.lifecycle_hook.not_applied"
    ]
    assert found == [
        {
            "agent.lifecycle_hook.stage": "discover",
            "agent.lifecycle_hook.response_keys": ("tools",),
        },
        {
            "agent.lifecycle_hook.stage": "before_tool",
            "agent.lifecycle_hook.response_keys": ("args",),
        },
    ]
    assert span.attributes is not None
    assert span.attributes["agent.lifecycle_hook.not_applied"] == (
        "discover: tools not applied by this host",
        "before_tool: args not applied by this host",
    )


def test_a_before_tool_deny_is_a_gate_decision_with_its_reason(tmp_path: Path) -> None:
    published_script(tmp_path, ["before_tool"])

    [result], _ = fire(
        write_template(tmp_path, ["guard.py"]),
        [("tool-start", {"TOOL_NAME": "Bash"})],
        tmp_path / "log",
    )

    assert result.decision.verdict == "deny"
    assert result.decision.reason == "no"
    assert result.decision.gate == "hook-script.guard.py"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [({"reason": "why"}, "why"), ("plain words", "plain words"), (True, "refused by g"),
     (False, None), ({}, "refused by g"), ([{"reason": "a"}, "b"], "a; b")],
)  # fmt: skip
def test_the_shapes_of_a_deny_answer(answer: Any, reason: str | None) -> None:
    assert deny_reason(answer, "g") == reason


@pytest.mark.parametrize("scripts_first", [True, False])
def test_hook_scripts_and_lifecycle_hooks_of_one_event_run_in_the_files_order(
    tmp_path: Path, scripts_first: bool
) -> None:
    write_script(tmp_path, "audit.py")
    seen = tmp_path / "seen"
    scripts = "hook_scripts:\n  - hooks/audit.py\n"
    lifecycle = (
        "lifecycle_hooks:\n"
        "  - name: reader\n"
        "    on: tool-start\n"
        "    blocking: true\n"
        "    action:\n"
        "      type: script\n"
        f"      command: [sh, -c, 'printf %s \"$SEEN\" > {seen}']\n"
        '      env: {SEEN: "${HOOK_RESULT_BEFORE_TOOL}"}\n'
    )
    template = tmp_path / "scion-agent.yaml"
    template.write_text(scripts + lifecycle if scripts_first else lifecycle + scripts)

    [tool_start], _ = fire(template, [("tool-start", {"TOOL_NAME": "Bash"})], tmp_path / "log")

    names = [e.hook.name for e in tool_start.executions]
    if scripts_first:  # the lifecycle hook sees the scripts' result of the same event
        assert names == ["hook-script.audit.py", "reader"]
        assert json.loads(seen.read_text()) == ["a", "b"]
    else:
        assert names == ["reader", "hook-script.audit.py"]
        assert seen.read_text() == ""
