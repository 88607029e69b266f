"""Scripts run as the agent's user by default; a hook that must run as root says
`run_as: root` and then runs confined: `/` as its working directory, no loader variable in
its environment, and the ownership guard on every file it names (issue item 5).

Each attack of item 5 plants agent-writable code (owned by nobody, in a directory nobody
owns) that would leave a marker if it ran, and runs one script hook through the engine the
supervisor builds (its user: nobody):
- by default the hook runs as uid 65534: whatever it runs has the agent's rights only;
- with `run_as: root` it is refused before it starts, or runs without the agent's code;
- with no agent user at all (root runs everything, as before), the guard still refuses.
A real root `run` with `user: nobody` then shows the hooks of every lifecycle event
(pre-start, post-start, pre-stop, session-end) running as the agent's user, and so do
`test --execute`, seed 003's `hook_scripts` and core-agent hooks (through an engine given no user).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from otel_lifecycle_hooks.engine import AgentSession, Execution, HookEngine, SessionInfo
from otel_lifecycle_hooks.template.loader import load_template_text, load_templates
from otel_lifecycle_hooks.template.model import HookAction, HookSpec, Template
from otel_lifecycle_hooks.template.problems import TemplateError
from tests.supervisor.supervised import Workspace, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as root and nobody")

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"


@dataclass
class AgentFiles:
    """A directory the agent's user owns, with code in it that leaves `marker`."""

    root: Path
    marker: Path

    def command(self, form: str) -> list[str]:
        """The command of each item-5 form, naming the agent's files."""
        r = self.root
        return {
            "ionice": ["ionice", "-c3", f"{r}/x.sh"],
            "flock": ["flock", f"{r}/lock", f"{r}/x.sh"],
            "xargs": ["xargs", "-a", f"{r}/args", "/bin/sh"],
            "xargs program": ["xargs", "-0", f"{r}/x.sh"],
            "env -S": ["env", "-S", f"{r}/x.sh"],
            "node -r": ["node", "-r", f"{r}/x.js", "-e", "0"],
            "awk -f": ["awk", "-f", f"{r}/x.awk", "/dev/null"],
            "python3 -um": [SYSTEM_PYTHON, "-um", "agentmod"],
            "agent-writable cwd": [SYSTEM_PYTHON, "-c", "import agentmod"],
            "BASH_ENV": ["/bin/bash", "-c", "true"],
        }[form]

    def env(self, form: str) -> dict[str, str]:
        return {"BASH_ENV": f"{self.root}/x.sh"} if form == "BASH_ENV" else {}


FORMS = (
    "ionice",
    "flock",
    "xargs",
    "xargs program",
    "env -S",
    "node -r",
    "awk -f",
    "python3 -um",
    "agent-writable cwd",
    "BASH_ENV",
)


@pytest.fixture
def agent_files(monkeypatch: pytest.MonkeyPatch) -> Iterator[AgentFiles]:
    """The agent's directory, also this process's working directory (as the supervisor's
    may be the agent's workspace), and a marker directory anyone can write."""
    root = Path(tempfile.mkdtemp(prefix="olh-agent-"))
    markers = Path(tempfile.mkdtemp(prefix="olh-marker-"))
    os.chmod(markers, 0o1777)
    marker = markers / "ran"
    sources = {
        "x.sh": f"#!/bin/sh\ntouch {marker}\n",
        "x.js": f"require('fs').writeFileSync({json.dumps(str(marker))}, '')\n",
        "x.awk": f'BEGIN {{ system("touch {marker}") }}\n',
        "agentmod.py": f"open({str(marker)!r}, 'w').close()\n",
        "args": f"{root}/x.sh\n",
        "lock": "",
    }
    for name, text in sources.items():
        path = root / name
        path.write_text(text)
        os.chown(path, NOBODY, NOBODY)
        os.chmod(path, 0o755)
    os.chown(root, NOBODY, NOBODY)
    os.chmod(root, 0o755)
    monkeypatch.chdir(root)
    yield AgentFiles(root, marker)
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(markers, ignore_errors=True)


