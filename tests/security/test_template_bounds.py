"""Bounds on templates: whoever wrote a template (a parent template from elsewhere included)
cannot make validation or rendering exhaust memory or time, and what would be silently
misread is refused with its position."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_lifecycle_hooks.template.loader import (
    MAX_TEMPLATE_BYTES,
    load_template_text,
    load_templates,
)
from otel_lifecycle_hooks.template.problems import TemplateError
from otel_lifecycle_hooks.variables import Variables

HOOK = """lifecycle_hooks:
  - name: notify
    on: [task-completed]
    action:
      type: http
      url: "{url}"
      body: '{{"x": "${{A0}}"}}'
"""


def refusal(text: str) -> str:
    with pytest.raises(TemplateError) as refused:
        load_template_text(text)
    return str(refused.value)


def exponential_env(levels: int) -> str:
    lines = [f'  A{n}: "${{A{n + 1}}}${{A{n + 1}}}"' for n in range(levels)]
    return "env:\n" + "\n".join(lines) + f'\n  A{levels}: "xxxxxxxxxxxxxxxx"\n'


def test_an_exponential_env_expansion_is_refused_where_it_is_written() -> None:
    message = refusal(exponential_env(40) + HOOK.format(url="https://example.com/x"))
    assert 'field "env.A0"' in message
    assert "scion-agent.yaml:2:3" in message  # the line of A0
    assert "grow exponentially" in message


def test_an_env_chain_deeper_than_the_bound_is_refused() -> None:
    lines = [f'  B{n}: "${{B{n + 1}}}"' for n in range(30)]
    message = refusal("env:\n" + "\n".join(lines) + "\n  B30: x\n")
    assert 'field "env.B0"' in message and "levels" in message


def test_a_parent_and_child_cannot_build_the_bomb_between_them(tmp_path: Path) -> None:
    parent, child = tmp_path / "parent.yaml", tmp_path / "child.yaml"
    text = exponential_env(40)
    lines = text.splitlines()
    parent.write_text("\n".join(lines[:20]) + "\n")
    child.write_text("env:\n" + "\n".join(lines[20:]) + "\n")
    with pytest.raises(TemplateError, match="grow exponentially"):
        load_templates([parent, child])


def test_rendering_a_template_built_in_code_stops_at_the_depth_bound() -> None:
    env = {f"A{n}": f"${{A{n + 1}}}${{A{n + 1}}}" for n in range(40)}
    env["A40"] = "x"
    value = Variables(template_env=env).get("A0")
    assert value is not None and len(value) <= 2**16


def test_a_50_mb_template_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "scion-agent.yaml"
    with path.open("w") as handle:
        handle.write("lifecycle_hooks: []\nfiller: |\n")
        line = "  " + "x" * 98 + "\n"
        handle.write(line * (50 * 1024 * 1024 // len(line)))
    with pytest.raises(TemplateError) as refused:
        load_templates([path])
    assert f"larger than {MAX_TEMPLATE_BYTES // (1024 * 1024)} MiB" in str(refused.value)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("!env TOKEN", "!env"),
        ("!!python/object:os.system x", "!!python/object:os.system"),
        ("!!binary aGVsbG8=", "!!binary"),
    ],
)
def test_a_yaml_tag_is_refused_with_its_position(value: str, shown: str) -> None:
    message = refusal(f"env:\n  TOKEN: {value}\n")
    assert "scion-agent.yaml:2:10" in message
    assert f"the YAML tag {shown} is not supported" in message


def test_core_schema_values_and_merge_keys_still_read() -> None:
    template = load_template_text(
        "defaults: &d {A: '1'}\nenv:\n  <<: *d\n  B: 2\n  C: 2026-01-01\n  D: true\n"
    )
    assert dict(template.env)["A"] == "1"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://[::1/x", "malformed IPv6 address"),
        ("http://127.0.0.1:99999/x", "port that is not a number from 1 to 65535"),
        ("http://127.0.0.1:0/x", "port 0"),
        ("http://127.0.0.1:abc/x", "port that is not a number"),
    ],
)
def test_url_ports_and_ipv6_literals_are_validated(url: str, expected: str) -> None:
    message = refusal(HOOK.format(url=url))
    assert 'field "action.url"' in message and expected in message


def test_a_well_formed_ipv6_loopback_url_is_fine() -> None:
    load_template_text(HOOK.format(url="http://[::1]:8080/x"))


@pytest.mark.parametrize("limits", ["[1, 2]", "7", "{max_turns: [1]}"])
def test_limits_of_the_wrong_type_are_refused(limits: str) -> None:
    message = refusal(f"limits: {limits}\n")
    assert 'field "limits' in message


def test_run_refuses_an_exponential_template_before_starting_the_agent(tmp_path: Path) -> None:
    import subprocess
    import sys

    template = tmp_path / "scion-agent.yaml"
    template.write_text(exponential_env(40) + HOOK.format(url="https://example.com/x"))
    started = tmp_path / "started"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_lifecycle_hooks",
            "run",
            "--template",
            str(template),
            "--",
            sys.executable,
            "-c",
            f"open({str(started)!r}, 'w')",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode != 0
    assert "grow exponentially" in result.stderr
    assert not started.exists()
