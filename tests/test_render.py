"""Context-safe rendering: no value can change the shape of a URL, header, body or argv."""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import parse_qs, unquote, urlsplit

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_lifecycle_hooks.render import (
    RenderedCommand,
    RenderedRequest,
    RenderError,
    hook_id_header,
    is_json_body,
    render_action,
    render_argv,
    render_body,
    render_env,
    render_headers,
    render_url,
)
from otel_lifecycle_hooks.template.model import HookAction
from otel_lifecycle_hooks.variables import Variables

NASTY_TEXT = 'done"}, "x": "1\\ back\\\\slash\nnew line\ttab é 漢字 🎉 \u2028 \x00 end'


def _event(**values: str) -> Variables:
    return Variables(event=values)


# --- JSON bodies -------------------------------------------------------------------------


def test_agent_text_lands_in_a_json_body_as_exactly_that_string() -> None:
    template = '{"text": "${ASSISTANT_TEXT}", "agent": "${AGENT_NAME}"}'
    variables = Variables(event={"ASSISTANT_TEXT": NASTY_TEXT}, metadata={"AGENT_NAME": "a1"})
    body = json.loads(render_body(template, variables).decode("utf-8"))
    assert body == {"text": NASTY_TEXT, "agent": "a1"}


def test_a_value_inside_a_longer_string_keeps_the_surrounding_text() -> None:
    template = '{"text": "Agent ${AGENT_NAME} said \\"${ASSISTANT_TEXT}\\" (exit ${EXIT_CODE})"}'
    variables = Variables(
        event={"ASSISTANT_TEXT": '"}', "EXIT_CODE": "0"}, metadata={"AGENT_NAME": "a1"}
    )
    body = json.loads(render_body(template, variables))
    assert body == {"text": 'Agent a1 said ""}" (exit 0)'}


def test_values_outside_strings_become_json_scalars_or_quoted_strings() -> None:
    template = (
        '{"code": ${EXIT_CODE}, "ok": ${OK}, "none": ${NONE}, "text": ${TOOL_NAME}, "x": ${UNSET}}'
    )
    variables = _event(EXIT_CODE="-1.5e3", OK="true", NONE="null", TOOL_NAME='"}, "y": 1')
    body = json.loads(render_body(template, variables))
    assert body == {"code": -1500.0, "ok": True, "none": None, "text": '"}, "y": 1', "x": ""}


def test_a_value_that_only_resembles_a_number_is_quoted() -> None:
    body = json.loads(render_body("[${A}, ${B}, ${C}]", _event(A="01", B=" 1", C="NaN")))
    assert body == ["01", " 1", "NaN"]


def test_escaped_quotes_in_the_template_do_not_confuse_the_scanner() -> None:
    template = '{"a": "quote \\" still inside ${V}", "b": ${V}}'
    body = json.loads(render_body(template, _event(V="v")))
    assert body == {"a": 'quote " still inside v', "b": "v"}


def test_a_lone_surrogate_still_renders_valid_json() -> None:
    body = render_body('{"t": "${T}"}', _event(T="a\ud800b"))
    assert json.loads(body) == {"t": "a\ud800b"}


def test_the_content_type_or_the_first_character_makes_a_body_json() -> None:
    assert is_json_body('  {"a": 1}', None)
    assert is_json_body("[1]", "text/plain")
    assert is_json_body("${A}", "application/cloudevents+json")
    assert not is_json_body("text ${A}", None)


def test_a_plain_text_body_is_plain_substitution() -> None:
    body = render_body(
        'Agent ${AGENT_NAME} said "${T}"',
        Variables(event={"T": "x\ny"}, metadata={"AGENT_NAME": "a1"}),
    )
    assert body == b'Agent a1 said "x\ny"'


def test_a_form_body_form_encodes_each_value() -> None:
    body = render_body(
        "name=${AGENT_NAME}&text=${T}",
        Variables(event={"T": "a&b=c d"}, metadata={"AGENT_NAME": "a1"}),
        content_type="application/x-www-form-urlencoded",
    )
    assert parse_qs(body.decode()) == {"name": ["a1"], "text": ["a&b=c d"]}


