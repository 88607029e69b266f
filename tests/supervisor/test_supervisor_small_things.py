"""The small things an operator meets first: `--version`, `status` without a signal, the
agent's default name, a missing template file named as such."""

from __future__ import annotations

import json
import subprocess
import sys

from otel_lifecycle_hooks import __version__
from otel_lifecycle_hooks.supervisor.options import SupervisorOptions
from otel_lifecycle_hooks.supervisor.run import agent_metadata
from otel_lifecycle_hooks.template.model import Template
from tests.supervisor.supervised import Workspace, script_hook, wait_until


def _cli(workspace: Workspace, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", *args],
        env=workspace.env,
        cwd=workspace.root,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_version_prints_the_package_version(workspace: Workspace) -> None:
    for flag in ("--version", "-V"):
        result = _cli(workspace, flag)
        assert (result.returncode, result.stdout) == (0, f"otel-lifecycle-hooks {__version__}\n")


def test_status_without_a_signal_shows_the_running_supervisor_phase_and_activity(
    workspace: Workspace,
) -> None:
    nobody = _cli(workspace, "status")
    assert nobody.returncode == 1
    assert "no supervisor is running" in nobody.stderr
    assert "required" not in nobody.stderr

    ready = workspace.root / "ready"
    template = workspace.template(script_hook("noop", ["pre-start"], ["true"]))
    run = workspace.start(
        template,
        workspace.agent_command(
            claude=[{"hook_event_name": "UserPromptSubmit", "prompt": "hi"}],
            ready_file=str(ready),
        ),
    )
    wait_until(ready.exists, what="the agent to report a prompt")

    def status_once_thinking() -> subprocess.CompletedProcess[str] | None:
        result = _cli(workspace, "status")
        return result if "activity thinking" in result.stdout else None

    shown = wait_until(status_once_thinking, what="status to show the activity")
    assert shown.returncode == 0
    assert f"supervisor pid {run.process.pid}: agent test-agent, phase running, " in shown.stdout
    run.signal(15)
    run.wait()
    after = _cli(workspace, "status")
    assert after.returncode == 1 and "no supervisor is running" in after.stderr


def test_the_default_agent_name_comes_from_the_template_not_the_command() -> None:
    named = Template(metadata={"TEMPLATE_NAME": "reviewer", "HARNESS_NAME": "claude"})
    options = SupervisorOptions(command=["python3", "agent.py"], template=named, environ={})
    assert agent_metadata(options)["AGENT_NAME"] == "reviewer"
    harness_only = Template(metadata={"HARNESS_NAME": "claude"})
    options = SupervisorOptions(command=["true"], template=harness_only, environ={})
    assert agent_metadata(options)["AGENT_NAME"] == "claude"
    options = SupervisorOptions(command=["true"], template=Template(), environ={})
    assert agent_metadata(options)["AGENT_NAME"] == "agent"
    options = SupervisorOptions(
        command=["true"], template=named, environ={"SCION_AGENT_NAME": "from-scion"}
    )
    assert agent_metadata(options)["AGENT_NAME"] == "from-scion"


def test_a_missing_template_file_is_named_with_the_reason(workspace: Workspace) -> None:
    payload = json.dumps({"hook_event_name": "SessionStart", "session_id": "s"})
    hook = _cli(
        workspace, "hook", "--dialect", "claude", "--template", "missing.yaml", stdin=payload
    )
    assert hook.returncode == 0  # a hook never fails its harness
    assert "template not loaded: missing.yaml: cannot read the file: No such file" in hook.stderr
    assert "TemplateError" not in hook.stderr
    run = _cli(workspace, "run", "--template", "missing.yaml", "--", "true")
    assert run.returncode == 1
    assert "missing.yaml: cannot read the file: No such file or directory" in run.stderr
