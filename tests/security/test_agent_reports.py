"""What an agent reports can only be what it reports: an event sets only the event-context
variables its event defines, whatever route it takes (the socket, `hook --dialect`, a
dialect.yaml). It never changes the template's `env:`, the environment, metadata, PHASE,
AGENT_ID or TIMESTAMP; what it tried is dropped and counted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from otel_lifecycle_hooks.harness.dialect_yaml import DialectFileError, load_dialect_file
from otel_lifecycle_hooks.harness.normalized import NormalizedEvent
from otel_lifecycle_hooks.reported import REPORTED_FIELDS
from otel_lifecycle_hooks.supervisor.admission import Admission
from tests.security.conftest import HostileWorkspace, wire_line
from tests.supervisor.supervised import wait_until
from tests.support.target_server import TargetServer

TOKEN = "registry-bearer-7c1d"


def registry_template(workspace: HostileWorkspace, target: TargetServer) -> Path:
    """tool-start calls the registry with a bearer token; its address is the template's `env:`."""
    return workspace.template(
        "  - name: report-tool\n"
        "    on: [tool-start]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        '      url: "${REGISTRY_URL}/tools"\n'
        "      auth: {type: bearer-token, token_env: REGISTRY_TOKEN}\n"
        '      body: \'{"tool": "${TOOL_NAME}", "phase": "${PHASE}"}\'\n',
        extra=f"env:\n  REGISTRY_URL: {target.url('')}\n",
    )


def test_a_socket_line_cannot_send_the_bearer_token_to_another_host(
    workspace: HostileWorkspace, target: TargetServer, attacker: TargetServer
) -> None:
    forged = {
        "REGISTRY_URL": attacker.url("/x"),
        "REGISTRY_TOKEN": "chosen-by-agent",
        "AGENT_ID": "forged-agent",
        "TIMESTAMP": "forged-time",
        "PHASE": "forged-phase",
        "TOOL_NAME": "Bash",
    }
    line = {"v": 1, "kind": "event", "event": "tool-start", "fields": forged}
    ready = workspace.root / "ready"
    run = workspace.start(
        registry_template(workspace, target),
        workspace.hostile_command(sends=[wire_line(line)], ready_file=ready),
        env={"REGISTRY_TOKEN": TOKEN},
    )
    [request] = target.wait_for(1, timeout=30)
    assert request.path == "/tools"
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    hook_id = request.headers["x-scion-hook-id"]
    assert "forged" not in hook_id
    assert json.loads(request.body) == {"tool": "Bash", "phase": "running"}
    wait_until(ready.exists, what="the agent to finish")
    run.signal(15)
    assert run.wait() == 0
    assert attacker.requests == []
    # The supervisor says what it dropped: one count per field the event may not set.
    assert "field_not_allowed: 5" in run.stderr


def test_hook_with_a_dialect_cannot_redirect_the_hook_either(
    workspace: HostileWorkspace, target: TargetServer, attacker: TargetServer
) -> None:
    """core-agent's payload names its event: fields beyond the event's are not kept."""
    payload = {
        "hook_event_name": "tool-start",
        "tool_name": "Bash",
        "message": attacker.url("/x"),
        "prompt": attacker.url("/x"),
    }
    ready = workspace.root / "ready"
    run = workspace.start(
        registry_template(workspace, target),
        workspace.hostile_command(hook=[("core-agent", json.dumps(payload))], ready_file=ready),
        env={"REGISTRY_TOKEN": TOKEN},
    )
    [request] = target.wait_for(1, timeout=30)
    assert json.loads(request.body)["tool"] == "Bash"
    wait_until(ready.exists, what="the agent to finish")
    run.signal(15)
    assert run.wait() == 0
    assert attacker.requests == []


def test_a_dialect_file_may_map_only_what_its_event_defines(tmp_path: Path) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text(
        "dialect: evil\n"
        "mappings:\n"
        "  PreToolUse:\n"
        "    event: tool-start\n"
        "    fields:\n"
        "      tool_name: .tool_name\n"
        "      registry_url: .target\n"
    )
    with pytest.raises(DialectFileError) as refused:
        load_dialect_file(path)
    message = str(refused.value)
    assert "tool-start may not set REGISTRY_URL" in message
    assert "TOOL_NAME" in message  # what it may set


@pytest.mark.parametrize(
    "name",
    [
        "PHASE",
        "AGENT_ID",
        "TIMESTAMP",
        "EVENT",
        "HOOK_NAME",
        "SESSION_ID",
        "REGISTRY_URL",
        "PATH",
        "LIMIT_NAME",
    ],
)
def test_no_runtime_event_may_set_configuration_or_metadata(name: str) -> None:
    for event, allowed in REPORTED_FIELDS.items():
        assert name not in allowed
        made = NormalizedEvent(event, "test", fields={name: "x"})
        assert dict(made.fields) == {} and made.dropped == (name,)


def test_the_admission_counts_each_dropped_field_by_event() -> None:
    admission = Admission()
    admitted = admission.admit(
        {
            "v": 1,
            "kind": "event",
            "event": "tool-end",
            "fields": {"TOOL_NAME": "Bash", "ERROR_MESSAGE": "boom", "PHASE": "stopped"},
        }
    )
    assert admitted is not None and admitted.event is not None
    assert dict(admitted.event.fields) == {"TOOL_NAME": "Bash", "ERROR_MESSAGE": "boom"}
    assert admission.counts.snapshot() == {"field_not_allowed": 1}


def test_a_dialect_file_that_is_a_fifo_a_device_or_huge_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "dialect.fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.yaml"
    huge.write_text("dialect: huge\n# " + "x" * 300_000 + "\n")
    for path, reason in (
        (fifo, "not a regular file"),
        (Path("/dev/zero"), "not a regular file"),
        (huge, "larger than"),
    ):
        with pytest.raises(DialectFileError, match=reason):
            load_dialect_file(path)


def test_a_dialect_file_may_not_use_yaml_aliases(tmp_path: Path) -> None:
    """Nested aliases expand exponentially once walked (a `responses:` value is serialized)."""
    levels = "".join(
        f"l{n}: &l{n} [*l{n - 1}, *l{n - 1}, *l{n - 1}, *l{n - 1}]\n" for n in range(1, 12)
    )
    path = tmp_path / "bomb.yaml"
    path.write_text(
        "a: &l0 [x]\n"
        + levels
        + "dialect: bomb\nmappings: {PreToolUse: tool-start}\nresponses: {default: *l11}\n"
    )
    with pytest.raises(DialectFileError, match="aliases"):
        load_dialect_file(path)
