"""Secrets the agent echoes never reach spans: a token value the agent repeats as TOOL_NAME,
ERROR_MESSAGE or ASSISTANT_TEXT is redacted before it becomes a session span event attribute,
so the trace file, `trace` and every exporter see `[REDACTED]`. The real supervisor, the real
socket, a loopback target that receives the token as it should."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import quote_plus

from tests.security.conftest import HostileWorkspace, wire_line
from tests.supervisor.supervised import wait_until
from tests.support.target_server import TargetServer

TOKEN = "echoed-token-5b9e2f"


def test_a_token_the_agent_echoes_is_redacted_in_the_trace_file_and_trace_output(
    workspace: HostileWorkspace, target: TargetServer
) -> None:
    template = workspace.template(
        "  - name: report\n"
        "    on: [tool-end]\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{target.url("/report")}"\n'
        "      auth: {type: bearer-token, token_env: REGISTRY_TOKEN}\n"
    )
    echoes = [
        {
            "v": 1,
            "kind": "event",
            "event": "tool-end",
            "fields": {"TOOL_NAME": TOKEN, "ERROR_MESSAGE": f"401 with Bearer {TOKEN}"},
        },
        {
            "v": 1,
            "kind": "event",
            "event": "agent-end",
            "fields": {
                "ASSISTANT_TEXT": f"logged in with {TOKEN}, i.e. {quote_plus(TOKEN + ' x')}"
            },
        },
    ]
    ready = workspace.root / "ready"
    run = workspace.start(
        template,
        workspace.hostile_command(sends=[wire_line(e) for e in echoes], ready_file=ready),
        env={"REGISTRY_TOKEN": TOKEN},
    )
    [request] = target.wait_for(1, timeout=30)
    assert request.headers["authorization"] == f"Bearer {TOKEN}"  # the token was really used
    wait_until(ready.exists, what="the agent to finish")
    run.signal(15)
    assert run.wait() == 0
    [trace_file] = workspace.trace_dir.glob("*.jsonl")
    text = trace_file.read_text()
    assert "agent.lifecycle.tool_end" in text and "agent.lifecycle.agent_end" in text
    assert TOKEN not in text
    assert "[REDACTED]" in text
    shown = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "trace", str(trace_file), "--json"],
        capture_output=True,
        text=True,
        env=workspace.env,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "agent.lifecycle.tool_end" in shown.stdout
    assert TOKEN not in shown.stdout + shown.stderr