@given(st.text(), st.text())
def test_any_text_renders_to_parseable_json_holding_exactly_the_value(
    inside: str, outside: str
) -> None:
    template = '{"inside": "before ${A} after", "outside": ${B}, "list": [${A}, "${B}"]}'
    body = json.loads(render_body(template, _event(A=inside, B=outside)))
    assert body["inside"] == f"before {inside} after"
    assert body["list"][0] == inside or json.loads(inside) == body["list"][0]
    assert body["list"][1] == outside
    if not isinstance(body["outside"], str):
        assert json.loads(outside) == body["outside"]  # it was a JSON scalar
    else:
        assert body["outside"] == outside


# --- URLs --------------------------------------------------------------------------------


def test_a_tool_name_is_one_encoded_path_segment() -> None:
    url = render_url(
        "https://api.example.com/tools/${TOOL_NAME}/runs", _event(TOOL_NAME="../a?b#c")
    )
    assert url == "https://api.example.com/tools/..%2Fa%3Fb%23c/runs"
    parts = urlsplit(url)
    assert parts.path.split("/") == ["", "tools", "..%2Fa%3Fb%23c", "runs"]
    assert unquote(parts.path.split("/")[2]) == "../a?b#c"
    assert (parts.query, parts.fragment) == ("", "")


def test_a_dot_segment_value_cannot_climb_a_level() -> None:
    url = render_url("https://api.example.com/a/${X}/b", _event(X=".."))
    assert url == "https://api.example.com/a/%2E%2E/b"
    # httpx normalises real dot segments away; an encoded one must survive.
    assert httpx.URL(url).raw_path == b"/a/%2E%2E/b"


def test_a_query_value_is_one_encoded_component() -> None:
    url = render_url("https://api.example.com/s?q=${T}&n=1", _event(T="x&n=2#frag"))
    assert parse_qs(urlsplit(url).query) == {"q": ["x&n=2#frag"], "n": ["1"]}
    assert urlsplit(url).fragment == ""


def test_configuration_values_keep_their_slashes_in_the_path() -> None:
    variables = Variables(
        metadata={"AGENT_SLUG": "my/agent"},
        template_env={"PARENT": "projects/p/locations/us central1"},
    )
    url = render_url("https://r.example.com/v1/${PARENT}/services/${AGENT_SLUG}", variables)
    assert url == "https://r.example.com/v1/projects/p/locations/us%20central1/services/my%2Fagent"


def test_configuration_carrying_an_agent_value_is_encoded_like_one() -> None:
    variables = Variables(event={"TOOL_NAME": "a/b"}, template_env={"PART": "x/${TOOL_NAME}"})
    url = render_url("https://api.example.com/${PART}", variables)
    assert url == "https://api.example.com/x%2Fa%2Fb"


def test_a_variable_starting_the_url_is_inserted_verbatim() -> None:
    variables = Variables(
        event={"TOOL_NAME": "t/1"},
        environ={"SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/XyZ?x=1"},
    )
    assert render_url("${SLACK_WEBHOOK_URL}", variables) == (
        "https://hooks.slack.com/services/T0/B0/XyZ?x=1"
    )
    assert render_url("${SLACK_WEBHOOK_URL}&tool=${TOOL_NAME}", variables).endswith("&tool=t%2F1")


@pytest.mark.parametrize(
    "value",
    [
        "",
        "ftp://example.com/x",
        "javascript:alert(1)",
        "/relative/path",
        "https://example.com/a b",
        "https://example.com/\r\nX: 1",
        "https://",
    ],
)
def test_a_url_variable_that_is_not_an_absolute_http_url_is_refused(value: str) -> None:
    with pytest.raises(RenderError) as caught:
        render_url("${HOOK_URL}", Variables(environ={"HOOK_URL": value}))
    if value:
        assert value not in str(caught.value)  # it may be a secret


def test_a_host_variable_must_be_a_host_name() -> None:
    assert (
        render_url("https://${HOST}/v1", Variables(environ={"HOST": "registry.internal:8443"}))
        == "https://registry.internal:8443/v1"
    )
    for hostile in ("evil.example.com/x?", "user@evil.example.com", "a#b"):
        with pytest.raises(RenderError, match="host"):
            render_url("https://${HOST}/v1", _event(HOST=hostile))


