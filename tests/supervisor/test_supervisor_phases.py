"""Starting and ending under `run`: the phases in order, a failing pre-start that keeps the
agent from starting, a command that cannot start, an agent that crashes, and Scion's legacy
hook directories running before the template's hooks."""

from __future__ import annotations

import signal
import stat
from pathlib import Path

from tests.supervisor.supervised import (
    Workspace,
    payload_appender,
    read_lines,
    recorded,
    recorder_hook,
    script_hook,
)
from tests.support.target_server import TargetServer

PHASE_EVENTS = ["phase-change", "pre-start", "post-start", "error", "session-end"]


def test_phase_changes_carry_phase_and_previous_phase_in_order(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = workspace.template(recorder_hook(target_server.url("/events"), ["phase-change"]))
    run = workspace.start(template, workspace.agent_command(exit=0))

    assert run.wait(timeout=120) == 0, run.stderr
    assert [(e["PREVIOUS_PHASE"], e["PHASE"]) for e in recorded(target_server)] == [
        ("created", "provisioning"),
        ("provisioning", "starting"),
        ("starting", "running"),
        ("running", "stopping"),
        ("stopping", "stopped"),
    ]


def test_a_failing_blocking_pre_start_hook_keeps_the_agent_from_starting(
    workspace: Workspace, target_server: TargetServer
) -> None:
    started = workspace.root / "agent-started"
    template = workspace.template(
        # The recorder first: hooks declared after a failed `fail` hook do not run.
        recorder_hook(target_server.url("/events"), PHASE_EVENTS)
        + script_hook("provision", ["pre-start"], ["false"], blocking="true", on_error="fail")
    )
    run = workspace.start(template, workspace.agent_command(touch=str(started)))

    assert run.wait(timeout=120) == 1, run.stderr
    assert not started.exists()
    assert "'provision' failed at pre-start" in run.stderr
    events = recorded(target_server)
    assert [(e["EVENT"], e["PHASE"]) for e in events] == [
        ("phase-change", "provisioning"),
        ("pre-start", "provisioning"),
        ("phase-change", "error"),
        ("error", "error"),
        ("session-end", "error"),
    ]
    assert "provision" in events[3]["ERROR_MESSAGE"]
    assert events[-1]["EXIT_CODE"] == "1"


def test_a_command_that_does_not_exist_fails_the_run_with_a_clear_message(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = workspace.template(recorder_hook(target_server.url("/events"), PHASE_EVENTS))
    run = workspace.start(template, ["no-such-agent-command", "--serve"])

    assert run.wait(timeout=120) == 127, run.stderr  # as a shell says "not found"
    assert "could not start 'no-such-agent-command'" in run.stderr
    events = recorded(target_server)
    assert [(e["EVENT"], e["PHASE"]) for e in events][-4:] == [
        ("phase-change", "starting"),
        ("phase-change", "error"),
        ("error", "error"),
        ("session-end", "error"),
    ]
    assert "no-such-agent-command" in events[-2]["ERROR_MESSAGE"]
    assert events[-1]["EXIT_CODE"] == "127"


def test_an_agent_killed_by_a_signal_nobody_sent_is_an_error(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = workspace.template(recorder_hook(target_server.url("/events"), PHASE_EVENTS))
    run = workspace.start(template, workspace.agent_command(kill_self=int(signal.SIGSEGV)))

    assert run.wait(timeout=120) == 128 + signal.SIGSEGV, run.stderr
    events = [e for e in recorded(target_server) if e["EVENT"] != "post-start"]
    assert [(e["EVENT"], e["PHASE"]) for e in events][-3:] == [
        ("phase-change", "error"),
        ("error", "error"),
        ("session-end", "error"),
    ]
    assert events[-2]["ERROR_MESSAGE"] == "agent terminated by SIGSEGV"
    assert events[-1]["EXIT_CODE"] == str(128 + signal.SIGSEGV)


def test_an_agent_that_exits_with_a_code_gives_the_run_that_code_without_an_error(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = workspace.template(recorder_hook(target_server.url("/events"), PHASE_EVENTS))
    run = workspace.start(template, workspace.agent_command(exit=130))

    assert run.wait(timeout=120) == 130, run.stderr
    assert "error" not in [e["EVENT"] for e in recorded(target_server)]
    assert recorded(target_server)[-1]["EXIT_CODE"] == "130"


def legacy_script(path: Path, log: Path, label: str, executable: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "{label} $SCION_HOOK_EVENT" >> "{log}"\n')
    mode = path.stat().st_mode | (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH if executable else 0)
    path.chmod(mode)


def test_legacy_hook_directories_run_first_in_order_and_only_executable_files(
    workspace: Workspace,
) -> None:
    order_log = workspace.root / "order.log"
    system_dir = workspace.root / "hooks-a"
    second_dir = workspace.root / "hooks-b"
    home_dir = workspace.home / ".scion" / "hooks"
    legacy_script(system_dir / "pre-start", order_log, "a/pre-start")
    legacy_script(system_dir / "pre-start.sh", order_log, "a/pre-start.sh")
    legacy_script(system_dir / "pre-start.d" / "20-b", order_log, "a/20-b")
    legacy_script(system_dir / "pre-start.d" / "10-a", order_log, "a/10-a")
    legacy_script(system_dir / "pre-start.d" / "15-off", order_log, "a/15-off", executable=False)
    legacy_script(second_dir / "pre-start", order_log, "b/pre-start")
    legacy_script(home_dir / "pre-start", order_log, "home/pre-start")
    legacy_script(system_dir / "session-end", order_log, "a/session-end")
    template_record = [
        "sh",
        "-c",
        'echo "template $(cat | python3 -c '
        '\'import json,sys; print(json.load(sys.stdin)["hook_event_name"])\')" '
        f'>> "{order_log}"',
    ]
    template = workspace.template(
        script_hook("template", ["pre-start", "session-end"], template_record, blocking="true")
    )
    env = {"SCION_HOOKS_DIR": f"{system_dir}:{second_dir}"}
    run = workspace.start(template, workspace.agent_command(exit=0), env=env)

    assert run.wait(timeout=120) == 0, run.stderr
    assert order_log.read_text().splitlines() == [
        "a/pre-start pre-start",
        "a/pre-start.sh pre-start",
        "a/10-a pre-start",
        "a/20-b pre-start",
        "b/pre-start pre-start",
        "home/pre-start pre-start",
        "template pre-start",
        "a/session-end session-end",
        "template session-end",
    ]


def test_script_hooks_read_the_event_with_its_phase(workspace: Workspace) -> None:
    hooks_log = workspace.root / "hooks.jsonl"
    template = workspace.template(
        script_hook(
            "audit",
            ["pre-start", "post-start", "session-end"],
            payload_appender(hooks_log),
            blocking="true",
        )
    )
    run = workspace.start(template, workspace.agent_command(exit=4))

    assert run.wait(timeout=120) == 4, run.stderr
    assert [(h["hook_event_name"], h["context"]["PHASE"]) for h in read_lines(hooks_log)] == [
        ("pre-start", "provisioning"),
        ("post-start", "running"),
        ("session-end", "stopped"),
    ]
    assert read_lines(hooks_log)[-1]["context"]["EXIT_CODE"] == "4"
    assert read_lines(hooks_log)[0]["agent"]["AGENT_NAME"] == "test-agent"
