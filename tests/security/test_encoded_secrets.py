"""A secret is redacted in the encodings it travels in, not only as written.

Besides its JSON-escaped and upper-case percent-encoded forms (`tests/test_redact.py`), a known
secret is taken out of any text in its base64 forms (standard and URL-safe, with and without
padding), as part of a longer base64 value at any alignment (`user:secret` as HTTP Basic
sends it, whatever the user name), and percent-encoded with lower-case or mixed-case hex
(`%2f`) or as JavaScript's encodeURIComponent leaves it.
"""

from __future__ import annotations

import base64
import re
from urllib.parse import quote

import pytest

from otel_lifecycle_hooks.redact import REDACTED, Redactor
from tests.security.conftest import HostileWorkspace, wire_line
from tests.supervisor.supervised import wait_until
from tests.support.target_server import TargetServer

# Chosen so that every encoding differs: its base64 holds + and /, its percent-encoding %2F.
SECRET = "tok-9e>>>?\u00ff/x!*7c1"


def _b64(data: str) -> str:
    return base64.b64encode(data.encode()).decode()


def _b64url(data: str) -> str:
    return base64.urlsafe_b64encode(data.encode()).decode()


def _lower_percent(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda match: match.group(0).lower(), text)


def _mixed_percent(text: str) -> str:
    return re.sub(r"%([0-9A-F])([0-9A-F])", lambda m: f"%{m.group(1)}{m.group(2).lower()}", text)


FORMS = {
    "base64": _b64(SECRET),
    "base64, no padding": _b64(SECRET).rstrip("="),
    "base64url": _b64url(SECRET),
    "base64url, no padding": _b64url(SECRET).rstrip("="),
    "percent, lower-case hex": _lower_percent(quote(SECRET, safe="")),
    "percent, mixed-case hex": _mixed_percent(quote(SECRET, safe="")),
    "percent, path (/ kept), lower-case": _lower_percent(quote(SECRET, safe="/")),
    "encodeURIComponent": quote(SECRET, safe="!'()*"),
    "encodeURIComponent, lower-case": _lower_percent(quote(SECRET, safe="!'()*")),
}


def test_the_forms_differ_so_that_each_test_below_tests_something() -> None:
    assert len(set(FORMS.values())) == len(FORMS)
    assert (
        "+" in FORMS["base64"]
        and "/" in FORMS["base64"]
        and "%2f" in FORMS["percent, lower-case hex"]
    )
    # None holds the secret as written: only knowing its encodings can find it.
    assert all(SECRET not in form for form in FORMS.values())


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_each_form_of_a_secret_is_redacted_in_text_headers_urls_and_mappings(form: str) -> None:
    redactor = Redactor([SECRET])

    assert redactor.redact_text(f"got {form} back") == f"got {REDACTED} back"
    assert redactor.redact_headers({"X-Echo": f"v={form}"}) == {"X-Echo": f"v={REDACTED}"}
    assert form not in redactor.redact_url(f"https://api.example/echo?v={form}&page=2")
    assert redactor.redact_mapping({"body": {"list": [form]}}) == {"body": {"list": [REDACTED]}}


@pytest.mark.parametrize("user", ["", "u", "hk", "hook", "agent-7", "x" * 11])
def test_http_basic_credentials_are_redacted_whatever_the_user_name(user: str) -> None:
    # The user name shifts where the password falls in the base64 (three alignments).
    basic = _b64(f"{user}:{SECRET}")
    redactor = Redactor([SECRET])

    shown = redactor.redact_text(f"Authorization: Basic {basic}")

    assert REDACTED in shown
    assert _revealed(shown) is False, shown


@pytest.mark.parametrize("before", range(6))
@pytest.mark.parametrize("after", [0, 1, 2, 5])
def test_a_secret_inside_a_longer_base64_value_is_redacted(before: int, after: int) -> None:
    text = "p" * before + SECRET + "s" * after
    for encoded in (_b64(text), _b64url(text), _b64(text).rstrip("=")):
        shown = Redactor([SECRET]).redact_text(f"token={encoded};")
        assert REDACTED in shown, encoded
        assert _revealed(shown) is False, shown


def _revealed(text: str) -> bool:
    """Whether any base64 run left in `text`, read from any of its first four characters,
    still decodes to the secret's bytes but its first and last (the bits of those two that
    share a character with their neighbours may stay)."""
    core = SECRET.encode()[1:-1]
    for run in re.findall(r"[A-Za-z0-9+/_-]{4,}", text):
        for offset in range(4):
            chunk = run[offset:].replace("-", "+").replace("_", "/")
            if len(chunk) % 4 == 1:
                chunk = chunk[:-1]
            if core in base64.b64decode(chunk + "=" * (-len(chunk) % 4)):
                return True
    return False


def test_ordinary_text_and_unrelated_base64_are_left_alone() -> None:
    redactor = Redactor([SECRET])
    ordinary = f"status=503 body={_b64('service unavailable')} path=/v1/agents%2fx"

    assert redactor.redact_text(ordinary) == ordinary


def test_an_agent_echoing_a_tokens_encodings_does_not_put_them_in_the_trace_file(
    workspace: HostileWorkspace, target: TargetServer
) -> None:
    token = "echoed-token/5b9e+2f"
    template = workspace.template(
        "  - name: report\n"
        "    on: [tool-end]\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{target.url("/report")}"\n'
        "      auth: {type: bearer-token, token_env: REGISTRY_TOKEN}\n"
    )
    encodings = [
        _b64(token),
        _b64url(token).rstrip("="),
        f"Basic {_b64('ci:' + token)}",
        _lower_percent(quote(token, safe="")),
    ]
    echoes = [
        {
            "v": 1,
            "kind": "event",
            "event": "tool-end",
            "fields": {"TOOL_NAME": "Bash", "ERROR_MESSAGE": " ".join(encodings)},
        },
        {"v": 1, "kind": "event", "event": "agent-end", "fields": {"ASSISTANT_TEXT": encodings[2]}},
    ]
    ready = workspace.root / "ready"
    run = workspace.start(
        template,
        workspace.hostile_command(sends=[wire_line(e) for e in echoes], ready_file=ready),
        env={"REGISTRY_TOKEN": token},
    )
    [request] = target.wait_for(1, timeout=30)
    assert request.headers["authorization"] == f"Bearer {token}"  # the token was really used
    wait_until(ready.exists, what="the agent to finish")
    run.signal(15)
    assert run.wait() == 0
    [trace_file] = workspace.trace_dir.glob("*.jsonl")
    text = trace_file.read_text()
    assert "agent.lifecycle.tool_end" in text and "agent.lifecycle.agent_end" in text
    assert REDACTED in text
    for encoded in encodings:
        assert encoded.removeprefix("Basic ") not in text, encoded
