"""google-auth is the `[gcp]` extra: without it, `auth: gcp-default` and `gcp-service-account`
fail each attempt with one line naming the extra, and `validate` warns at the hook's auth."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from otel_lifecycle_hooks.auth import AuthError, Credentials
from otel_lifecycle_hooks.auth.errors import CREDENTIALS_UNAVAILABLE
from otel_lifecycle_hooks.cli.main import main
from otel_lifecycle_hooks.template.checks import template_warnings
from otel_lifecycle_hooks.template.loader import load_templates
from otel_lifecycle_hooks.template.model import AuthSpec

INSTALL = "pip install 'otel-lifecycle-hooks[gcp]'"

TEMPLATE = """\
lifecycle_hooks:
  - name: register
    on: [post-start]
    action:
      type: http
      url: "https://run.example.com/agents"
      auth:
        type: gcp-default
  - name: keyed
    on: [post-start]
    action: {type: http, url: "https://run.example.com/x", auth: {type: gcp-service-account}}
  - name: plain
    on: [post-start]
    action: {type: http, url: "https://run.example.com/y", auth: {type: bearer-token, token_env: T}}
"""


@pytest.fixture
def without_google_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package as installed without the `[gcp]` extra: google.auth cannot be imported."""
    for name in [n for n in sys.modules if n == "google" or n.startswith("google.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "google", None)


@pytest.mark.parametrize("strategy", ["gcp-default", "gcp-service-account"])
def test_a_gcp_hook_without_the_extra_fails_with_one_line_naming_it(
    without_google_auth: None, strategy: str
) -> None:
    credentials = Credentials()
    with pytest.raises(AuthError) as raised:
        auth = AuthSpec(type=strategy)  # type: ignore[arg-type]
        credentials.headers_for(auth, "https://run.example.com/", {})
    message = str(raised.value)
    assert "\n" not in message
    assert message == f"auth: {strategy} needs the 'gcp' extra, which is not installed: {INSTALL}"
    assert raised.value.error_type == CREDENTIALS_UNAVAILABLE


def test_validate_warns_at_each_gcp_hooks_auth_type(
    without_google_auth: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scion-agent.yaml"
    path.write_text(TEMPLATE)
    warnings = template_warnings(load_templates([path]))
    assert [(w.hook, w.field, w.position.line) for w in warnings] == [
        ("register", "action.auth.type", 8),
        ("keyed", "action.auth.type", 11),
    ]
    assert all(INSTALL in w.message for w in warnings)

    assert main(["validate", str(path)]) == 0  # the template is valid; this install is not
    err = capsys.readouterr().err
    assert f"{path}:8:" in err and err.count(INSTALL) == 2, err


def test_with_the_extra_installed_nothing_is_said(tmp_path: Path) -> None:
    path = tmp_path / "scion-agent.yaml"
    path.write_text(TEMPLATE)
    assert template_warnings(load_templates([path])) == []
