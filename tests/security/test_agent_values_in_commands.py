"""Agent values never become program text, by an allow-list: a value the agent chooses (a
reported field such as TOOL_NAME, a captured response, or an `env:` entry made of one) reaches
a script only through its environment and its stdin JSON, never through an element of
`command:`. No list of shells and wrappers can be complete; each form below passed the old
deny-list (issue item 4) and is now refused by `validate`, with the safe form in the message,
by rendering whatever built the template, and by a real root `run` that never starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.engine import HookEngine, SessionInfo
from otel_lifecycle_hooks.render import RenderError, render_argv
from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.model import HookAction, HookSpec, Template
from otel_lifecycle_hooks.template.problems import TemplateError
from otel_lifecycle_hooks.variables import Variables
from tests.security.conftest import HostileWorkspace, wire_line
from tests.supervisor.supervised import wait_until

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as root and nobody")

# Each form of issue item 4, and what TOOL_NAME would have to hold for it to run `touch M`
# (M: the marker's path, filled in), were the value let into the command.
SHELL = "touch {m}"
PYTHON = "open({m!r}, 'w').close()"
FORMS: dict[str, tuple[list[str], str]] = {
    "xargs sh -c": (["xargs", "sh", "-c", "${TOOL_NAME}"], SHELL),
    "find -exec sh -c": (
        ["find", "/", "-maxdepth", "0", "-exec", "sh", "-c", "${TOOL_NAME}", ";"],
        SHELL,
    ),
    "flock F sh -c": (["flock", "/tmp", "sh", "-c", "${TOOL_NAME}"], SHELL),
    "script -qc": (["script", "-qc", "${TOOL_NAME}", "/dev/null"], SHELL),
    "python3 -W ignore -c": ([SYSTEM_PYTHON, "-W", "ignore", "-c", "${TOOL_NAME}"], PYTHON),
    "python3 -X utf8 -c": ([SYSTEM_PYTHON, "-X", "utf8", "-c", "${TOOL_NAME}"], PYTHON),
    "python3 -Ic": ([SYSTEM_PYTHON, "-Ic", "${TOOL_NAME}"], PYTHON),
    "chrt": (["chrt", "-o", "0", "sh", "-c", "${TOOL_NAME}"], SHELL),
    "su -c": (["su", "-s", "/bin/sh", "-c", "${TOOL_NAME}", "root"], SHELL),
    "ssh host": (["ssh", "-o", "BatchMode=yes", "localhost", "${TOOL_NAME}"], SHELL),
    "tar --checkpoint-action=exec=": (
        [
            "tar",
            "-cf",
            "/dev/null",
            "--checkpoint=1",
            "--checkpoint-action=exec=${TOOL_NAME}",
            "/etc/hostname",
        ],
        SHELL,
    ),
    "sed -e": (["sed", "-n", "-e", "${TOOL_NAME}", "/etc/hostname"], "1e " + SHELL),
    "git -c core.pager=": (
        ["git", "-c", "core.pager=${TOOL_NAME}", "-p", "version"],
        SHELL,
    ),
    "sh ${TOOL_NAME}": (["sh", "${TOOL_NAME}"], "{script}"),
}


def script_hook(command: list[str], extra: str = "", top: str = "") -> str:
    return (
        top + "lifecycle_hooks:\n"
        "  - name: on-tool\n"
        "    on: [tool-start]\n"
        "    blocking: true\n"
        "    action:\n"
        "      type: script\n"
        f"      command: {json.dumps(command)}\n" + extra
    )


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory anyone may write (as the agent's user could), outside pytest's private
    temp directory."""
    path = Path(tempfile.mkdtemp(prefix="olh-values-"))
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# --- validate ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", sorted(FORMS))
def test_validate_refuses_each_form_with_the_variable_and_the_safe_form(
    form: str, tmp_path: Path
) -> None:
    command, _ = FORMS[form]
    template = tmp_path / "scion-agent.yaml"
    template.write_text(script_hook(command))
    index = next(i for i, element in enumerate(command) if "${TOOL_NAME}" in element)
    column = json.dumps(command).index(json.dumps(command[index])) + len("      command: ") + 1
    result = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "validate", str(template)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert f"{template}:7:{column}: " in output  # file:line:col of the element itself
    assert f'field "action.command[{index}]"' in output
    assert "${TOOL_NAME} is chosen by the agent" in output
    assert 'env: {TOOL_NAME: "${TOOL_NAME}"}' in output and '"$TOOL_NAME"' in output
    assert "stdin" in output


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_opt_in_for_data_arguments_never_admits_these_forms(form: str) -> None:
    command, _ = FORMS[form]
    with pytest.raises(TemplateError, match="is chosen by the agent"):
        load_template_text(script_hook(command, "      agent_values_in_args: true\n"))


