"""An agent command that cannot start ends `run` as a shell and `docker run` end: 127 when it is
not found, 126 when it is found but cannot be executed, with one line saying why. The hooks run
as for any failed start (error, then session-end with that exit code)."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervisor.supervised import Workspace, recorded, recorder_hook
from tests.support.target_server import TargetServer

PHASE_EVENTS = ["phase-change", "pre-start", "post-start", "error", "session-end"]
FAILED_START = [
    ("phase-change", "provisioning"),
    ("pre-start", "provisioning"),
    ("phase-change", "starting"),
    ("phase-change", "error"),
    ("error", "error"),
    ("session-end", "error"),
]


def _failed_start(
    workspace: Workspace, target_server: TargetServer, command: list[str], *options: str
) -> tuple[int, str, list[dict[str, str]]]:
    template = workspace.template(recorder_hook(target_server.url("/events"), PHASE_EVENTS))
    run = workspace.start(template, command, *options)
    code = run.wait(timeout=120)
    return code, run.stderr, recorded(target_server)


def test_a_command_not_found_exits_127_and_its_hooks_run_as_for_any_failed_start(
    workspace: Workspace, target_server: TargetServer
) -> None:
    code, stderr, events = _failed_start(workspace, target_server, ["no-such-agent-command"])

    assert code == 127, stderr
    told = [line for line in stderr.splitlines() if "no-such-agent-command" in line]
    assert told == [
        "otel-lifecycle-hooks: could not start 'no-such-agent-command': No such file or directory"
    ]
    assert [(e["EVENT"], e["PHASE"]) for e in events] == FAILED_START
    assert "could not start 'no-such-agent-command'" in events[4]["ERROR_MESSAGE"]
    assert events[-1]["EXIT_CODE"] == "127"


@pytest.mark.parametrize("kind", ["not executable", "a directory"])
def test_a_command_found_but_not_executable_exits_126(
    workspace: Workspace, target_server: TargetServer, kind: str
) -> None:
    program = workspace.root / "agent.sh"
    if kind == "a directory":
        program.mkdir()
    else:
        program.write_text("#!/bin/sh\nexit 0\n")
        program.chmod(0o644)

    code, stderr, events = _failed_start(workspace, target_server, [str(program)])

    assert code == 126, stderr
    told = [line for line in stderr.splitlines() if str(program) in line]
    assert told == [f"otel-lifecycle-hooks: could not start {str(program)!r}: Permission denied"]
    assert [(e["EVENT"], e["PHASE"]) for e in events] == FAILED_START
    assert events[-1]["EXIT_CODE"] == "126"


@pytest.fixture
def root_only_program() -> Iterator[Path]:
    # Outside tmp_path (below a root-only directory) so that only the file's own mode decides.
    directory = Path(tempfile.mkdtemp(prefix="olh-spawn-"))
    directory.chmod(0o755)
    program = directory / "agent.sh"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o700)  # root may run it; nobody may not
    yield program
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="running as another user needs root")
def test_as_root_for_user_nobody_a_program_nobody_cannot_execute_exits_126(
    workspace: Workspace, target_server: TargetServer, root_only_program: Path
) -> None:
    nobody = pwd.getpwnam("nobody").pw_name
    code, stderr, events = _failed_start(
        workspace, target_server, [str(root_only_program)], "--user", nobody
    )

    assert code == 126, stderr
    told = [line for line in stderr.splitlines() if str(root_only_program) in line]
    assert len(told) == 1 and "Permission denied" in told[0], stderr
    assert events[-1]["EVENT"] == "session-end", events
    assert events[-1]["EXIT_CODE"] == "126", events