@given(st.text())
def test_any_value_in_a_path_segment_round_trips_and_adds_no_structure(value: str) -> None:
    url = render_url("https://api.example.com/tools/${TOOL_NAME}/run?x=1", _event(TOOL_NAME=value))
    parts = urlsplit(url)
    segments = parts.path.split("/")
    assert len(segments) == 4
    assert segments[:2] == ["", "tools"] and segments[3] == "run"
    assert unquote(segments[2], errors="surrogatepass") == value
    assert segments[2] not in (".", "..")
    assert (parts.netloc, parts.query, parts.fragment) == ("api.example.com", "x=1", "")


def test_a_lone_surrogate_in_a_url_value_is_replaced_not_a_crash() -> None:
    url = render_url("https://api.example.com/t/${T}", _event(T="a\ud800b"))
    assert url == "https://api.example.com/t/a%3Fb"


# --- headers -----------------------------------------------------------------------------


@pytest.mark.parametrize("breaker", ["\r\n", "\n", "\r", "\x00"])
def test_a_line_break_in_a_header_value_is_refused_never_an_extra_header(breaker: str) -> None:
    variables = _event(TOOL_NAME=f"bash{breaker}X-Injected: yes")
    with pytest.raises(RenderError) as caught:
        render_headers({"X-Tool": "${TOOL_NAME}"}, variables)
    assert "X-Tool" in str(caught.value) and "TOOL_NAME" in str(caught.value)
    assert "X-Injected" not in str(caught.value)


def test_header_values_are_substituted() -> None:
    variables = Variables(metadata={"AGENT_ID": "id-1"}, environ={"TOKEN": "t0k"})
    headers = render_headers(
        {"Authorization": "Bearer ${TOKEN}", "X-Agent": "${AGENT_ID}"}, variables
    )
    assert headers == {"Authorization": "Bearer t0k", "X-Agent": "id-1"}


@given(st.text())
def test_any_header_value_renders_without_line_breaks_or_is_refused(value: str) -> None:
    try:
        headers = render_headers({"X-Tool": "tool ${TOOL_NAME}"}, _event(TOOL_NAME=value))
    except RenderError:
        assert any(c in value for c in "\r\n\x00")
    else:
        rendered = headers["X-Tool"]
        assert all(" " <= char <= "~" or char == "\t" for char in rendered)
        if value.isascii() and value.isprintable():
            assert rendered == f"tool {value}"


def test_non_ascii_in_a_header_is_percent_encoded_so_it_can_be_sent() -> None:
    headers = render_headers(
        {"X-Agent": "${AGENT_NAME}"}, Variables(metadata={"AGENT_NAME": "Zoë"})
    )
    assert headers == {"X-Agent": "Zo%C3%AB"}
    httpx.Request("GET", "http://127.0.0.1/", headers=headers)  # would raise on non-ASCII


def test_the_hook_id_header_joins_agent_hook_event_and_timestamp() -> None:
    variables = Variables(event={"TIMESTAMP": "2026-05-01T12:00:00Z"}, metadata={"AGENT_ID": "a-1"})
    assert hook_id_header(variables, "register", "post-start") == (
        "X-Scion-Hook-ID",
        "a-1:register:post-start:2026-05-01T12:00:00Z",
    )


# --- scripts -----------------------------------------------------------------------------


def test_each_command_element_stays_one_argv_element() -> None:
    variables = Variables(environ={"TOOL": "x; rm -rf / && echo $(id) `id` 'q' \"q\"\n*"})
    argv = render_argv(["${TOOL}-bin", "--tool", "${TOOL}", "${UNSET}"], variables)
    assert argv == (variables.get("TOOL") + "-bin", "--tool", variables.get("TOOL"), "")


def test_an_agent_value_in_a_command_is_refused_unless_the_hook_opts_in() -> None:
    with pytest.raises(RenderError, match=r"command\[1\]: \$\{TOOL_NAME\}.*env:"):
        render_argv(["/opt/notify", "${TOOL_NAME}"], _event(TOOL_NAME="Bash"))


def test_a_script_receives_a_hostile_value_as_exactly_one_argument() -> None:
    value = "a b; echo pwned > x && $(id) `id` \"'\n*"
    command = [
        sys.executable,
        "-c",
        "import json, sys; print(json.dumps(sys.argv[1:]))",
        "--",
        "${TOOL_NAME}",
        "after",
    ]
    argv = render_argv(command, _event(TOOL_NAME=value), agent_values_in_args=True)
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(completed.stdout) == ["--", value, "after"]


