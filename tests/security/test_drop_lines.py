"""A flood of dropped events does not flood the operator's terminal: `run` writes a hook's
first drop of a reason and then one line per 1,000 (supervisor/report.py), and the engine its
queue overflows at the same pace; the summary still counts every drop."""

from __future__ import annotations

import json
import re
import signal
import threading

from otel_lifecycle_hooks.supervisor.report import DROP_LINE_EVERY
from tests.security.conftest import HostileWorkspace, tool_start_flood, wire_line
from tests.supervisor.supervised import wait_until
from tests.support.target_server import Reply, TargetServer

FLOOD = 5000  # tool-start events in one connection


def test_a_flood_of_drops_writes_one_line_per_thousand(
    workspace: HostileWorkspace, target: TargetServer
) -> None:
    release = threading.Event()
    # The slow hook's first request waits: its queue (1,024) overflows, the rest is dropped.
    target.on("/slow", Reply(204, released_by=release))
    target.always("/slow", Reply(204))
    template = workspace.template(
        "  - name: slow\n"
        "    on: [tool-start]\n"
        "    timeout: 60s\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{target.url("/slow")}"\n'
        "  - name: limited\n"
        "    on: [tool-start]\n"
        "    rate_limit: 1/h\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{target.url("/limited")}"\n'
        "  - name: done\n"
        "    on: [task-completed]\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{target.url("/done")}"\n'
    )
    flood = tool_start_flood(FLOOD)
    done = wire_line({"v": 1, "kind": "status", "status": "task_completed", "message": "end"})
    run = workspace.start(template, workspace.hostile_command(sends=[flood, done]))
    try:
        # Messages are handled in order: once task-completed fired, every tool-start was.
        wait_until(
            lambda: any(r.path == "/done" for r in list(target.requests)),
            timeout=120,
            what="the flood to be handled",
        )
        release.set()
        run.signal(signal.SIGTERM)
        run.wait(timeout=60)
    finally:
        release.set()
    stderr = run.stderr.splitlines()
    summary = [line for line in stderr if re.search(r"\d+ deliveries: ", line)]
    assert len(summary) == 1, stderr[-20:]
    found = re.search(r"(\d+) dropped", summary[0])
    assert found is not None, summary
    dropped = int(found.group(1))
    # limited: every event after its one token and the one waiting; slow: past its queue.
    assert dropped >= 2 * FLOOD - 2 - 1024 - 2, summary
    drop_lines = [line for line in stderr if "dropped" in line and line not in summary]
    per_hook_reason = 2  # slow: queue_full (engine), limited: rate_limited (report)
    bound = per_hook_reason * (1 + FLOOD // DROP_LINE_EVERY) + 1  # + an overload line at stop
    assert 2 <= len(drop_lines) <= bound, json.dumps(drop_lines[:20], indent=1)
    assert any("limited (tool-start) dropped: rate_limited" in line for line in drop_lines)
    assert any("1000 dropped so far" in line for line in drop_lines)
