"""Helpers for the fleet tests: supervisors sharing one journal, a stand-in agent that reports
tool calls over the event socket at a set rate, and reading the shared journal."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tests.supervisor.supervised import Workspace
from tests.support.target_server import RecordedRequest, TargetServer

# Phases of tool-start events, each `count` at `rate` per second, a phase waiting for its
# `wait_for` file first; TOOL_NAME holds the monotonic moment each was sent, so the receiver
# can tell how long it took to arrive. Then the agent exits 0 (or waits for `linger`).
TOOL_AGENT = r"""
import json, os, signal, sys, time
from otel_lifecycle_hooks.harness.normalized import NormalizedEvent
from otel_lifecycle_hooks.harness.socket_client import send_events

plan = json.loads(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
if plan.get("pid_file"):
    open(plan["pid_file"], "w").write(str(os.getpid()))
for phase in plan.get("phases", []):
    while phase.get("wait_for") and not os.path.exists(phase["wait_for"]):
        time.sleep(0.02)
    interval = 1.0 / phase["rate"]
    due = time.monotonic()
    for _ in range(phase["count"]):
        sent = f"{time.monotonic():.6f}"
        send_events([NormalizedEvent("tool-start", "test", fields={"TOOL_NAME": sent})])
        due += interval
        time.sleep(max(0.0, due - time.monotonic()))
while plan.get("linger") and not os.path.exists(plan["linger"]):
    time.sleep(0.05)
sys.exit(0)
"""

HOOKS = (("register", "post-start"), ("deregister", "pre-stop"), ("farewell", "session-end"))


def http_hook(name: str, event: str, url: str, *, blocking: bool = True) -> str:
    return (
        f"  - name: {name}\n"
        f"    on: [{event}]\n"
        f"    blocking: {'true' if blocking else 'false'}\n"
        "    timeout: 30s\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{url}"\n'
        '      body: \'{"session": "${SESSION_ID}", "agent": "${AGENT_NAME}"'
        + (', "sent": "${TOOL_NAME}"' if event == "tool-start" else "")
        + "}'\n"
    )


def fleet_template(workspace: Workspace, receiver: TargetServer, *, tools: bool = False) -> Path:
    hooks = "".join(http_hook(name, event, receiver.url(f"/{name}")) for name, event in HOOKS)
    if tools:
        hooks += http_hook("tool", "tool-start", receiver.url("/tool"), blocking=False)
    return workspace.template(hooks)


def tool_agent(workspace: Workspace, index: int, **plan: Any) -> list[str]:
    path = workspace.root / "tool_agent.py"
    if not path.exists():
        path.write_text(TOOL_AGENT)
    plan.setdefault("pid_file", str(workspace.root / f"agent-tool-{index}.pid"))
    return [sys.executable, str(path), json.dumps(plan)]


def deliveries(receiver: TargetServer, path: str) -> list[RecordedRequest]:
    return [request for request in list(receiver.requests) if request.path == path]


def body(request: RecordedRequest) -> dict[str, str]:
    return dict(json.loads(request.body))


def sessions_at(receiver: TargetServer, path: str) -> set[str]:
    """The sessions that sent to `path`: on a busy machine a hook may be retried after a slow
    answer, so waits count sessions, not requests."""
    return {body(request)["session"] for request in deliveries(receiver, path)}


def hook_ids(receiver: TargetServer, path: str, session: str) -> list[str]:
    return [
        r.headers["x-scion-hook-id"]
        for r in deliveries(receiver, path)
        if body(r)["session"] == session
    ]


def query(url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as db:
        return list(db.execute(sql, params).fetchall())


def latencies_ms(requests: list[RecordedRequest]) -> list[float]:
    """From the agent's send to the receiver's receipt, per tool-start delivery."""
    return sorted((r.received_at - float(body(r)["sent"])) * 1000 for r in requests)


def summary(values: list[float]) -> str:
    if not values:
        return "none"

    def at(q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return f"n={len(values)} p50={at(0.5):.1f}ms p95={at(0.95):.1f}ms max={values[-1]:.1f}ms"


def kill_with_agent(workspace: Workspace, run: Any, pid_file: Path) -> None:
    """SIGKILL a supervisor once its agent has started, then the agent if it outlived it (it
    should not: it dies with its supervisor), as a lost pod's end would; returns once both
    are gone."""
    import contextlib
    import os
    import signal

    from otel_lifecycle_hooks.supervisor.recovery import agent_alive
    from tests.supervisor.supervised import wait_until

    wait_until(pid_file.exists, what="the agent to have started")
    run.signal(signal.SIGKILL)
    run.wait(timeout=120)
    pid = int(pid_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: not agent_alive(pid, None), what="the agent's end")
