"""Context-safe rendering of an action's url, headers, body, argv and env.

Every `${VAR}` is replaced in a way that suits where it stands, so that no value an agent
controls (a tool name, an assistant's text, a captured response) can change a request's shape:

URL
    The template's literal text stays as written. A value is percent-encoded as one path segment
    or query component (`quote(value, safe="")`): TOOL_NAME `../a?b#c` becomes `..%2Fa%3Fb%23c`,
    and a value that is exactly `.` or `..` has its dots encoded too. Values from the template's
    `env:` or the process environment are the author's or operator's own configuration, so they
    keep `/` (`AGENT_REGISTRY_PARENT: projects/p/locations/l` spans several segments); everything
    else in them is still encoded.
    A variable at the very start of the URL is its scheme and host (`url: "${SLACK_WEBHOOK_URL}"`
    or `"${API_BASE}/v1/items"`): it is inserted verbatim. A variable inside the host
    (`https://${REGISTRY_HOST}/v1`) must be a host name, optionally with a port. In either
    place, a value the agent reported (reported.py) is refused. Whatever the
    template, the result must be an absolute http(s) URL.
Headers
    Plain substitution; a value holding CR, LF or NUL is refused, so it can never add a header.
    HTTP header values are ASCII: other characters (non-ASCII, controls) are percent-encoded
    as UTF-8 rather than failing at send time.
Body
    A JSON body (the Content-Type says json, or the template starts with `{` or `[`) is scanned
    lexically: a variable inside a JSON string literal is inserted JSON-string-escaped; one outside
    any string is inserted as a number, `true`, `false` or `null` when it is one, else as a quoted
    JSON string. A form body (`application/x-www-form-urlencoded`) gets form-encoded values.
    Any other body is plain substitution. Bodies are UTF-8 bytes.
Script
    Each `command` element and each `env` value is plain substitution and stays exactly one argv
    element or one environment value; it is never shell text. NUL is refused.

`RenderError` messages name the field and the variable, never the value (it may be a secret).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple, Protocol
from urllib.parse import quote, quote_plus, urlsplit

from .errors import LifecycleHooksError
from .reported import AGENT_CONTROLLED
from .variables import Reference, Resolved, Variables, parse_template

HOOK_ID_HEADER = "X-Scion-Hook-ID"
JSON_CONTENT_TYPE = "application/json"
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"

_HEADER_BREAKERS = ("\r", "\n", "\0")
_NO_ENV: Mapping[str, str] = MappingProxyType({})


_JSON_SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
# Host name, IPv4, [IPv6] and :port characters; nothing that could end the authority.
_HOST_TEXT = re.compile(r"[A-Za-z0-9.\-:\[\]]*")
_URL_BREAKERS = re.compile(r"[\x00-\x20\x7f]")


# What json.dumps(value, ensure_ascii=False) uses, made once: dumps builds one per call
# (1.1 us a value against 0.17 us, python -m timeit), for every value a body renders.
_JSON_UNICODE = json.JSONEncoder(ensure_ascii=False)


class RenderedRequest(NamedTuple):
    """An HTTP request exactly as it will be sent (before auth headers are added)."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None = None


class RenderedCommand(NamedTuple):
    """A script invocation: argv (no shell), the environment overlay, and stdin bytes."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = _NO_ENV
    stdin: bytes = b""


class RenderableAction(Protocol):
    """What `render_action` reads of an action (`template.model.HookAction` is one): rendering
    knows the shape of a request or a command, not how a template is read."""

    @property
    def type(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def url(self) -> str | None: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def body(self) -> str | None: ...
    @property
    def command(self) -> tuple[str, ...]: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def agent_values_in_args(self) -> bool: ...


class RenderError(ValueError, LifecycleHooksError):
    """A rendered value would change the request's shape (e.g. CR/LF in a header)."""


# Given a reference and what it resolved to (None: unresolved), the text to insert.
_Encoder = Callable[[Reference, Resolved | None], str]


