"""Seed 000: script hooks run as the agent's user, not root. When a script hook would run as
root, a script that someone other than root can rewrite is refused, and nothing runs.

These tests chown files to another uid, so they need root (CI runs them as root)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from otel_lifecycle_hooks.actions.script import run_script, unsafe_as_root
from otel_lifecycle_hooks.engine import Execution, HookEngine, SessionInfo
from otel_lifecycle_hooks.render import RenderedCommand
from otel_lifecycle_hooks.template.loader import load_template_text

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown and to run as root")

NOBODY_UID = 65534


def _script(directory: Path, marker: Path, mode: int, owner: int = NOBODY_UID) -> Path:
    script = directory / "hook.sh"
    script.write_text(f"#!/bin/sh\necho ran > '{marker}'\n")
    os.chown(script, owner, owner)
    os.chmod(script, mode)
    return script


def _run_hook(command: list[str], env: dict[str, str] | None = None) -> Execution:
    """Fire a blocking script hook on post-start as this (root) process; its execution."""
    template = load_template_text(
        "lifecycle_hooks:\n"
        "  - name: audit\n"
        "    on: [post-start]\n"
        "    blocking: true\n"
        "    action:\n"
        "      type: script\n"
        f"      command: {json.dumps(command)}\n"
        f"      env: {json.dumps(env or {})}\n"
    )
    engine = HookEngine(template, journal=False, hook_log=False)
    try:
        return engine.fire("post-start", SessionInfo("session-1")).executions[0]
    finally:
        engine.shutdown(5)


def test_a_script_of_another_owner_writable_by_others_is_refused_and_never_runs(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marker"
    script = _script(tmp_path, marker, 0o757)

    execution = _run_hook([str(script)])

    assert execution.outcome == "refused"
    assert execution.error_type == "UnsafeScript"
    assert execution.attempts == 0
    assert f"owned by uid {NOBODY_UID}" in execution.message
    assert "writable by others" in execution.message and "chmod go-w" in execution.message
    assert not marker.exists()


def test_a_script_of_roots_without_write_access_for_group_or_others_runs(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    script = _script(tmp_path, marker, 0o755, owner=0)

    execution = _run_hook([str(script)])

    assert (execution.outcome, execution.error_type) == ("success", None)
    assert marker.read_text() == "ran\n"


def test_group_write_access_is_refused_too(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    script = _script(tmp_path, marker, 0o775)

    execution = _run_hook([str(script)])

    assert (execution.outcome, execution.error_type) == ("refused", "UnsafeScript")
    assert "writable by its group" in execution.message
    assert not marker.exists()


def test_a_script_found_on_the_hooks_path_is_checked_where_it_was_found(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = _script(bin_dir, marker, 0o757)
    os.rename(script, bin_dir / "unsafe-hook")

    execution = _run_hook(["unsafe-hook"], env={"PATH": str(bin_dir)})

    assert (execution.outcome, execution.error_type) == ("refused", "UnsafeScript")
    assert not marker.exists()


def test_run_script_itself_refuses_for_every_caller(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    script = _script(tmp_path, marker, 0o757)

    outcome = run_script(RenderedCommand(argv=(str(script),), env={}, stdin=b""), timeout=5)

    assert (outcome.result.kind, outcome.result.error_type) == ("permanent", "UnsafeScript")
    assert outcome.pid is None and not marker.exists()


def test_only_running_as_root_is_guarded(tmp_path: Path) -> None:
    script = _script(tmp_path, tmp_path / "marker", 0o757)
    assert unsafe_as_root(str(script), {}, None) is not None
    assert unsafe_as_root(str(script), {}, "root") is not None
    # As another user the script can do no more than that user could: not refused.
    assert unsafe_as_root(str(script), {}, "nobody") is None
    # Root's own files, and programs that do not exist (starting them reports that), pass.
    os.chown(script, 0, 0)
    os.chmod(script, 0o755)
    assert unsafe_as_root(str(script), {}, None) is None
    assert unsafe_as_root("no-such-program", {"PATH": str(tmp_path)}, None) is None
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


@pytest.mark.parametrize(("owner", "mode"), [(0, 0o700), (0, 0o754), (NOBODY_UID, 0o644)])
def test_a_program_the_user_may_not_execute_fails_as_exec_would(
    tmp_path: Path, owner: int, mode: int
) -> None:
    # As root with cgroup v2, the script is started through root stages (join its cgroup, then
    # setpriv to the user): what the user may not run is still a permanent PermissionError, as
    # exec as that user says, not the exit code of a stage.
    marker = tmp_path / "ran"
    script = _script(tmp_path, marker, mode, owner=owner)

    outcome = run_script(RenderedCommand((str(script),)), 10.0, user="nobody")

    assert (outcome.result.kind, outcome.result.error_type) == ("permanent", "PermissionError")
    assert not marker.exists()


def test_a_program_the_user_may_execute_runs_as_the_user() -> None:
    # pytest's tmp_path is below a directory only root may traverse.
    directory = Path(tempfile.mkdtemp(prefix="olh-as-user-"))
    try:
        directory.chmod(0o755)
        script = directory / "whoami.sh"
        script.write_text("#!/bin/sh\nid -u\n")
        script.chmod(0o755)

        outcome = run_script(RenderedCommand((str(script),)), 10.0, user="nobody")

        assert outcome.result.kind == "ok", outcome.result
        assert outcome.stdout.strip() == str(NOBODY_UID)
    finally:
        shutil.rmtree(directory)
