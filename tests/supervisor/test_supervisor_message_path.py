"""The agent's messages inside `run`: the order they are handled in, what happens to them while
post-start still blocks and once a stop was asked for, and the two routes (the event socket and
Claude Code's HTTP route) handled at once without tearing the activity tracker's state apart.

The agent here is a real program speaking the wire protocol over the real socket and the real
HTTP route; every hook is a real webhook to a loopback server or a real script.
"""

from __future__ import annotations

import signal
import sys

from otel_lifecycle_hooks.journal import Journal
from otel_lifecycle_hooks.journal.rows import FAILED_OUTCOMES as REPLAYABLE
from tests.supervisor.supervised import (
    Workspace,
    recorded,
    recorder_hook,
    script_hook,
    wait_until,
)
from tests.support.target_server import TargetServer

# A hang bound, not a timing claim: a stop on a busy machine, beyond the grace period.
SLACK = 30.0

# What every agent program below starts with: one wire line, and the socket to send it to.
WIRE = r"""
import json, os, socket, sys, time
SOCKET = os.environ["LIFECYCLE_HOOKS_SOCKET"]

def event(name, raw, tool, session="socket-session"):
    return {"v": 1, "kind": "event", "event": name, "dialect": "gemini", "raw_event": raw,
            "session_id": session, "fields": {"TOOL_NAME": tool}}

def send(*lines, raw=b""):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(SOCKET)
        connection.sendall(b"".join(json.dumps(line).encode() + b"\n" for line in lines) + raw)
"""

# A descendant in a session of its own that ignores SIGTERM and floods the socket with
# tool-start lines (and some that are not JSON) until it is killed: through the stop, the
# agent's exit and the grace period.
FLOODER = (
    WIRE
    + r"""
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
n = 0
while True:
    lines = []
    for _ in range(20):
        n += 1
        lines.append(event("tool-start", "BeforeTool", f"flood-{n}"))
    try:
        send(*lines, raw=b"not json\n{\"v\": 1\n")
    except OSError:
        time.sleep(0.001)  # the backlog is full: the supervisor is busy, not gone
"""
)

FLOODING_AGENT = (
    WIRE
    + r"""
import subprocess
subprocess.Popen([sys.executable, "-S", "-c", sys.argv[1], sys.argv[2]], start_new_session=True)
while True:
    time.sleep(0.05)
"""
)