def _substitute(template: str, variables: Variables, encode: _Encoder) -> str:
    parts: list[str] = []
    for piece in parse_template(template):
        if isinstance(piece, str):
            parts.append(piece)
        else:
            parts.append(encode(piece, variables.resolve_reference(piece)))
    return "".join(parts)


# --- URL ---------------------------------------------------------------------------------


def render_url(template: str, variables: Variables) -> str:
    """The URL with each value encoded for where it stands (see the module docstring)."""
    rendered = ""
    for index, piece in enumerate(parse_template(template)):
        if isinstance(piece, str):
            rendered += piece
            continue
        resolved = variables.resolve_reference(piece)
        value = "" if resolved is None else resolved.value
        if index == 0:
            _refuse_agent_origin(piece, resolved)
            if _URL_BREAKERS.search(value):
                raise RenderError(f"url: ${{{piece.text}}} holds whitespace or a control character")
            rendered += value
        else:
            rendered += _encode_url_value(piece, value, rendered, resolved)
    _check_absolute_http_url(rendered, template)
    return rendered


def _encode_url_value(
    reference: Reference, value: str, rendered_before: str, resolved: Resolved | None
) -> str:
    scheme_end = rendered_before.find("://")
    if scheme_end < 0:
        raise RenderError(
            f"url: ${{{reference.text}}} stands inside the scheme; a variable may only start"
            " the URL, name the host, or stand in its path, query or fragment"
        )
    after_scheme = rendered_before[scheme_end + 3 :]
    if not any(mark in after_scheme for mark in "/?#"):
        _refuse_agent_origin(reference, resolved)
        if not _HOST_TEXT.fullmatch(value):
            raise RenderError(
                f"url: ${{{reference.text}}} stands in the host but is not a host name"
            )
        return value
    in_path = not any(mark in after_scheme for mark in "?#")
    if in_path and resolved is not None and resolved.trusted:
        return quote(value, safe="/", errors="replace")
    if value in (".", ".."):
        return value.replace(".", "%2E")  # would otherwise climb a path level
    return quote(value, safe="", errors="replace")


def _refuse_agent_origin(reference: Reference, resolved: Resolved | None) -> None:
    """A value the agent reported never forms a URL's scheme, userinfo, host or port
    (validation refuses such templates; this holds for any template, whatever built it)."""
    if resolved is not None and resolved.layer == "event" and reference.name in AGENT_CONTROLLED:
        raise RenderError(
            f"url: ${{{reference.text}}} is chosen by the agent and may not form the URL's "
            "scheme or host"
        )