def test_nul_in_an_argument_or_env_value_is_refused() -> None:
    with pytest.raises(RenderError, match=r"command\[1\]"):
        render_argv(["prog", "${T}"], _event(T="a\x00b"))
    with pytest.raises(RenderError, match="env NAME"):
        render_env({"NAME": "${T}"}, _event(T="a\x00b"))


def test_an_empty_program_name_is_refused() -> None:
    with pytest.raises(RenderError, match="empty program"):
        render_argv(["${SCRIPT}"], Variables())


def test_env_values_are_substituted_and_names_kept() -> None:
    env = render_env(
        {"SERVICE_ACCOUNT": "${SA}", "TEXT": "${T}"},
        Variables(event={"T": "multi\nline"}, environ={"SA": "sa@p.iam"}),
    )
    assert env == {"SERVICE_ACCOUNT": "sa@p.iam", "TEXT": "multi\nline"}


# --- whole actions -----------------------------------------------------------------------


def test_a_webhook_is_a_json_post() -> None:
    action = HookAction(
        type="webhook",
        method="PUT",
        url="${SLACK_WEBHOOK_URL}",
        body='{"text": "Agent ${AGENT_NAME} ended (exit: ${EXIT_CODE})"}',
    )
    variables = Variables(
        event={"EXIT_CODE": "3"},
        metadata={"AGENT_NAME": "a1"},
        environ={"SLACK_WEBHOOK_URL": "https://hooks.example.com/T/B/X"},
    )
    rendered = render_action(action, variables)
    assert isinstance(rendered, RenderedRequest)
    assert (rendered.method, rendered.url) == ("POST", "https://hooks.example.com/T/B/X")
    assert rendered.headers == {"Content-Type": "application/json"}
    assert json.loads(rendered.body or b"") == {"text": "Agent a1 ended (exit: 3)"}


def test_an_http_action_keeps_its_own_content_type_and_method() -> None:
    action = HookAction(
        type="http",
        method="patch",
        url="https://api.example.com/x",
        headers={"content-type": "application/merge-patch+json"},
        body='{"a": "${T}"}',
    )
    rendered = render_action(action, _event(T='"'))
    assert isinstance(rendered, RenderedRequest)
    assert rendered.method == "PATCH"
    assert rendered.headers == {"content-type": "application/merge-patch+json"}
    assert json.loads(rendered.body or b"") == {"a": '"'}


def test_a_request_without_a_body_has_none() -> None:
    action = HookAction(type="http", method="DELETE", url="https://api.example.com/s/${AGENT_SLUG}")
    rendered = render_action(action, Variables(metadata={"AGENT_SLUG": "a1"}))
    assert rendered == RenderedRequest("DELETE", "https://api.example.com/s/a1", {}, None)


def test_a_script_action_renders_argv_env_and_takes_stdin() -> None:
    action = HookAction(
        type="script",
        command=("/usr/local/bin/revoke.sh", "${AGENT_SLUG}"),
        env={"SERVICE_ACCOUNT": "${SA}"},
    )
    rendered = render_action(
        action, Variables(metadata={"AGENT_SLUG": "a1"}, environ={"SA": "sa"}), stdin=b"{}"
    )
    assert rendered == RenderedCommand(
        ("/usr/local/bin/revoke.sh", "a1"), {"SERVICE_ACCOUNT": "sa"}, b"{}"
    )


def test_a_rendered_request_arrives_with_the_shape_the_template_gave_it(target_server) -> None:
    hostile = '../x?y=1#z"}, "evil": "'
    action = HookAction(
        type="http",
        method="POST",
        url=target_server.url("/tools/${TOOL_NAME}/done?by=${TOOL_NAME}"),
        headers={"X-Tool": "${TOOL_NAME}"},
        body='{"tool": "${TOOL_NAME}"}',
    )
    rendered = render_action(action, _event(TOOL_NAME=hostile))
    assert isinstance(rendered, RenderedRequest)
    with httpx.Client() as client:
        response = client.request(
            rendered.method,
            rendered.url,
            headers=dict(rendered.headers),
            content=rendered.body,
            timeout=5,
        )
    assert response.status_code == 200
    received = target_server.wait_for(1)[0]
    path, _, query = received.path.partition("?")
    assert [unquote(s) for s in path.split("/")] == ["", "tools", hostile, "done"]
    assert parse_qs(query) == {"by": [hostile]}
    assert received.headers["x-tool"] == hostile
    assert json.loads(received.body) == {"tool": hostile}