def test_a_client_flooding_the_socket_through_a_stop_neither_holds_the_stop_nor_is_heard_after_it(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = workspace.template(
        recorder_hook(target_server.url("/events"), ["tool-start", "pre-stop", "session-end"])
    )
    flooder_pid = workspace.root / "flooder.pid"  # the workspace kills its group at cleanup
    run = workspace.start(
        template,
        [sys.executable, "-S", "-c", FLOODING_AGENT, FLOODER, str(flooder_pid)],
        "--grace-period", "2s",
    )  # fmt: skip
    wait_until(lambda: len(recorded(target_server)) >= 20, what="the flood to be heard")

    run.signal(signal.SIGTERM)
    assert run.wait(timeout=SLACK) == 128 + signal.SIGTERM, run.stderr

    events = [e["EVENT"] for e in recorded(target_server)]
    stop = events.index("pre-stop")
    assert events[stop:] == ["pre-stop", "session-end"]  # nothing of the flood after the stop
    assert all(e == "tool-start" for e in events[:stop])
    assert "not_json" in run.stderr  # the flood's bad lines were refused, and counted


EARLY_SPEAKER = (
    WIRE
    + r"""
# Three lines on one connection, then a second connection: while post-start still blocks.
send(event("tool-start", "BeforeTool", "first"), event("tool-end", "AfterTool", "first"),
     event("tool-start", "BeforeTool", "second"))
send({"v": 1, "kind": "status", "status": "task_completed", "message": "done early"})
open(sys.argv[1], "w").write("sent")
"""
)


def test_messages_sent_while_post_start_blocks_are_handled_after_it_in_the_order_sent(
    workspace: Workspace, target_server: TargetServer
) -> None:
    sent = workspace.root / "sent"
    notes = workspace.root / "notes"
    # post-start holds the supervisor until the agent has spoken, and a while after: a message
    # handled before post-start is over would leave its note before post-start's.
    wait_for_agent = [
        "sh", "-c",
        f'while [ ! -e "{sent}" ]; do sleep 0.02; done; sleep 0.5; echo post-start >> "{notes}"',
    ]  # fmt: skip
    note_tool = ["sh", "-c", f'echo tool-start >> "{notes}"']
    template = workspace.template(
        recorder_hook(
            target_server.url("/events"),
            ["post-start", "tool-start", "tool-end", "task-completed"],
        )
        + script_hook("wait-for-agent", ["post-start"], wait_for_agent,
                      blocking="true", timeout="20s")
        + script_hook("note-tool", ["tool-start"], note_tool, blocking="true")
    )  # fmt: skip
    run = workspace.start(template, [sys.executable, "-S", "-c", EARLY_SPEAKER, str(sent)])
    assert run.wait(timeout=60) == 0, run.stderr

    assert notes.read_text().split() == ["post-start", "tool-start", "tool-start"]
    assert [(e["EVENT"], e["TOOL_NAME"]) for e in recorded(target_server)] == [
        ("post-start", ""),
        ("tool-start", "first"),
        ("tool-end", "first"),
        ("tool-start", "second"),
        ("task-completed", ""),
    ]


PAIRS = 40

# Tool calls told at once by two routes: the event socket (one thread) and Claude Code's HTTP
# route (another), each a start and an end, as fast as they go.
TWO_ROUTES = (
    WIRE
    + r"""
import http.client, threading
url = os.environ["LIFECYCLE_HOOKS_HTTP_URL"].removeprefix("http://")
token = os.environ["LIFECYCLE_HOOKS_HTTP_TOKEN"]
pairs = int(sys.argv[1])

def over_socket():
    for i in range(pairs):
        send(event("tool-start", "BeforeTool", f"socket-{i}"))
        send(event("tool-end", "AfterTool", f"socket-{i}"))

def over_http():
    connection = http.client.HTTPConnection(url, timeout=10)
    for i in range(pairs):
        for name in ("PreToolUse", "PostToolUse"):
            body = json.dumps({"hook_event_name": name, "session_id": "http-session",
                               "tool_name": f"http-{i}", "tool_input": {}, "tool_response": {},
                               "transcript_path": "", "cwd": "/"})
            connection.request("POST", "/claude", body,
                               {"Authorization": "Bearer " + token,
                                "Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            assert answer.status == 200, answer.status

routes = [threading.Thread(target=over_socket), threading.Thread(target=over_http)]
for route in routes:
    route.start()
for route in routes:
    route.join()
while True:
    time.sleep(0.05)
"""
)


def test_events_from_the_socket_and_the_http_route_at_once_keep_one_consistent_activity(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = workspace.template(
        recorder_hook(target_server.url("/events"), ["tool-start", "tool-end", "activity-change"])
    )
    run = workspace.start(
        template, [sys.executable, "-S", "-c", TWO_ROUTES, str(PAIRS)],
        env={"LIFECYCLE_HOOKS_HTTP": "1"},
    )  # fmt: skip

    def calls() -> list[dict[str, str]]:
        return [e for e in recorded(target_server) if e["EVENT"] in ("tool-start", "tool-end")]

    wait_until(lambda: len(calls()) == 4 * PAIRS, what="every tool event to be heard")
    run.signal(signal.SIGTERM)
    run.wait(timeout=SLACK)

    events = recorded(target_server)
    for route in ("socket", "http"):  # each route's own events in the order it sent them
        told = [
            (e["EVENT"], e["TOOL_NAME"])
            for e in events
            if e["EVENT"] != "activity-change" and e["TOOL_NAME"].startswith(route)
        ]
        assert told == [(name, f"{route}-{i}") for i in range(PAIRS)
                        for name in ("tool-start", "tool-end")]  # fmt: skip
    # Each event's activity is the tracker's right after it, and every change follows at once
    # the event that made it, from the activity the one before left: events are handled one
    # at a time, whichever route they came by.
    activity = "idle"
    for i, e in enumerate(events):
        if e["EVENT"] == "activity-change":
            assert (e["PREVIOUS_ACTIVITY"], e["ACTIVITY"]) == (activity, events[i - 1]["ACTIVITY"])
            assert events[i - 1]["EVENT"] != "activity-change"
            activity = e["ACTIVITY"]
        elif e["ACTIVITY"] != activity:
            assert events[i + 1]["EVENT"] == "activity-change", (i, e)


ONE_TOOL_CALL = (
    WIRE
    + r"""
send(event("tool-start", "BeforeTool", "held"))
while True:
    time.sleep(0.05)
"""
)


def test_a_second_signal_while_a_blocking_runtime_hook_holds_the_event_ends_the_run(
    workspace: Workspace,
) -> None:
    # The hook would hold its event for 60 s; the operator's second signal must not wait.
    started = workspace.root / "hold.started"
    code = (
        "import os, sys, time; sys.stdin.read(); "
        f"open({str(workspace.root / 'hold.pid')!r}, 'w').write(str(os.getpgid(0))); "
        f"open({str(started)!r}, 'w').write('started'); time.sleep(60)"
    )
    hold = [sys.executable, "-c", code]
    template = workspace.template(
        script_hook("hold", ["tool-start"], hold, blocking="true", timeout="90s")
    )
    run = workspace.start(
        template, [sys.executable, "-S", "-c", ONE_TOOL_CALL], "--grace-period", "2s"
    )
    wait_until(started.exists, what="the blocking hook to start")

    run.signal(signal.SIGINT)
    run.signal(signal.SIGTERM)
    code = run.wait(timeout=SLACK)  # a hang bound: the hook alone would take 60 s

    assert code != 0, run.stderr
    rows = [row for row in Journal(workspace.journal).executions() if row.hook == "hold"]
    # Journaled as cut short by the operator, and so replayable, not as the hook's failure.
    assert [(row.outcome in REPLAYABLE, row.error_type.lower()) for row in rows] == [
        (True, "interrupted")
    ], rows
