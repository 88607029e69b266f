"""Scripts written to the published host-agnostic protocol (seed 003) run unchanged under a
real supervised session: `otel-lifecycle-hooks run` supervises an agent that feeds a real
harness's hook payloads through `hook --dialect claude` / `gemini` / `codex`, and each script
reads the protocol's own keys at each stage.

The payload sequences in `data/` are what the real CLIs (Claude Code 2.1.332, Gemini CLI
0.61.0, Codex 0.171.0) sent their hooks, in order, for one prompt run offline against a fake
model API: a shell tool call (`echo tool-ran`), then a final answer.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.harness.activity import ActivityTracker
from otel_lifecycle_hooks.harness.dialects import get_dialect
from otel_lifecycle_hooks.journal import Journal
from otel_lifecycle_hooks.systems.host_protocol import EVENT_STAGES, STAGES
from tests.supervisor.supervised import Workspace

DATA = Path(__file__).parent / "data"
SEQUENCES = {
    "claude": DATA / "claude-tool-turn.jsonl",
    "gemini": DATA / "gemini-tool-turn.jsonl",
    "codex": DATA / "codex-tool-turn.jsonl",
}

# The agent: each payload of the sequence goes to the supervisor through `hook`, as the
# harness's own hook command would send it, one process per event; then it exits.
AGENT = """\
import json, subprocess, sys
dialect, sequence = sys.argv[1], sys.argv[2]
for line in open(sequence, encoding="utf-8"):
    if line.strip():
        subprocess.run([sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", dialect],
                       input=line.encode(), check=False)
"""

# A hook script of today's protocol, written from its wire contract: it registers the stages
# it handles through `discover`, and at each stage reads the base payload and that stage's
# keys, notes what it saw, and says so in a `log` line.
PUBLISHED_SCRIPT = """\
#!{python}
import json, sys

SEEN = {seen!r}


def base(ctx):
    return {{"hook": ctx.get("hook"), "session": ctx.get("session"), "host": ctx.get("host"),
            "prompts": ctx.get("prompts")}}


def before_tool(ctx):
    return {{"tool": ctx.get("tool"), "args": ctx.get("args"), "callID": ctx.get("callID")}}


def after_tool(ctx):
    return {{"tool": ctx.get("tool"), "callID": ctx.get("callID"),
            "output": ctx.get("output") or ctx.get("result")}}


def before_stop(ctx):
    return {{"answer": ctx.get("answer"), "exit_reason": ctx.get("exit_reason"),
            "final": ctx.get("final")}}


def on_error(ctx):
    return {{"error": ctx.get("error")}}


def turn(ctx):
    return {{}}


HANDLERS = {{"before_turn": turn, "after_turn": turn, "before_tool": before_tool,
            "after_tool": after_tool, "before_stop": before_stop, "on_error": on_error}}

stage = sys.argv[1]
ctx = json.loads(sys.stdin.read() or "{{}}")
if stage == "discover":
    with open(SEEN + ".discover", "a") as asked:
        asked.write(json.dumps(base(ctx)) + "\\n")
    print(json.dumps({{"name": "observer", "stages": list(HANDLERS)}}))
    sys.exit(0)
handler = HANDLERS.get(stage)
if handler is None:
    sys.exit(0)
seen = {{"script": "published", "stage": stage, **base(ctx), **handler(ctx)}}
with open(SEEN, "a") as notes:
    notes.write(json.dumps(seen) + "\\n")
session = ctx.get("session") or {{}}
print(json.dumps({{"log": "saw " + stage + " of session " + str(session.get("id"))}}))
if stage == "before_stop":
    print(json.dumps({{"continue": "one more check, please"}}))
"""

# A script of the same family's older names: its `discover` answer lists no stages (it
# registers tools, as those scripts do), so it is asked at every stage and answers the ones
# it knows.
OLDER_SCRIPT = """\
#!{python}
import json, sys

SEEN = {seen!r}
stage = sys.argv[1]
ctx = json.loads(sys.stdin.read() or "{{}}")
if stage == "discover":
    print(json.dumps({{"name": "older", "tools": []}}))
elif stage in ("tool_before", "tool_after", "idle", "observe_message"):
    keys = {{"tool_before": ("tool", "callID", "args"), "tool_after": ("tool", "callID", "output"),
            "idle": ("answer",), "observe_message": ("answer",)}}[stage]
    seen = {{"script": "older", "stage": stage, "hook": ctx.get("hook"),
            "session": ctx.get("session"), **{{key: ctx.get(key) for key in keys}}}}
    with open(SEEN, "a") as notes:
        notes.write(json.dumps(seen) + "\\n")
    print(json.dumps({{"log": "older script saw " + stage}}))
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    ws = Workspace(tmp_path)
    yield ws
    ws.cleanup()


def read_sequence(dialect: str) -> list[dict[str, Any]]:
    lines = SEQUENCES[dialect].read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def supervise(ws: Workspace, dialect: str) -> list[dict[str, Any]]:
    """Run the sequence's agent under `run` with both scripts; what the scripts saw."""
    seen = ws.root / "seen.jsonl"
    hooks = ws.root / "hooks"
    hooks.mkdir()
    for name, text in (("published.py", PUBLISHED_SCRIPT), ("older.py", OLDER_SCRIPT)):
        script = hooks / name
        script.write_text(text.format(python=sys.executable, seen=str(seen)), encoding="utf-8")
        script.chmod(0o755)
    template = ws.root / "scion-agent.yaml"
    template.write_text(
        "hook_scripts:\n  - hooks/published.py\n  - hooks/older.py\n", encoding="utf-8"
    )
    agent = ws.root / "feed.py"
    agent.write_text(AGENT, encoding="utf-8")

    run = ws.start(template, [sys.executable, str(agent), dialect, str(SEQUENCES[dialect])])

    assert run.wait(90) == 0, run.stderr
    return [json.loads(line) for line in seen.read_text().splitlines() if line.strip()]


def stages_seen(seen: list[dict[str, Any]], script: str) -> list[str]:
    return [entry["stage"] for entry in seen if entry["script"] == script]


def only(seen: list[dict[str, Any]], script: str, stage: str) -> dict[str, Any]:
    [entry] = [e for e in seen if e["script"] == script and e["stage"] == stage]
    return entry


@pytest.mark.parametrize("dialect", sorted(SEQUENCES))
def test_a_published_protocol_script_reads_its_keys_at_each_stage_of_a_real_session(
    workspace: Workspace, dialect: str
) -> None:
    payloads = read_sequence(dialect)
    tool_start = next(
        p for p in payloads if p.get("hook_event_name") in ("PreToolUse", "BeforeTool")
    )
    tool_end = next(p for p in payloads if p.get("hook_event_name") in ("PostToolUse", "AfterTool"))

    seen = supervise(workspace, dialect)

    # Registered through discover: only its stages, in the order the harness's events came:
    # the stages its events fire (docs/hook-systems.md), a tool call and the end of the turn
    # among them in every dialect.
    # The runtime events the supervisor dispatches: the tracker's (a moment a harness tells
    # twice, as Codex's Stop and notify, is dispatched once).
    tracker = ActivityTracker()
    expected = [
        stage
        for payload in payloads
        for event in get_dialect(dialect).translate(payload, [])
        for derived in tracker.observe(event)
        for stage in EVENT_STAGES.get(derived.event, ())
        if stage in ("before_turn", "after_turn", "before_tool", "after_tool", "before_stop")
    ]
    assert [s for s in expected if "turn" not in s] == ["before_tool", "after_tool", "before_stop"]
    if dialect == "gemini":  # it reports each model call: one before the tool call, one after
        assert expected.count("before_turn") == expected.count("after_turn") == 2
    assert stages_seen(seen, "published") == expected
    [session_id] = {json.dumps(e["session"]) for e in seen}  # one session, at every stage
    session = json.loads(session_id)
    assert session["agent"] == "test-agent" and session["id"]
    for entry in (e for e in seen if e["script"] == "published"):
        assert entry["hook"] == entry["stage"]
        assert entry["host"]["name"] == "otel-lifecycle-hooks"
        assert entry["host"]["version"] == 2
        assert entry["host"]["stages"] == list(STAGES)
        assert set(entry["prompts"]) >= {"preamble", "chat", "heartbeat", "compaction"}
        assert set(entry["prompts"].values()) == {""}  # this host has no prompt files

    before = only(seen, "published", "before_tool")
    assert before["tool"] == tool_start["tool_name"]
    assert before["args"] == tool_start["tool_input"]
    assert before["callID"] == tool_start.get("tool_use_id")  # Gemini CLI gives none
    after = only(seen, "published", "after_tool")
    assert after["tool"] == tool_end["tool_name"]
    assert after["callID"] == tool_end.get("tool_use_id")
    response = tool_end["tool_response"]
    if dialect == "gemini":
        assert after["output"] == response["llmContent"]  # what the model is given back
    elif isinstance(response, str):
        assert after["output"] == response  # Codex: the command's output
    else:
        assert json.loads(after["output"]) == response  # Claude Code: {"stdout": ...}
    assert "tool-ran" in after["output"]
    final_answer = next(
        p.get("last_assistant_message") or p.get("prompt_response")
        for p in payloads
        if p.get("hook_event_name") in ("Stop", "AfterAgent")
    )
    stop = only(seen, "published", "before_stop")
    assert (stop["answer"], stop["exit_reason"], stop["final"]) == (final_answer, "stop", True)

    # The older names fire at the same moments, with the same keys.
    assert stages_seen(seen, "older") == ["tool_before", "tool_after", "idle", "observe_message"]
    assert only(seen, "older", "tool_before")["args"] == tool_start["tool_input"]
    assert only(seen, "older", "tool_after")["output"] == after["output"]
    assert only(seen, "older", "idle")["answer"] == final_answer

    # Every `log` line reached the hook log, for runs that succeeded.
    log = workspace.hook_log.read_text()
    for stage in ("before_tool", "after_tool", "before_stop"):
        line = f"[hook-script.published.py log] saw {stage} of session {session['id']}"
        assert line in log
    for stage in ("tool_before", "tool_after", "idle", "observe_message"):
        assert f"[hook-script.older.py log] older script saw {stage}" in log
    # What this host cannot do (re-enter the loop) is said, in the hook log and the journal.
    note = "before_stop: continue not applied by this host"
    assert f"[hook-script.published.py not-applied] {note}" in log
    journal = Journal(workspace.journal)
    try:
        rows = journal.recent("hook-script.published.py", limit=50)
    finally:
        journal.close()
    # Discovery was asked once, at pre-start, before the agent ran, with the base payload.
    assert [row.event for row in rows][-1] == "pre-start"
    assert [row.event for row in rows].count("pre-start") == 1
    [asked] = (workspace.root / "seen.jsonl.discover").read_text().splitlines()
    assert json.loads(asked)["hook"] == "discover"
    assert json.loads(asked)["session"] == session
    [stop_row] = [row for row in rows if row.event == "agent-end"]
    assert stop_row.outcome == "success" and note in stop_row.message
    assert {row.session_id for row in rows} == {session["id"]}
