"""Agent-controlled values never choose where a request goes or what a program runs:
validation refuses them in a URL's scheme, userinfo, host or port, in a Host header, in a
script's program and inside a shell's (or an interpreter's) program text, naming the variable
and the safe form; rendering refuses them there too, whatever built the template."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_lifecycle_hooks.render import RenderError, render_url
from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.problems import TemplateError
from otel_lifecycle_hooks.variables import Variables


def http_hook(url: str, extra: str = "", env: str = "") -> str:
    return (
        env + "lifecycle_hooks:\n"
        "  - name: probe\n"
        "    on: [tool-start]\n"
        "    action:\n"
        "      type: http\n"
        f"      url: {json.dumps(url)}\n" + extra
    )


def script_hook(command: list[str], extra: str = "", env: str = "") -> str:
    return (
        env + "lifecycle_hooks:\n"
        "  - name: run\n"
        "    on: [tool-start]\n"
        "    action:\n"
        "      type: script\n"
        f"      command: {json.dumps(command)}\n" + extra
    )


def refusal(text: str) -> str:
    with pytest.raises(TemplateError) as refused:
        load_template_text(text)
    return str(refused.value)


@pytest.mark.parametrize(
    ("url", "part"),
    [
        ("${ASSISTANT_TEXT}", "scheme and host"),
        ("${TOOL_NAME}/probe", "scheme and host"),
        ("http://${TOOL_NAME}/probe", "host"),
        ("https://api.example.com:${ERROR_MESSAGE}/x", "port"),
        ("https://${TASK_SUMMARY}@api.example.com/x", "userinfo"),
        ("https://${SESSION_ID}.example.com/x", "host"),
    ],
)
def test_an_agent_value_in_a_urls_origin_is_refused(url: str, part: str) -> None:
    message = refusal(http_hook(url, "      auth: {type: bearer-token, token_env: TOKEN}\n"))
    assert 'field "action.url"' in message
    assert "is chosen by the agent" in message
    assert part.split()[0] in message
    assert "path or query" in message  # the safe form


def test_an_env_entry_that_refers_to_an_agent_value_is_refused_in_the_origin_too() -> None:
    message = refusal(http_hook("${REGISTRY}/tools", env="env:\n  REGISTRY: ${TOOL_NAME}\n"))
    assert "${REGISTRY} (through env: REGISTRY, which refers to ${TOOL_NAME})" in message


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/tools/${TOOL_NAME}?text=${ASSISTANT_TEXT}#${ERROR_MESSAGE}",
        "${REGISTRY_URL}/tools/${TOOL_NAME}",
        "https://${REGISTRY_HOST}/v1/${TOOL_NAME}",
    ],
)
def test_agent_values_in_the_path_query_and_fragment_are_fine(url: str) -> None:
    load_template_text(
        http_hook(url, env="env:\n  REGISTRY_URL: https://r.example.com\n  REGISTRY_HOST: h\n")
    )


def test_an_agent_value_in_the_host_header_is_refused() -> None:
    message = refusal(
        http_hook("https://api.example.com/", "      headers: {Host: '${TOOL_NAME}'}\n")
    )
    assert 'field "action.headers.Host"' in message


def test_a_variable_cannot_be_a_header_name() -> None:
    message = refusal(http_hook("https://api.example.com/", "      headers: {'${TOOL_NAME}': x}\n"))
    assert "is not a valid header name" in message


@pytest.mark.parametrize(
    ("command", "index"),
    [
        (["sh", "-c", "echo tool=${TOOL_NAME}"], 2),
        (["/bin/bash", "-ec", "notify ${ASSISTANT_TEXT}"], 2),
        (["bash", "-o", "pipefail", "-c", "x ${ERROR_MESSAGE} | y"], 4),
        (["zsh", "-c", "${TASK_SUMMARY}"], 2),
        (["dash", "-c", "echo ${PROMPT}"], 2),
        (["env", "FOO=1", "sh", "-c", "echo ${TOOL_NAME}"], 4),
        (["/usr/bin/env", "-i", "bash", "-lc", "echo ${TOOL_NAME}"], 4),
        (["nohup", "sh", "-c", "echo ${MESSAGE}"], 3),
        (["busybox", "sh", "-c", "echo ${TOOL_NAME}"], 3),
        (["env", "-u", "HOME", "sh", "-c", "echo ${TOOL_NAME}"], 5),
        (["timeout", "-s", "KILL", "5", "bash", "-c", "echo ${TOOL_NAME}"], 6),
        (["sudo", "-u", "bob", "sh", "-c", "echo ${TOOL_NAME}"], 5),
        (["env", "-S", "sh -c 'echo ${TOOL_NAME}'"], 2),
        (["python3", "-c", "print('${TOOL_NAME}')"], 2),
        (["perl", "-e", "print '${TOOL_NAME}'"], 2),
        (["node", "-e", "console.log('${TOOL_NAME}')"], 2),
        (["${TOOL_NAME}", "--flag"], 0),
    ],
)
def test_an_agent_value_in_program_text_or_as_the_program_is_refused(
    command: list[str], index: int
) -> None:
    message = refusal(script_hook(command))
    assert f'field "action.command[{index}]"' in message
    assert "is chosen by the agent" in message
    # The safe forms: the script's environment, or its stdin.
    assert "env: {" in message and "stdin" in message
    # Even where a program is said to treat its arguments as data.
    message = refusal(script_hook(command, "      agent_values_in_args: true\n"))
    assert f'field "action.command[{index}]"' in message


def test_a_script_that_reads_the_value_from_its_environment_is_fine() -> None:
    load_template_text(
        script_hook(
            ["sh", "-c", 'echo "tool=$TOOL_NAME"'], "      env: {TOOL_NAME: '${TOOL_NAME}'}\n"
        )
    )
    # As a data argument only with the opt-in, and only after "--".
    load_template_text(
        script_hook(
            ["/opt/notify", "--", "${ASSISTANT_TEXT}"], "      agent_values_in_args: true\n"
        )
    )


@pytest.mark.parametrize(
    "command",
    [
        ["sh", "-c", 'echo "tool=$1"', "sh", "${TOOL_NAME}"],
        ["python3", "/opt/notify.py", "${ASSISTANT_TEXT}"],
    ],
)
def test_an_agent_value_as_an_argument_of_a_shell_or_interpreter_is_refused(
    command: list[str],
) -> None:
    message = refusal(script_hook(command))
    assert "may not stand in command:" in message
    message = refusal(script_hook(command, "      agent_values_in_args: true\n"))
    assert "runs its arguments as code or as a command" in message


@pytest.mark.parametrize("name", ["BASH_ENV", "LD_PRELOAD", "PATH", "PYTHONPATH", "NODE_OPTIONS"])
def test_an_agent_value_in_an_env_variable_that_chooses_what_runs_is_refused(name: str) -> None:
    message = refusal(script_hook(["/opt/notify.sh"], f"      env: {{{name}: '${{TOOL_NAME}}'}}\n"))
    assert f'field "action.env.{name}"' in message


def test_test_command_no_longer_renders_a_metadata_address(tmp_path: Path) -> None:
    template = tmp_path / "scion-agent.yaml"
    template.write_text(http_hook("http://${TOOL_NAME}/probe"))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_lifecycle_hooks",
            "test",
            str(template),
            "--event",
            "tool-start",
            "--set",
            "TOOL_NAME=169.254.169.254",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "169.254.169.254/probe" not in result.stdout + result.stderr
    assert "is chosen by the agent" in result.stderr


@pytest.mark.parametrize("url", ["${TOOL_NAME}", "http://${TOOL_NAME}/probe"])
def test_rendering_refuses_a_reported_value_in_the_origin_whatever_the_template(url: str) -> None:
    variables = Variables(event={"TOOL_NAME": "http://169.254.169.254"})
    with pytest.raises(RenderError, match="chosen by the agent"):
        render_url(url, variables)


def test_what_another_hooks_endpoint_answered_never_becomes_program_text() -> None:
    message = refusal(script_hook(["sh", "-c", "deploy ${HOOK_REGISTER_RESPONSE.id}"]))
    assert "is what another hook's endpoint answered" in message
    assert 'field "action.command[2]"' in message


def test_a_captured_response_may_still_name_a_url_the_author_chose_to_trust() -> None:
    load_template_text(http_hook("${HOOK_REGISTER_RESPONSE.callback}"))