def hook_yaml(command: list[str], env: dict[str, str], run_as: str | None) -> str:
    return (
        "user: nobody\n"
        "lifecycle_hooks:\n"
        "  - name: audit\n"
        "    on: [post-start]\n"
        "    blocking: true\n"
        "    timeout: 20s\n"
        "    action:\n"
        "      type: script\n"
        + (f"      run_as: {run_as}\n" if run_as else "")
        + f"      command: {json.dumps(command)}\n"
        f"      env: {json.dumps(env)}\n"
    )


def fire(template: Template, script_user: str | None) -> Execution:
    engine = HookEngine(template, journal=False, hook_log=False, script_user=script_user)
    try:
        return engine.fire("post-start", SessionInfo("session-1")).executions[0]
    finally:
        engine.shutdown(5)


@pytest.mark.parametrize("form", FORMS)
def test_by_default_the_hook_runs_as_the_agents_user(form: str, agent_files: AgentFiles) -> None:
    template = load_template_text(hook_yaml(agent_files.command(form), agent_files.env(form), None))
    fire(template, None)  # the engine takes the template's user: nobody
    # Whatever ran, ran as the agent: any marker is nobody's, never root's.
    if agent_files.marker.exists():
        assert agent_files.marker.stat().st_uid == NOBODY


@pytest.mark.parametrize("form", FORMS)
def test_as_root_each_form_is_refused_or_runs_without_the_agents_code(
    form: str, agent_files: AgentFiles
) -> None:
    command, env = agent_files.command(form), agent_files.env(form)
    text = hook_yaml(command, env, "root")
    if env:
        # A root hook may not set a loader variable at all.
        with pytest.raises(TemplateError, match="BASH_ENV chooses what a program loads"):
            load_template_text(text)
        # Built in code, past validation: the variable never reaches the script.
        action = HookAction(type="script", command=tuple(command), env=env, run_as="root")
        template = Template(hooks=(HookSpec("audit", ("post-start",), action, blocking=True),))
    else:
        template = load_template_text(text)
    execution = fire(template, "nobody")
    assert not agent_files.marker.exists(), execution
    if form in ("agent-writable cwd", "BASH_ENV"):
        assert execution.attempts == 1  # it ran, confined: the agent's code did not
    else:
        assert (execution.outcome, execution.error_type) == ("refused", "UnsafeScript")
        assert "refusing to run it as root" in execution.message


@pytest.mark.parametrize("form", [f for f in FORMS if f not in ("agent-writable cwd", "BASH_ENV")])
def test_with_no_agent_user_the_guard_still_refuses_each_form(
    form: str, agent_files: AgentFiles
) -> None:
    """No `user:` anywhere: scripts run as root unconfined, as they always did, and the guard
    still refuses every file it names that another user could replace."""
    action = HookAction(type="script", command=tuple(agent_files.command(form)))
    template = Template(hooks=(HookSpec("audit", ("post-start",), action, blocking=True),))
    execution = fire(template, None)
    assert (execution.outcome, execution.error_type) == ("refused", "UnsafeScript")
    assert not agent_files.marker.exists()


def test_with_no_agent_user_a_loader_variable_naming_agent_code_is_refused(
    agent_files: AgentFiles,
) -> None:
    action = HookAction(
        type="script",
        command=("/bin/bash", "-c", "true"),
        env={"BASH_ENV": f"{agent_files.root}/x.sh"},
    )
    template = Template(hooks=(HookSpec("audit", ("post-start",), action, blocking=True),))
    execution = fire(template, None)
    assert (execution.outcome, execution.error_type) == ("refused", "UnsafeScript")
    assert not agent_files.marker.exists()