def _check_absolute_http_url(url: str, template: str) -> None:
    starts_with_variable = template.startswith("${")
    where = " (check the variable it starts with)" if starts_with_variable else ""
    if _URL_BREAKERS.search(url):
        raise RenderError(f"url: holds whitespace or a control character{where}")
    authority = _literal_authority(template)
    if authority is not None and url.startswith(authority):
        # Scheme, host and port are all in the template's own text, already found good:
        # what follows it cannot change them.
        return
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        raise RenderError(f"url: is not a valid URL{where}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise RenderError(f"url: does not render to an absolute http(s) URL{where}")


@functools.lru_cache(maxsize=1024)
def _literal_authority(template: str) -> str | None:
    """The template's text before its first variable, when that holds a whole absolute
    http(s) URL authority (ended by `/`, `?` or `#`) with a host and a valid port; else None.
    Checked once per template: every rendering of it begins with this text."""
    literal = template.partition("${")[0]
    _, separator, rest = literal.partition("://")
    if not separator or not any(mark in rest for mark in "/?#") or _URL_BREAKERS.search(literal):
        return None
    try:
        parts = urlsplit(literal)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        return None
    return literal


# --- headers -----------------------------------------------------------------------------


def render_headers(headers: Mapping[str, str], variables: Variables) -> dict[str, str]:
    """Header values with plain substitution; CR, LF or NUL in a value raises `RenderError`."""
    rendered: dict[str, str] = {}
    for name, template in headers.items():

        def encode(reference: Reference, resolved: Resolved | None, name: str = name) -> str:
            value = "" if resolved is None else resolved.value
            if any(breaker in value for breaker in _HEADER_BREAKERS):
                raise RenderError(
                    f"header {name}: ${{{reference.text}}} holds a line break or NUL,"
                    " which could start another header"
                )
            return value

        value = _substitute(template, variables, encode)
        if any(breaker in value for breaker in _HEADER_BREAKERS):
            raise RenderError(f"header {name}: holds a line break or NUL")
        rendered[name] = _ascii_header_text(value)
    return rendered


def _ascii_header_text(value: str) -> str:
    if value.isascii() and value.isprintable():
        return value
    return "".join(
        char if " " <= char <= "~" or char == "\t" else quote(char, safe="", errors="replace")
        for char in value
    )


def hook_id_header(variables: Variables, hook_name: str, event: str) -> tuple[str, str]:
    """`X-Scion-Hook-ID: ${AGENT_ID}:${HOOK_NAME}:${EVENT}:${TIMESTAMP}`, the same on retries."""
    agent_id = variables.get("AGENT_ID") or ""
    timestamp = variables.get("TIMESTAMP") or ""
    value = f"{agent_id}:{hook_name}:{event}:{timestamp}"
    if any(breaker in value for breaker in _HEADER_BREAKERS):
        raise RenderError(f"header {HOOK_ID_HEADER}: holds a line break or NUL")
    return HOOK_ID_HEADER, value


# --- body --------------------------------------------------------------------------------


def is_json_body(template: str, content_type: str | None) -> bool:
    """True when the Content-Type says json, or the template text starts with `{` or `[`."""
    if content_type is not None and "json" in content_type.lower():
        return True
    return template.lstrip().startswith(("{", "["))


def json_string_state(text: str, in_string: bool, escaped: bool) -> tuple[bool, bool]:
    """Whether a JSON text continued by `text` ends inside a string, and after a backslash
    there, given the same two states before it."""
    for char in text:
        if escaped:
            escaped = False
        elif in_string and char == "\\":
            escaped = True
        elif char == '"':
            in_string = not in_string
    return in_string, escaped


def render_body(template: str, variables: Variables, *, content_type: str | None = None) -> bytes:
    """The body as UTF-8 bytes, each value encoded for its JSON, form or text context."""
    if is_json_body(template, content_type):
        return _render_json(template, variables).encode("utf-8")
    if content_type is not None and content_type.lower().startswith(FORM_CONTENT_TYPE):
        text = _substitute(template, variables, lambda _, r: quote_plus(_value(r), safe=""))
    else:
        text = _substitute(template, variables, lambda _, r: _value(r))
    # A lone surrogate (possible in text decoded from JSON) must not crash the send.
    return text.encode("utf-8", "replace")


@functools.lru_cache(maxsize=1024)
def _json_pieces(template: str) -> tuple[tuple[str | Reference, bool], ...]:
    """The template's pieces, each with whether it stands inside a JSON string. Only the
    template's own text decides that (inserted values are escaped and change nothing), so
    it is worked out once per template, not on every rendering."""
    pieces: list[tuple[str | Reference, bool]] = []
    in_string = False
    escaped = False
    for piece in parse_template(template):
        pieces.append((piece, in_string))
        if isinstance(piece, str):
            in_string, escaped = json_string_state(piece, in_string, escaped)
    return tuple(pieces)


def _render_json(template: str, variables: Variables) -> str:
    parts: list[str] = []
    for piece, in_string in _json_pieces(template):
        if isinstance(piece, str):
            parts.append(piece)
            continue
        value = _value(variables.resolve_reference(piece))
        if in_string:
            parts.append(_json_string(value)[1:-1])
        elif _JSON_SCALAR.fullmatch(value):
            parts.append(value)
        else:
            parts.append(_json_string(value))
    return "".join(parts)


def _json_string(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value)  # \u escapes keep a lone surrogate valid JSON
    return _JSON_UNICODE.encode(value)


def _value(resolved: Resolved | None) -> str:
    return "" if resolved is None else resolved.value


# --- script ------------------------------------------------------------------------------


def render_argv(
    command: Sequence[str], variables: Variables, *, agent_values_in_args: bool = False
) -> tuple[str, ...]:
    """Each element substituted; each stays one argv element. NUL raises `RenderError`.

    A value the agent chose (a reported field, a captured response, or an `env:` entry made
    of one) is refused in any element, whatever built the template (validation refuses such
    templates): it reaches a script through its environment and stdin only. With
    `agent_values_in_args`, it may stand in an argument, but never in the program
    (`command[0]`) nor at the start of an element before a literal `--`, where a value
    starting with "-" would be read as an option.
    """
    argv: list[str] = []
    options_ended = False
    for index, element in enumerate(command):
        field_name = f"command[{index}]"
        from_agent = False
        for piece in parse_template(element):
            if not isinstance(piece, Reference):
                continue
            chosen = _agent_origin(piece, variables)
            if chosen is None:
                continue
            from_agent = True
            if not agent_values_in_args or index == 0:
                raise RenderError(
                    f"{field_name}: ${{{piece.text}}} takes its value from ${{{chosen}}}, which "
                    "the agent (or a remote endpoint) chooses; pass it through the script's "
                    "env: and read it there, or from the JSON on its stdin"
                )
        rendered = _substitute_no_nul(element, variables, field_name)
        if from_agent and not options_ended and rendered.startswith("-"):
            raise RenderError(
                f"{field_name}: renders to an option (it starts with '-') from a value the "
                'agent chose; put agent values after a literal "--"'
            )
        if element == "--":
            options_ended = True
        argv.append(rendered)
    if not argv or not argv[0]:
        raise RenderError("command[0]: renders to an empty program name")
    return tuple(argv)


def _agent_origin(reference: Reference, variables: Variables) -> str | None:
    """The name of the agent-chosen value `reference` renders from, if any: a reported field
    (reported.py) from the event or metadata, or a captured response."""
    for layer, name in variables.origins(reference):
        if layer == "captured" or (layer in ("event", "metadata") and name in AGENT_CONTROLLED):
            return name
    return None


def render_env(env: Mapping[str, str], variables: Variables) -> dict[str, str]:
    """Each environment value substituted; NUL raises `RenderError`."""
    return {
        name: _substitute_no_nul(template, variables, f"env {name}")
        for name, template in env.items()
    }


def _substitute_no_nul(template: str, variables: Variables, field_name: str) -> str:
    def encode(reference: Reference, resolved: Resolved | None) -> str:
        value = _value(resolved)
        if "\0" in value:
            raise RenderError(f"{field_name}: ${{{reference.text}}} holds a NUL character")
        return value

    return _substitute(template, variables, encode)


# --- actions -----------------------------------------------------------------------------


def render_action(
    action: RenderableAction, variables: Variables, *, stdin: bytes = b""
) -> RenderedRequest | RenderedCommand:
    """The request or command `action` makes with these variables.

    Webhooks are always POST. A JSON body gets `Content-Type: application/json` when the template
    sets no Content-Type. Auth, `traceparent` and `X-Scion-Hook-ID` are added by the sender.
    """
    if action.type == "script":
        return RenderedCommand(
            argv=render_argv(
                action.command, variables, agent_values_in_args=action.agent_values_in_args
            ),
            env=render_env(action.env, variables),
            stdin=stdin,
        )
    method = "POST" if action.type == "webhook" else action.method.upper()
    url = render_url(action.url or "", variables)
    headers = render_headers(action.headers, variables)
    body: bytes | None = None
    if action.body:
        content_type = next(
            (value for name, value in headers.items() if name.lower() == "content-type"), None
        )
        body = render_body(action.body, variables, content_type=content_type)
        if content_type is None and is_json_body(action.body, None):
            headers["Content-Type"] = JSON_CONTENT_TYPE
    return RenderedRequest(method=method, url=url, headers=headers, body=body)