@pytest.mark.parametrize(
    ("command", "why"),
    [
        (["/opt/notify", "--tool=${TOOL_NAME}"], "option"),
        (["/opt/notify", "--tool", "${TOOL_NAME}"], "option"),
        (["/opt/notify", "-t", "${TOOL_NAME}"], "option"),
        (["${TOOL_NAME}", "--", "x"], "names the program"),
        (["env", "${TOOL_NAME}"], "names the program"),
        (["timeout", "${TOOL_NAME}", "/opt/notify"], "runs its arguments"),
        (["/usr/bin/nice", "/opt/notify", "--", "${TOOL_NAME}"], "runs its arguments"),
        (["/opt/notify", "--", "${HOOK_REGISTER_RESPONSE.cmd}"], None),
    ],
)
def test_the_opt_in_keeps_agent_values_out_of_programs_and_options(
    command: list[str], why: str | None
) -> None:
    text = script_hook(command, "      agent_values_in_args: true\n")
    if why is None:
        load_template_text(text)  # after "--", to a program that reads arguments as data
        return
    with pytest.raises(TemplateError, match=why):
        load_template_text(text)


def test_the_safe_forms_load() -> None:
    # The environment, read as "$TOOL_NAME" (also through an env: entry of the template).
    load_template_text(
        script_hook(["sh", "-c", 'echo "$TOOL_NAME"'], "      env: {TOOL_NAME: '${TOOL_NAME}'}\n")
    )
    load_template_text(
        script_hook(
            ["sh", "-c", 'echo "$T"'],
            "      env: {T: '${TOOL}'}\n",
            top="env:\n  TOOL: ${TOOL_NAME}\n",
        )
    )
    # The stdin JSON: no reference at all.
    load_template_text(script_hook(["/usr/local/bin/on-tool"]))
    # Data arguments after "--", opted in.
    load_template_text(
        script_hook(["/opt/notify", "--", "${TOOL_NAME}"], "      agent_values_in_args: true\n")
    )


def test_an_env_entry_made_of_an_agent_value_is_refused_in_a_command_too() -> None:
    with pytest.raises(TemplateError) as refused:
        load_template_text(script_hook(["sh", "${T}"], top="env:\n  T: /tmp/${TOOL_NAME}\n"))
    assert "${T} (through env: T, which refers to ${TOOL_NAME})" in str(refused.value)
    assert 'env: {T: "${T}"}' in str(refused.value)


# --- rendering, whatever built the template -----------------------------------------------


@pytest.mark.parametrize("form", sorted(FORMS))
def test_rendering_refuses_each_form_whatever_built_the_template(form: str) -> None:
    command, _ = FORMS[form]
    with pytest.raises(RenderError, match=r"TOOL_NAME.*env:"):
        render_argv(command, Variables(event={"TOOL_NAME": "true"}))


def test_rendering_refuses_an_env_entry_made_of_an_agent_value() -> None:
    variables = Variables(event={"TOOL_NAME": "x"}, template_env={"T": "/tmp/${TOOL_NAME}"})
    with pytest.raises(RenderError, match=r"\$\{T\} takes its value from \$\{TOOL_NAME\}"):
        render_argv(["sh", "${T}"], variables)


def test_rendering_with_the_opt_in_refuses_a_value_that_would_be_an_option() -> None:
    variables = Variables(event={"TOOL_NAME": "--checkpoint-action=exec=sh"})
    with pytest.raises(RenderError, match="option"):
        render_argv(["/opt/notify", "${TOOL_NAME}"], variables, agent_values_in_args=True)
    argv = render_argv(["/opt/notify", "--", "${TOOL_NAME}"], variables, agent_values_in_args=True)
    assert argv == ("/opt/notify", "--", "--checkpoint-action=exec=sh")


@needs_root
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_template_built_in_code_never_runs_the_agents_value_as_root(
    form: str, shared_dir: Path
) -> None:
    """Validation is bypassed (the template is built in code); the engine runs as root with
    no agent user, so each form would run as uid 0 if the value were let in."""
    command, value = FORMS[form]
    marker = shared_dir / "marker"
    script = shared_dir / "agent.sh"
    script.write_text(f"touch {marker}\n")
    tool_name = value.format(m=str(marker), script=str(script))
    template = Template(
        hooks=(
            HookSpec(
                name="on-tool",
                on=("tool-start",),
                action=HookAction(type="script", command=tuple(command)),
                blocking=True,
                timeout=10.0,
            ),
        )
    )
    engine = HookEngine(template, journal=False, hook_log=False)
    try:
        [execution] = engine.fire(
            "tool-start", SessionInfo("session-1"), {"TOOL_NAME": tool_name}
        ).executions
    finally:
        engine.shutdown(5)
    assert (execution.outcome, execution.error_type) == ("refused", "RenderError")
    assert execution.attempts == 0
    assert not marker.exists()