def test_a_root_hook_runs_in_root_and_without_inherited_loader_variables(
    agent_files: AgentFiles, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = tmp_path / "seen.json"
    monkeypatch.setenv("BASH_ENV", f"{agent_files.root}/x.sh")
    monkeypatch.setenv("PERL5OPT", "-Magent")
    monkeypatch.setenv("NODE_OPTIONS", f"--require {agent_files.root}/x.js")
    code = (
        "import json, os, sys; json.dump({'cwd': os.getcwd(), 'uid': os.getuid(), "
        "'env': sorted(os.environ)}, open(sys.argv[1], 'w'))"
    )
    template = load_template_text(hook_yaml([SYSTEM_PYTHON, "-c", code, str(out)], {}, "root"))
    execution = fire(template, "nobody")
    assert execution.outcome == "success", execution
    seen = json.loads(out.read_text())
    assert seen["cwd"] == "/" and seen["uid"] == 0
    assert not {"BASH_ENV", "PERL5OPT", "NODE_OPTIONS"} & set(seen["env"])
    assert "PATH" in seen["env"]


def test_run_as_accepts_agent_and_root_only() -> None:
    with pytest.raises(TemplateError, match="valid values are agent, root"):
        load_template_text(hook_yaml(["/bin/true"], {}, "admin"))


# --- a real root supervisor, the agent as nobody -------------------------------------------


@pytest.fixture
def reachable_workspace() -> Iterator[Workspace]:
    root = Path(tempfile.mkdtemp(prefix="olh-run-"))
    os.chmod(root, 0o711)
    space = Workspace(root)
    yield space
    space.cleanup()
    shutil.rmtree(root, ignore_errors=True)


def uid_recorder(path: Path) -> list[str]:
    code = (
        "import json, os, sys; e = json.load(sys.stdin); "
        "line = json.dumps({'event': e.get('hook_event_name'), 'uid': os.getuid(), "
        "'cwd': os.getcwd()}); "
        "f = open(sys.argv[1], 'a'); f.write(line + '\\n'); f.close()"
    )
    return [SYSTEM_PYTHON, "-c", code, str(path)]


def test_every_kind_of_hook_of_a_root_run_runs_as_the_agents_user(
    reachable_workspace: Workspace,
) -> None:
    shared = Path(tempfile.mkdtemp(prefix="olh-uids-"))
    os.chmod(shared, 0o1777)
    try:
        uids = shared / "uids.jsonl"
        events = ["pre-start", "post-start", "pre-stop", "session-end"]
        hooks = (
            "  - name: each\n"
            f"    on: [{', '.join(events)}]\n"
            "    blocking: true\n"
            "    action:\n"
            "      type: script\n"
            f"      command: {json.dumps(uid_recorder(uids))}\n"
        )
        template = reachable_workspace.template(hooks, extra="user: nobody\n")
        agent = reachable_workspace.agent_command(
            pid_file=str(shared / "agent.pid"), ready_file=str(shared / "ready")
        )
        # The stand-in agent is run by the system interpreter: nobody cannot reach the venv.
        agent[0] = SYSTEM_PYTHON
        reachable_workspace.agent.chmod(0o644)
        run = reachable_workspace.start(template, agent)
        wait_until((shared / "ready").exists, what="the agent to start")
        run.signal(15)
        run.wait(timeout=60)
        seen = [json.loads(line) for line in uids.read_text().splitlines()]
        assert [item["event"] for item in seen] == events, run.stderr
        assert {item["uid"] for item in seen} == {NOBODY}, seen
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_test_execute_runs_the_script_as_the_templates_user(tmp_path: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="olh-uids-"))
    os.chmod(shared, 0o1777)
    try:
        uids = shared / "uids.jsonl"
        template = tmp_path / "scion-agent.yaml"
        template.write_text(
            "user: nobody\nlifecycle_hooks:\n"
            "  - name: each\n"
            "    on: [post-start]\n"
            "    action:\n"
            "      type: script\n"
            f"      command: {json.dumps(uid_recorder(uids))}\n"
        )
        result = subprocess.run(
            [sys.executable, "-m", "otel_lifecycle_hooks", "test", str(template),
             "--event", "post-start", "--execute"],
            capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
        )  # fmt: skip
        assert uids.exists(), result.stdout + result.stderr
        [seen] = [json.loads(line) for line in uids.read_text().splitlines()]
        assert seen["uid"] == NOBODY
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_seed_003_hook_scripts_run_as_the_templates_user() -> None:
    """`hook_scripts:` become script hooks of the same executor: the template's user too."""
    directory = Path(tempfile.mkdtemp(prefix="olh-hook-scripts-"))
    shared = Path(tempfile.mkdtemp(prefix="olh-uids-"))
    try:
        os.chmod(directory, 0o755)
        os.chmod(shared, 0o1777)
        uids = shared / "uids"
        script = directory / "hooks" / "record.sh"
        script.parent.mkdir(mode=0o755)
        script.write_text(f"#!/bin/sh\nid -u >> {uids}\necho '{{\"stages\": []}}'\n")
        script.chmod(0o755)
        template = directory / "scion-agent.yaml"
        template.write_text("user: nobody\nharness: hrns\nhook_scripts:\n  - hooks/record.sh\n")
        engine = HookEngine(load_templates([template]), journal=False, hook_log=False)
        try:
            engine.fire("pre-start", SessionInfo("session-1"))
        finally:
            engine.shutdown(5)
        assert uids.read_text().split() == [str(NOBODY)]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)


