"""A transcript is read with the agent's rights on every route: on Claude Code's HTTP route the
claude dialect runs inside the (root) supervisor, and the `transcript_path` the agent posts
must not open a file the agent itself may not read.

The attack: a root `run --user nobody` with the HTTP route open; the agent posts a Stop whose
`transcript_path` names a root-only (0600) file holding a canary. The canary must reach no
hook request, trace file, journal, hook log or supervisor output, while a transcript the agent
can read still gives its text.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.http_route import (
    AgentUserWorkspace,
    agent_user_workspace,
    needs_root,
    needs_system_python,
    read_report,
)
from tests.supervisor.supervised import wait_until
from tests.support.target_server import TargetServer

pytestmark = [needs_root, needs_system_python]


@pytest.fixture
def space() -> Iterator[AgentUserWorkspace]:
    with agent_user_workspace() as workspace:
        yield workspace


def transcript_line(text: str) -> str:
    return json.dumps({"type": "assistant", "message": {"role": "assistant", "content": text}})


def stop(transcript: Path, session: str) -> dict[str, str]:
    """A Claude Code Stop without `last_assistant_message`: the dialect reads the transcript."""
    return {
        "hook_event_name": "Stop",
        "session_id": session,
        "cwd": "/",
        "transcript_path": str(transcript),
    }


def test_a_root_only_transcript_named_by_the_agent_is_never_read(
    space: AgentUserWorkspace, target_server: TargetServer
) -> None:
    canary = f"CANARY-{secrets.token_hex(16)}"
    secret = space.root / "root-only.jsonl"
    secret.write_text(transcript_line(canary) + "\n")
    secret.chmod(0o600)  # root's: the agent may not read it
    readable = space.root / "agent-readable.jsonl"
    readable.write_text(transcript_line("the agent's own turn") + "\n")
    readable.chmod(0o644)
    # SubagentStop reads `agent_transcript_path` first: the same rule.
    subagent = {
        "hook_event_name": "SubagentStop",
        "session_id": "s-3",
        "cwd": "/",
        "transcript_path": str(readable),
        "agent_transcript_path": str(secret),
    }
    template = space.template(
        "  - name: turns\n"
        "    on: [agent-end, subagent-end]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{target_server.url("/turns")}"\n'
        """      body: '{"EVENT": "${EVENT}", "TEXT": "${ASSISTANT_TEXT}"}'\n"""
        "    timeout: 5s\n"
    )
    command, report_path = space.posting_command(
        [stop(secret, "s-1"), stop(readable, "s-2"), subagent], probe=str(secret)
    )
    run = space.start_as_nobody(template, command)

    report = read_report(report_path)
    wait_until(lambda: len(target_server.requests) >= 3, what="the three turns' hooks")
    run.signal(signal.SIGTERM)
    run.wait(timeout=60)

    # The agent itself may not read the file, and all three posts were taken.
    assert (report["uid"], report["probe"], report["statuses"]) == (
        65534,
        "PermissionError",
        [200, 200, 200],
    )
    turns = [json.loads(request.body) for request in target_server.requests]
    assert [(t["EVENT"], t["TEXT"]) for t in turns] == [
        ("agent-end", ""),
        ("agent-end", "the agent's own turn"),
        ("subagent-end", ""),
    ]
    # Nowhere: not the trace file, the journal, the hook log nor the supervisor's stderr.
    leaks = [
        str(path.relative_to(space.root))
        for path in space.root.rglob("*")
        if path.is_file()
        and not path.is_symlink()
        and path != secret
        and canary.encode() in path.read_bytes()
    ]
    assert leaks == []
    assert any(space.trace_dir.rglob("*")) and space.journal.exists()  # they were written


def test_the_supervisor_reads_a_transcript_as_the_agent_even_through_a_link(
    space: AgentUserWorkspace, target_server: TargetServer
) -> None:
    """A symbolic link the agent plants to a root-only file: followed with the agent's rights,
    so it opens nothing more than the agent could."""
    canary = f"CANARY-{secrets.token_hex(16)}"
    secret = space.root / "root-only.jsonl"
    secret.write_text(transcript_line(canary) + "\n")
    secret.chmod(0o600)
    link = space.agent_out / "transcript.jsonl"
    os.symlink(secret, link)
    os.lchown(link, 65534, 65534)
    template = space.template(
        "  - name: turns\n"
        "    on: [agent-end]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{target_server.url("/turns")}"\n'
        """      body: '{"TEXT": "${ASSISTANT_TEXT}"}'\n"""
        "    timeout: 5s\n"
    )
    command, report_path = space.posting_command([stop(link, "s-1")])
    run = space.start_as_nobody(template, command)
    assert read_report(report_path)["statuses"] == [200]
    wait_until(lambda: len(target_server.requests) >= 1, what="the turn's hook")
    run.signal(signal.SIGTERM)
    run.wait(timeout=60)
    assert [json.loads(r.body)["TEXT"] for r in target_server.requests] == [""]
    assert not [
        p
        for p in space.root.rglob("*")
        if p.is_file() and not p.is_symlink() and p != secret and canary.encode() in p.read_bytes()
    ]