# --- a real root supervisor, the agent as nobody ----------------------------------------


@pytest.fixture
def agent_workspace() -> Iterator[HostileWorkspace]:
    """A workspace the agent's user (nobody) can reach: its programs and plans readable."""
    root = Path(tempfile.mkdtemp(prefix="olh-agent-"))
    os.chmod(root, 0o711)
    space = HostileWorkspace(root)
    space.hostile.chmod(0o644)
    yield space
    space.cleanup()
    shutil.rmtree(root, ignore_errors=True)


def reported_tool_start(tool_name: str) -> bytes:
    return wire_line(
        {"v": 1, "kind": "event", "event": "tool-start", "fields": {"TOOL_NAME": tool_name}}
    )


@needs_root
def test_a_root_run_with_every_form_refuses_to_start_and_nothing_runs(
    agent_workspace: HostileWorkspace, shared_dir: Path
) -> None:
    marker = shared_dir / "marker"
    script = shared_dir / "agent.sh"
    script.write_text(f"touch {marker}\n")
    hooks = ""
    sends = []
    for number, form in enumerate(sorted(FORMS)):
        command, value = FORMS[form]
        hooks += (
            f"  - name: form-{number}\n"
            "    on: [tool-start]\n"
            "    action:\n"
            "      type: script\n"
            f"      command: {json.dumps(command)}\n"
        )
        sends.append(reported_tool_start(value.format(m=str(marker), script=str(script))))
    template = agent_workspace.template(hooks, extra="user: nobody\n")
    ready = shared_dir / "ready"
    run = agent_workspace.start(
        template,
        [SYSTEM_PYTHON, *agent_workspace.hostile_command(sends=sends, ready_file=ready)[1:]],
    )
    assert run.wait(timeout=60) == 1
    for number in range(len(FORMS)):
        assert f'hook "form-{number}"' in run.stderr
    assert "${TOOL_NAME} is chosen by the agent" in run.stderr
    assert not ready.exists()  # the agent never started
    assert not marker.exists()


@needs_root
def test_a_root_run_passes_the_agents_value_as_data_through_the_environment(
    agent_workspace: HostileWorkspace, shared_dir: Path
) -> None:
    """The safe form, in a hook run as the agent's user (the default) and in one that runs as
    root on purpose: the hostile value arrives intact and runs nowhere."""
    marker = shared_dir / "marker"
    hostile = f"$(touch {marker}); touch {marker}; `touch {marker}`"
    as_agent = shared_dir / "as-agent.json"
    as_root = shared_dir / "as-root.json"
    record = (
        "import json, os, sys; e = {'uid': os.getuid(), 'tool': os.environ['TOOL_NAME'],"
        " 'stdin': json.load(sys.stdin)['context'].get('TOOL_NAME')};"
        " open(sys.argv[1] + '.tmp', 'w').write(json.dumps(e));"
        " os.replace(sys.argv[1] + '.tmp', sys.argv[1])"
    )
    hooks = (
        "  - name: as-agent\n"
        "    on: [tool-start]\n"
        "    action:\n"
        "      type: script\n"
        f"      command: {json.dumps([SYSTEM_PYTHON, '-c', record, str(as_agent)])}\n"
        "      env: {TOOL_NAME: '${TOOL_NAME}'}\n"
        "  - name: as-root\n"
        "    on: [tool-start]\n"
        "    action:\n"
        "      type: script\n"
        "      run_as: root\n"
        f"      command: {json.dumps([SYSTEM_PYTHON, '-c', record, str(as_root)])}\n"
        "      env: {TOOL_NAME: '${TOOL_NAME}'}\n"
    )
    template = agent_workspace.template(hooks, extra="user: nobody\n")
    ready = shared_dir / "ready"
    run = agent_workspace.start(
        template,
        [
            SYSTEM_PYTHON,
            *agent_workspace.hostile_command(
                sends=[reported_tool_start(hostile)], ready_file=ready
            )[1:],
        ],
    )
    wait_until(lambda: as_agent.exists() and as_root.exists(), what="both hooks to run")
    run.signal(15)
    assert run.wait(timeout=60) == 0, run.stderr
    agent_side = json.loads(as_agent.read_text())
    root_side = json.loads(as_root.read_text())
    assert agent_side["uid"] == NOBODY and root_side["uid"] == 0
    assert agent_side["tool"] == root_side["tool"] == hostile
    assert agent_side["stdin"] == root_side["stdin"] == hostile
    assert not marker.exists()