def test_core_agent_hooks_run_as_the_templates_user() -> None:
    """A core-agent `.agents/config.json` hook (seed 001) beside a template with `user:`."""
    directory = Path(tempfile.mkdtemp(prefix="olh-core-agent-"))
    shared = Path(tempfile.mkdtemp(prefix="olh-uids-"))
    try:
        os.chmod(shared, 0o1777)
        uids = shared / "uids"
        template = directory / "scion-agent.yaml"
        template.write_text("user: nobody\n")
        config = directory / ".agents" / "config.json"
        config.parent.mkdir()
        hooks = {"tool-start": [{"command": f"id -u >> {uids}"}]}
        config.write_text(json.dumps({"model": "m", "hooks": hooks}))
        engine = HookEngine(load_templates([template, config]), journal=False, hook_log=False)
        try:
            session = AgentSession(engine, agent_name="core-agent", session_id="session-1")
            session.record("tool-start", {"TOOL_NAME": "run_shell"})
            session.end()
        finally:
            engine.shutdown(5)
        assert uids.read_text().split() == [str(NOBODY)]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)


def test_recovery_of_a_killed_root_supervisor_runs_its_hooks_as_the_agents_user(
    reachable_workspace: Workspace,
) -> None:
    """The next `run` ends the session a SIGKILLed supervisor left open (pre-stop and
    session-end, recovered): as the agent's user too."""
    shared = Path(tempfile.mkdtemp(prefix="olh-uids-"))
    os.chmod(shared, 0o1777)
    try:
        uids = shared / "uids.jsonl"
        hooks = (
            "  - name: registry\n"
            "    on: [post-start, pre-stop, session-end]\n"
            "    blocking: true\n"
            "    action:\n"
            "      type: script\n"
            f"      command: {json.dumps(uid_recorder(uids))}\n"
        )
        template = reachable_workspace.template(hooks, extra="user: nobody\n")
        reachable_workspace.agent.chmod(0o644)

        def agent(number: int, **plan: object) -> list[str]:
            command = reachable_workspace.agent_command(
                pid_file=str(shared / f"agent-{number}.pid"), **plan
            )
            return [SYSTEM_PYTHON, *command[1:]]

        killed = reachable_workspace.start(template, agent(1))
        wait_until(lambda: uids.exists() and uids.read_text(), what="post-start")
        wait_until((shared / "agent-1.pid").exists, what="the agent's pid file")
        killed.signal(signal.SIGKILL)
        killed.wait(timeout=120)
        # The orphaned agent goes too, as it would with its container.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int((shared / "agent-1.pid").read_text()), signal.SIGKILL)
        second = reachable_workspace.start(template, agent(2, exit=0))
        assert second.wait(timeout=60) == 0, second.stderr
        seen = [json.loads(line) for line in uids.read_text().splitlines()]
        events = [item["event"] for item in seen]
        # post-start; recovered pre-stop and session-end; the second run's own.
        assert events[:3] == ["post-start", "pre-stop", "session-end"], (events, second.stderr)
        assert {item["uid"] for item in seen} == {NOBODY}, seen
    finally:
        shutil.rmtree(shared, ignore_errors=True)
