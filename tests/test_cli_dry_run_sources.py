"""`test` says where each variable's value came from, and the environment beats `env:`."""

from __future__ import annotations

import io
import json
from pathlib import Path

from otel_lifecycle_hooks.cli.dry_run import dry_run

TEMPLATE = """\
name: reviewer-template
env:
  BASE: "http://127.0.0.1:1/default"
  REGION_NAME: "${REGION:-us-east1}"
lifecycle_hooks:
  - name: notify
    on: [session-end]
    action:
      type: http
      url: "${BASE}/${TEMPLATE_NAME}"
      body: '{"agent": "${AGENT_NAME}", "region": "${REGION_NAME}", "code": "${EXIT_CODE}",
        "x": "${FROM_SET}", "gone": "${NOT_SET}", "d": "${ALSO_NOT_SET:-fallback}"}'
"""


def _test(tmp_path: Path, environ: dict[str, str], *sets: str) -> tuple[int, list[dict], str]:
    path = tmp_path / "scion-agent.yaml"
    path.write_text(TEMPLATE)
    out, err = io.StringIO(), io.StringIO()
    code = dry_run(
        [str(path)], "session-end", list(sets), as_json=True, environ=environ, out=out, err=err
    )
    return code, json.loads(out.getvalue()), err.getvalue()


def test_the_environment_overrides_the_template_env_default(tmp_path: Path) -> None:
    code, (hook,), _ = _test(tmp_path, {"BASE": "http://127.0.0.1:2/mine"})
    assert code == 0
    assert hook["request"]["url"] == "http://127.0.0.1:2/mine/reviewer-template"
    assert hook["sources"]["BASE"] == "the environment"
    code, (hook,), _ = _test(tmp_path, {})
    assert hook["request"]["url"] == "http://127.0.0.1:1/default/reviewer-template"
    assert hook["sources"]["BASE"] == "the template's env:"


def test_each_value_says_where_it_came_from(tmp_path: Path) -> None:
    code, (hook,), err = _test(tmp_path, {"BASE": "http://127.0.0.1:2"}, "FROM_SET=given")
    assert code == 0, err
    assert hook["sources"] == {
        "BASE": "the environment",
        "TEMPLATE_NAME": "the template",
        "AGENT_NAME": "example metadata",
        "REGION_NAME": "the template's env:",
        "EXIT_CODE": "example event context",
        "FROM_SET": "--set",
        "NOT_SET": "unset",
        "ALSO_NOT_SET": "its :- default",
    }
    assert hook["request"]["body"]["region"] == "us-east1"
    assert hook["request"]["body"]["d"] == "fallback"
    assert hook["request"]["body"]["x"] == "given"


def test_set_beats_the_environment_and_the_text_output_lists_the_sources(tmp_path: Path) -> None:
    path = tmp_path / "scion-agent.yaml"
    path.write_text(TEMPLATE)
    out, err = io.StringIO(), io.StringIO()
    code = dry_run(
        [str(path)],
        "session-end",
        ["BASE=http://127.0.0.1:3"],
        environ={"BASE": "http://127.0.0.1:2"},
        out=out,
        err=err,
    )
    assert code == 0
    text = out.getvalue()
    assert "POST http://127.0.0.1:3/reviewer-template" in text
    assert "  variables: BASE from --set, TEMPLATE_NAME from the template," in text
