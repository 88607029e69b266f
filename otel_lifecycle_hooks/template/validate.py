"""The rules of `lifecycle_hooks:`: every entry checked, every problem collected.

This module knows nothing of YAML: it reads `Located` values (a value and where it was
written), which the loader builds from the parsed file. Each rule reports a `Problem` that
says where, which hook, which field, what was found and what would be valid; a hook is built
only when none of its rules failed.

Messages never repeat a value that may be a secret (URLs, header values, token names).
"""

from __future__ import annotations

import re
import shlex
import urllib.parse
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..events import ALL_EVENTS, DEBOUNCEABLE_EVENTS, RUNTIME_EVENTS, TEMPLATE_EVENTS
from ..loopback import LOOPBACK_FORMS, ambiguous_host_reason, is_loopback_host
from ..variables import captured_variable_names, referenced_names
from .checks import json_body_problem, reference_problems, turned_off, turns_off_only
from .durations import DurationError, parse_duration
from .model import (
    ACTION_TYPES,
    AUTH_TYPES,
    DEFAULT_API_KEY_HEADER,
    DEFAULT_HTTP_TIMEOUT,
    DEFAULT_SCRIPT_TIMEOUT,
    ERROR_POLICIES,
    MAX_RETRY_HORIZON,
    MAX_TIMEOUT,
    RETRIED_EVENTS,
    RUN_AS,
    AuthSpec,
    HookAction,
    HookSpec,
    Position,
    RateLimit,
    Template,
)
from .problems import (
    Located,
    Problem,
    describe,
    did_you_mean,
    field_positions,
    offset_position,
    quote,
)

if TYPE_CHECKING:
    from .condition import Condition

HOOK_KEYS: tuple[str, ...] = (
    "name",
    "on",
    "action",
    "on_error",
    "timeout",
    "blocking",
    "debounce",
    "condition",
    "enabled",
    "rate_limit",
    "retry",
)
RETRY_KEYS: tuple[str, ...] = ("horizon",)
ACTION_KEYS: tuple[str, ...] = (
    "type",
    "method",
    "url",
    "headers",
    "body",
    "auth",
    "signing_secret_env",
    "command",
    "env",
    "run_as",
    "agent_values_in_args",
)
AUTH_KEYS: tuple[str, ...] = ("type", "token_env", "header", "credentials_file", "scopes")
HTTP_METHODS: tuple[str, ...] = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")

# Which action types each action key applies to.
_ACTION_KEY_TYPES: dict[str, tuple[str, ...]] = {
    "method": ("http",),
    "url": ("http", "webhook"),
    "headers": ("http", "webhook"),
    "body": ("http", "webhook"),
    "auth": ("http",),
    "signing_secret_env": ("webhook",),
    "command": ("script",),
    "env": ("script",),
    "run_as": ("script",),
    "agent_values_in_args": ("script",),
}
# Which auth types each auth key applies to.
_AUTH_KEY_TYPES: dict[str, tuple[str, ...]] = {
    "token_env": ("bearer-token", "api-key-header"),
    "header": ("api-key-header",),
    "credentials_file": ("gcp-service-account",),
    "scopes": ("gcp-default", "gcp-service-account"),
}
# Header names whose values are credentials, whatever `auth` says (lower case).
CREDENTIAL_HEADERS: frozenset[str] = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "x-auth-token"}
)

HOOK_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
VARIABLE_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# RFC 9110 token characters.
HEADER_NAME_PATTERN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_ARTICLE: dict[str, str] = {"http": "an http", "webhook": "a webhook", "script": "a script"}


class _Reporter:
    """Collects the problems of one hook entry."""

    def __init__(self, file: str, index: int | None) -> None:
        self.file = file
        self.index = index
        self.hook: str | None = None
        self.problems: list[Problem] = []

    def report(self, where: Located | Position, field_path: str | None, message: str) -> None:
        position = where.position if isinstance(where, Located) else where
        self.problems.append(Problem(position, self.hook, field_path, message, self.index))

    def duplicates(self, mapping: Located, prefix: str) -> None:
        for key, position, message in mapping.duplicate_keys:
            self.report(position, prefix + key, message)

    def unknown_keys(self, mapping: Located, prefix: str, valid: Sequence[str]) -> None:
        for key, position in mapping.key_positions.items():
            if key not in valid:
                self.report(
                    position,
                    prefix + key,
                    f"unknown key{did_you_mean(key, valid)}; valid keys are {', '.join(valid)}",
                )


def read_hooks(
    section: Located | None, file: str, partial: list[HookSpec] | None = None
) -> tuple[list[HookSpec], list[Problem]]:
    """Check the `lifecycle_hooks:` list of one file; the hooks, or the problems found.
    `partial` (when given) receives what read cleanly of each named hook that has problems."""
    if section is None or section.value is None:
        return [], []
    if not section.is_list:
        reporter = _Reporter(file, None)
        reporter.report(
            section,
            "lifecycle_hooks",
            f'got {describe(section)}; write a list of hooks, each starting with "- name:"',
        )
        return [], reporter.problems
    hooks: list[HookSpec] = []
    problems: list[Problem] = []
    names_seen: dict[str, tuple[int, Position]] = {}
    for index, entry in enumerate(section.value):
        hook, entry_problems = read_hook(entry, index, file, names_seen, partial)
        problems.extend(entry_problems)
        if hook is not None:
            hooks.append(hook)
    return hooks, problems


def read_hook(
    entry: Located,
    index: int,
    file: str,
    names_seen: dict[str, tuple[int, Position]] | None = None,
    partial: list[HookSpec] | None = None,
) -> tuple[HookSpec | None, list[Problem]]:
    """Check one entry of `lifecycle_hooks:`; the hook, or None and its problems.

    `names_seen` (name -> index and position of the entry that first used it) is shared by
    the entries of one file, to refuse a name used twice. `partial`, when given, receives a
    hook with problems that has a name, built of what read cleanly (an action with problems
    becomes an empty script): never run, it lets the rules of the merged template (a
    misspelt condition, trust) and the warnings look at it, so that the hook's own problems
    do not hide theirs.
    """
    r = _Reporter(file, index)
    if not entry.is_mapping:
        r.report(
            entry, None, f"got {describe(entry)}; each hook is a mapping with name, on and action"
        )
        return None, r.problems
    if turns_off_only(entry):  # `- {name: x, enabled: false}` turns off a parent's hook
        return turned_off(entry, index), []
    fields: dict[str, Located] = entry.value
    name = _read_name(r, entry, names_seen if names_seen is not None else {})
    r.duplicates(entry, "")
    r.unknown_keys(entry, "", HOOK_KEYS)
    events = _read_events(r, entry)
    action = _read_action(r, entry)
    for position, field_path, message in reference_problems(entry):  # malformed `${...}`
        r.report(position, field_path, message)
    # An action with problems of its own is still read as written, for what only reads text:
    # its JSON body is checked beside its other problems, not after they are fixed.
    lenient = _lenient_action(entry) if action is None else None
    checked = action or lenient
    body_problem = json_body_problem(checked) if checked is not None else None
    if body_problem is not None:
        r.report(entry.value["action"].value.get("body", entry), "action.body", body_problem)
    on_error = _read_choice(r, fields.get("on_error"), "on_error", ERROR_POLICIES) or "log"
    blocking = _read_bool(r, fields.get("blocking"), "blocking", default=False)
    enabled = _read_bool(r, fields.get("enabled"), "enabled", default=True)
    timeout = _read_timeout(r, fields.get("timeout"), action)
    debounce = _read_debounce(r, fields.get("debounce"), events)
    condition = _read_condition(r, fields.get("condition"))
    rate_limit = _read_rate_limit(r, fields.get("rate_limit"), "rate_limit")
    retry_horizon = _read_retry(r, fields.get("retry"), events)
    if on_error == "fail" and not blocking:
        r.report(
            fields["on_error"],
            "on_error",
            'got "fail", which needs blocking: true (only a blocking hook can abort a transition)',
        )
    if r.problems or name is None or action is None:
        if partial is not None and name is not None:
            partial.append(
                HookSpec(
                    name=name, on=events, action=checked or HookAction(type="script"),
                    on_error=on_error,  # type: ignore[arg-type]
                    timeout=timeout, blocking=blocking, debounce=debounce, condition=condition,
                    enabled=enabled, position=entry.position, rate_limit=rate_limit,
                    field_positions=field_positions(entry), entry_index=index,
                )
            )  # fmt: skip
            if action is None and isinstance(partial, PartialHooks):
                partial.lenient.add(id(partial[-1]))
        return None, r.problems
    hook = HookSpec(
        name=name,
        on=events,
        action=action,
        on_error=on_error,  # type: ignore[arg-type]
        timeout=timeout,
        blocking=blocking,
        debounce=debounce,
        condition=condition,
        enabled=enabled,
        position=entry.position,
        rate_limit=rate_limit,
        retry_horizon=retry_horizon,
        field_positions=field_positions(entry),
        entry_index=index,
    )
    return hook, []


class PartialHooks(list[HookSpec]):
    """The hooks with problems of their own, as `read_hook` keeps them aside: never run, only
    looked at. `lenient` holds the ids of those whose action had problems too, read as its
    strings were written (`_lenient_action`): text checks and warnings may read them, the
    trust rules may not (they reason about a valid URL and command)."""

    def __init__(self) -> None:
        super().__init__()
        self.lenient: set[int] = set()

    def with_valid_actions(self) -> list[HookSpec]:
        return [hook for hook in self if id(hook) not in self.lenient]


def _lenient_action(entry: Located) -> HookAction | None:
    """An action that failed its rules, as its strings were written (url, body, headers,
    command, env), for the checks that only read text; None without a known type."""
    located = entry.value.get("action")
    if located is None or not located.is_mapping:
        return None
    fields: dict[str, Located] = located.value
    action_type = fields.get("type")
    if action_type is None or action_type.value not in ACTION_TYPES:
        return None

    def text(key: str) -> str | None:
        value = fields.get(key)
        return value.value if value is not None and isinstance(value.value, str) else None

    def strings(key: str) -> Mapping[str, str]:
        value = fields.get(key)
        if value is None or not value.is_mapping:
            return MappingProxyType({})
        return MappingProxyType(
            {name: item.value for name, item in value.value.items() if isinstance(item.value, str)}
        )

    command = fields.get("command")
    argv = (
        tuple(item.text() for item in command.value if item.is_scalar)
        if command is not None and command.is_list
        else ()
    )
    return HookAction(
        type=action_type.value,
        method=(text("method") or "POST").upper(),
        url=text("url"),
        headers=strings("headers"),
        body=text("body"),
        command=argv,
        env=strings("env"),
    )


def _read_name(
    r: _Reporter, entry: Located, names_seen: dict[str, tuple[int, Position]]
) -> str | None:
    located = entry.value.get("name")
    if located is None:
        r.report(
            entry, "name", 'missing; every hook needs a unique name, e.g. name: "register-agent"'
        )
        return None
    if not isinstance(located.value, str):
        r.report(located, "name", f'got {describe(located)}; write a name such as "register-agent"')
        return None
    name: str = located.value
    if not HOOK_NAME_PATTERN.fullmatch(name):
        problem = "is empty" if not name else f"got {quote(name)}"
        r.report(
            located,
            "name",
            f"{problem}; a name holds letters, digits, '.', '_' and '-', "
            "and starts with a letter or digit",
        )
        return None
    r.hook = name
    first_index, first = names_seen.setdefault(name, (r.index or 0, located.position))
    if first_index != (r.index or 0):
        r.report(
            located,
            "name",
            f"duplicate: line {first.line}, column {first.column} already names a hook "
            f"{quote(name)}; names must be unique",
        )
    return name


def _read_events(r: _Reporter, entry: Located) -> tuple[str, ...]:
    located = entry.value.get("on")
    if located is None:
        r.report(entry, "on", "missing; list at least one event, e.g. on: [post-start]")
        return ()
    if isinstance(located.value, str):
        items: list[tuple[str, Located]] = [("on", located)]
    elif located.is_list:
        items = [(f"on[{i}]", item) for i, item in enumerate(located.value)]
        if not items:
            r.report(located, "on", "is empty; list at least one event, e.g. on: [post-start]")
    else:
        r.report(
            located,
            "on",
            f"got {describe(located)}; write an event or a list of events, e.g. on: [post-start]",
        )
        return ()
    events: list[str] = []
    for field_path, item in items:
        if not isinstance(item.value, str):
            r.report(
                item, field_path, f"got {describe(item)}; write an event name such as post-start"
            )
        elif item.value not in ALL_EVENTS:
            r.report(item, field_path, _unknown_event_message(item.value))
        elif item.value not in events:
            events.append(item.value)
    return tuple(events)


def _unknown_event_message(event: str) -> str:
    return (
        f"got {quote(event)}{did_you_mean(event, sorted(ALL_EVENTS))}; valid events are "
        f"{', '.join(TEMPLATE_EVENTS)}, and the runtime events {', '.join(RUNTIME_EVENTS)}"
    )


def _read_choice(
    r: _Reporter, located: Located | None, field_path: str, choices: Sequence[str]
) -> str | None:
    if located is None:
        return None
    valid = f"valid values are {', '.join(choices)}"
    if not isinstance(located.value, str):
        r.report(located, field_path, f"got {describe(located)}; {valid}")
        return None
    if located.value not in choices:
        r.report(
            located,
            field_path,
            f"got {quote(located.value)}{did_you_mean(located.value, choices)}; {valid}",
        )
        return None
    return str(located.value)


def _read_bool(r: _Reporter, located: Located | None, field_path: str, default: bool) -> bool:
    if located is None:
        return default
    if not isinstance(located.value, bool):
        r.report(located, field_path, f"got {describe(located)}; write true or false")
        return default
    return located.value


def _read_duration(r: _Reporter, located: Located, field_path: str) -> float | None:
    if not located.is_scalar or located.value is None or isinstance(located.value, bool):
        r.report(
            located,
            field_path,
            f'got {describe(located)}; write a duration with a unit, e.g. "10s" or "500ms"',
        )
        return None
    try:
        return parse_duration(located.text())
    except DurationError as exc:
        r.report(located, field_path, str(exc))
        return None


def _read_timeout(r: _Reporter, located: Located | None, action: HookAction | None) -> float:
    default = DEFAULT_SCRIPT_TIMEOUT if action and action.type == "script" else DEFAULT_HTTP_TIMEOUT
    if located is None:
        return default
    seconds = _read_duration(r, located, "timeout")
    if seconds is None:
        return default
    if seconds <= 0:
        r.report(located, "timeout", f"got {quote(located.text())}; a timeout must be above zero")
    elif seconds > MAX_TIMEOUT:
        r.report(
            located,
            "timeout",
            f"got {quote(located.text())}; the maximum is {MAX_TIMEOUT:g}s",
        )
    return seconds


def _read_debounce(r: _Reporter, located: Located | None, events: tuple[str, ...]) -> float | None:
    if located is None:
        return None
    seconds = _read_duration(r, located, "debounce")
    if seconds is not None and seconds <= 0:
        r.report(
            located,
            "debounce",
            f"got {quote(located.text())}; a debounce must be above zero "
            "(remove it to run on every event)",
        )
    others = [event for event in events if event not in DEBOUNCEABLE_EVENTS]
    if others:
        r.report(
            located,
            "debounce",
            "only activity-change and phase-change hooks can be debounced; "
            f"this hook is also on {', '.join(others)}",
        )
    return seconds


def _read_retry(r: _Reporter, located: Located | None, events: tuple[str, ...]) -> float | None:
    """`retry: {horizon: DURATION}`: how long after its event began a failed owed hook is
    still retried, by the next run or `reconcile` (supervisor/recovery.py)."""
    if located is None:
        return None
    if not located.is_mapping:
        r.report(
            located, "retry", f"got {describe(located)}; write a mapping such as {{horizon: 1h}}"
        )
        return None
    r.duplicates(located, "retry.")
    r.unknown_keys(located, "retry.", RETRY_KEYS)
    horizon = located.value.get("horizon")
    if horizon is None:
        r.report(located, "retry.horizon", "missing; write a duration such as 1h")
        return None
    seconds = _read_duration(r, horizon, "retry.horizon")
    if seconds is None:
        return None
    if seconds <= 0 or seconds > MAX_RETRY_HORIZON:
        r.report(
            horizon,
            "retry.horizon",
            f"got {quote(horizon.text())}; a horizon is above zero and at most"
            f" {MAX_RETRY_HORIZON / 3600:g}h",
        )
        return None
    others = [event for event in events if event not in RETRIED_EVENTS]
    if others:
        r.report(
            located,
            "retry",
            "only pre-stop and session-end hooks (what a killed session still owes) are"
            f" retried past the supervisor's exit; this hook is also on {', '.join(others)}",
        )
        return None
    return seconds


def _read_rate_limit(r: _Reporter, located: Located | None, field_path: str) -> RateLimit | None:
    if located is None:
        return None
    if not isinstance(located.value, str):
        r.report(located, field_path, f"got {describe(located)}; write a rate such as 10/min")
        return None
    try:
        return RateLimit.parse(located.value)
    except ValueError as exc:
        r.report(located, field_path, str(exc))
        return None


def read_template_rate_limit(
    located: Located | None, file: str
) -> tuple[RateLimit | None, list[Problem]]:
    """The top-level `hook_rate_limit:` (shared by all HTTP hooks), or its problem."""
    r = _Reporter(file, None)
    return _read_rate_limit(r, located, "hook_rate_limit"), r.problems


def _read_condition(r: _Reporter, located: Located | None) -> Condition | None:
    if located is None:
        return None
    if not isinstance(located.value, str):
        r.report(
            located,
            "condition",
            f'got {describe(located)}; write an expression such as "ACTIVITY == completed"',
        )
        return None
    # Imported here: the parser and its classes (about 2 ms, -X importtime) cost `run`'s
    # start-up only when a template uses `condition:`.
    from .condition import ConditionSyntaxError, parse_condition

    try:
        return parse_condition(located.value)
    except ConditionSyntaxError as exc:
        r.report(offset_position(located, exc.offset), "condition", f"does not parse: {exc}")
        return None


# --- action -----------------------------------------------------------------------------


def _read_action(r: _Reporter, entry: Located) -> HookAction | None:
    located = entry.value.get("action")
    if located is None:
        r.report(
            entry,
            "action",
            'missing; every hook needs an action, e.g. action: {type: http, url: "https://..."}',
        )
        return None
    if not located.is_mapping:
        r.report(
            located,
            "action",
            f"got {describe(located, show_text=False)}; write a mapping with type and its fields",
        )
        return None
    fields: dict[str, Located] = located.value
    r.duplicates(located, "action.")
    r.unknown_keys(located, "action.", ACTION_KEYS)
    problems_before = len(r.problems)
    if "type" not in fields:
        r.report(located, "action.type", f"missing; valid values are {', '.join(ACTION_TYPES)}")
    action_type = _read_choice(r, fields.get("type"), "action.type", ACTION_TYPES)
    if action_type is None:
        return None
    _check_keys_apply(r, located, action_type)
    if action_type == "script":
        command = _read_command(r, fields.get("command"), located)
        env = _read_string_map(r, fields.get("env"), "action.env", key_kind="variable")
        run_as = _read_choice(r, fields.get("run_as"), "action.run_as", RUN_AS) or "agent"
        in_args = _read_bool(
            r, fields.get("agent_values_in_args"), "action.agent_values_in_args", False
        )
        if len(r.problems) > problems_before:
            return None
        return HookAction(
            type="script",
            command=command,
            env=MappingProxyType(env),
            run_as=run_as,
            agent_values_in_args=in_args,
        )
    headers = _read_headers(r, fields.get("headers"))
    method = "POST"
    if action_type == "http":
        method = _read_method(r, fields.get("method"))
    body = _read_body(r, fields.get("body"))
    auth = _read_auth(r, fields.get("auth"), headers) if action_type == "http" else AuthSpec()
    signing_secret_env = _read_variable_name(
        r, fields.get("signing_secret_env"), "action.signing_secret_env", "signing secret"
    )
    url = _read_url(r, fields.get("url"), located, action_type, auth, headers)
    if len(r.problems) > problems_before or url is None:
        return None
    return HookAction(
        type=action_type,  # type: ignore[arg-type]
        method=method,
        url=url,
        headers=MappingProxyType(headers),
        body=body,
        auth=auth,
        signing_secret_env=signing_secret_env,
    )


def _check_keys_apply(r: _Reporter, action: Located, action_type: str) -> None:
    for key, position in action.key_positions.items():
        applies_to = _ACTION_KEY_TYPES.get(key)
        if applies_to is None or action_type in applies_to:
            continue
        if action_type == "webhook" and key == "method":
            message = "a webhook is always POST; remove method, or use type: http"
        elif action_type == "webhook" and key == "auth":
            if action.value[key].value == "none":
                continue
            message = (
                "a webhook carries no auth (its URL holds the secret); "
                "use type: http to authenticate"
            )
        else:
            message = (
                f"does not apply to {_ARTICLE[action_type]} action; "
                f"it is for {' and '.join(applies_to)} actions"
            )
        r.report(position, f"action.{key}", message)


def _read_method(r: _Reporter, located: Located | None) -> str:
    if located is None:
        return "POST"
    if isinstance(located.value, str) and located.value.upper() in HTTP_METHODS:
        return located.value.upper()
    shown = quote(located.value) if isinstance(located.value, str) else describe(located)
    hint = did_you_mean(located.value, HTTP_METHODS) if isinstance(located.value, str) else ""
    r.report(
        located, "action.method", f"got {shown}{hint}; valid values are {', '.join(HTTP_METHODS)}"
    )
    return "POST"


def _read_body(r: _Reporter, located: Located | None) -> str | None:
    if located is None or located.value is None:
        return None
    if not isinstance(located.value, str):
        r.report(
            located,
            "action.body",
            f"got {describe(located)}; write the body as text, e.g. body: | and the JSON below it",
        )
        return None
    return located.value


def _read_command(r: _Reporter, located: Located | None, action: Located) -> tuple[str, ...]:
    if located is None:
        r.report(
            action,
            "action.command",
            'missing; a script needs a command, e.g. command: ["/path/to/script.sh"]',
        )
        return ()
    if isinstance(located.value, str):
        r.report(
            located,
            "action.command",
            f"got a string; write the command as a list of arguments: {_argv_hint(located.value)}",
        )
        return ()
    if not located.is_list:
        r.report(
            located,
            "action.command",
            f"got {describe(located)}; "
            'write a list of arguments, e.g. command: ["/path/to/script.sh"]',
        )
        return ()
    if not located.value:
        r.report(
            located,
            "action.command",
            'is empty; write at least the program, e.g. command: ["/path/to/script.sh"]',
        )
        return ()
    argv: list[str] = []
    for i, item in enumerate(located.value):
        if isinstance(item.value, str):
            argv.append(item.value)
        elif isinstance(item.value, (int, float)) and not isinstance(item.value, bool):
            r.report(
                item,
                f"action.command[{i}]",
                f"got {describe(item)}; quote it: {quote(item.text())}",
            )
        else:
            r.report(
                item,
                f"action.command[{i}]",
                f"got {describe(item)}; each argument must be a string",
            )
    if argv and not argv[0]:
        r.report(
            located.value[0],
            "action.command[0]",
            "is empty; the first argument is the program to run",
        )
    return tuple(argv)


def _argv_hint(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return "command: [" + ", ".join(quote(word, limit=200) for word in words) + "]"


def _read_string_map(
    r: _Reporter, located: Located | None, field_path: str, key_kind: str
) -> dict[str, str]:
    """A mapping of names to one-line strings; numbers and booleans are taken as written."""
    if located is None or located.value is None:
        return {}
    if not located.is_mapping:
        r.report(
            located, field_path, f"got {describe(located)}; write a mapping of names to values"
        )
        return {}
    r.duplicates(located, field_path + ".")
    result: dict[str, str] = {}
    for key, value in located.value.items():
        key_path = f"{field_path}.{key}"
        pattern = VARIABLE_NAME_PATTERN if key_kind == "variable" else HEADER_NAME_PATTERN
        if not pattern.fullmatch(key):
            valid = (
                "a variable name holds letters, digits and '_' and does not start with a digit"
                if key_kind == "variable"
                else "a header name holds letters, digits and !#$%&'*+-.^_`|~, with no spaces"
            )
            r.report(
                located.key_positions[key], key_path, f"is not a valid {key_kind} name; {valid}"
            )
            continue
        if not value.is_scalar or (value.value is None and key_kind == "header"):
            r.report(value, key_path, f"got {describe(value)}; write a string")
            continue
        result[key] = value.text()
    return result


def _read_headers(r: _Reporter, located: Located | None) -> dict[str, str]:
    headers = _read_string_map(r, located, "action.headers", key_kind="header")
    if located is None or not headers:
        return headers
    seen: dict[str, str] = {}
    for name, value in headers.items():
        key_path = f"action.headers.{name}"
        where = located.value[name]
        # Values are never shown in these messages: a header may carry a credential.
        if "\r" in value or "\n" in value:
            r.report(where, key_path, "holds a line break; a header value must be one line")
        if name.lower() in seen:
            r.report(
                located.key_positions[name],
                key_path,
                f"written twice (also as {quote(seen[name.lower()])}); header names ignore case",
            )
        seen.setdefault(name.lower(), name)
        if name.lower() in CREDENTIAL_HEADERS and "${" not in value:
            r.report(
                where,
                key_path,
                "holds a literal credential; keep secrets out of the template: "
                'write e.g. "Bearer ${MY_TOKEN}" and set MY_TOKEN in the environment',
            )
    return headers


def _read_variable_name(
    r: _Reporter, located: Located | None, field_path: str, what: str
) -> str | None:
    if located is None:
        return None
    if isinstance(located.value, str) and VARIABLE_NAME_PATTERN.fullmatch(located.value):
        return located.value
    # The value is not shown: it may be the secret itself, written where its name belongs.
    r.report(
        located,
        field_path,
        f"is not a variable name; write the NAME of the environment variable that holds "
        f"the {what} (e.g. MY_TOKEN), never the {what} itself",
    )
    return None


# --- auth -------------------------------------------------------------------------------


def _read_auth(r: _Reporter, located: Located | None, headers: Mapping[str, str]) -> AuthSpec:
    if located is None:
        return AuthSpec()
    if isinstance(located.value, str):
        auth_type = _read_choice(r, located, "action.auth", AUTH_TYPES)
        if auth_type is None:
            return AuthSpec()
        spec = AuthSpec(type=auth_type)  # type: ignore[arg-type]
    elif located.is_mapping:
        spec_or_none = _read_auth_mapping(r, located)
        if spec_or_none is None:
            return AuthSpec()
        spec = spec_or_none
    else:
        r.report(
            located,
            "action.auth",
            f"got {describe(located)}; write a strategy ({', '.join(AUTH_TYPES)}) "
            "or a mapping such as {type: bearer-token, token_env: MY_TOKEN}",
        )
        return AuthSpec()
    if not (located.is_mapping and "token_env" in located.value):  # else reported already
        _check_token_source(r, located, spec, headers)
    return spec


def _read_auth_mapping(r: _Reporter, located: Located) -> AuthSpec | None:
    fields: dict[str, Located] = located.value
    r.duplicates(located, "action.auth.")
    r.unknown_keys(located, "action.auth.", AUTH_KEYS)
    if "type" not in fields:
        r.report(located, "action.auth.type", f"missing; valid values are {', '.join(AUTH_TYPES)}")
        return None
    auth_type = _read_choice(r, fields["type"], "action.auth.type", AUTH_TYPES)
    if auth_type is None:
        return None
    for key, applies_to in _AUTH_KEY_TYPES.items():
        if key in fields and auth_type not in applies_to:
            r.report(
                located.key_positions[key],
                f"action.auth.{key}",
                f"does not apply to {auth_type}; it is for {' and '.join(applies_to)}",
            )
    token_env = _read_variable_name(r, fields.get("token_env"), "action.auth.token_env", "token")
    header = DEFAULT_API_KEY_HEADER
    if "header" in fields:
        header_located = fields["header"]
        if isinstance(header_located.value, str) and HEADER_NAME_PATTERN.fullmatch(
            header_located.value
        ):
            header = header_located.value
        else:
            r.report(
                header_located,
                "action.auth.header",
                f"got {describe(header_located)}; write a header name such as X-API-Key",
            )
    credentials_file = None
    if "credentials_file" in fields:
        file_located = fields["credentials_file"]
        if isinstance(file_located.value, str) and file_located.value:
            credentials_file = file_located.value
        else:
            r.report(
                file_located,
                "action.auth.credentials_file",
                f"got {describe(file_located)}; write the path of a service account key file",
            )
    scopes = AuthSpec().scopes
    if "scopes" in fields:
        scopes_located = fields["scopes"]
        if (
            scopes_located.is_list
            and scopes_located.value
            and all(isinstance(s.value, str) for s in scopes_located.value)
        ):
            scopes = tuple(s.value for s in scopes_located.value)
        else:
            r.report(
                scopes_located,
                "action.auth.scopes",
                f"got {describe(scopes_located)}; write a list of OAuth scope URLs",
            )
    return AuthSpec(
        type=auth_type,  # type: ignore[arg-type]
        token_env=token_env,
        header=header,
        credentials_file=credentials_file,
        scopes=scopes,
    )


def _check_token_source(
    r: _Reporter, located: Located, spec: AuthSpec, headers: Mapping[str, str]
) -> None:
    """bearer-token and api-key-header need a variable to read the secret from."""
    if spec.type not in ("bearer-token", "api-key-header") or spec.token_env:
        return
    header = "Authorization" if spec.type == "bearer-token" else spec.header
    if any(name.lower() == header.lower() and "${" in value for name, value in headers.items()):
        return
    r.report(
        located,
        "action.auth",
        f"{spec.type} needs the NAME of the variable that holds the secret: "
        f"auth: {{type: {spec.type}, token_env: MY_TOKEN}}, or write the {header} header "
        "with ${MY_TOKEN}",
    )


# --- url --------------------------------------------------------------------------------


def _read_url(
    r: _Reporter,
    located: Located | None,
    action: Located,
    action_type: str,
    auth: AuthSpec,
    headers: Mapping[str, str],
) -> str | None:
    if located is None:
        r.report(
            action,
            "action.url",
            f'missing; {_ARTICLE[action_type]} action needs a url, e.g. url: "https://..."',
        )
        return None
    if not isinstance(located.value, str) or not located.value.strip():
        shown = "is empty" if isinstance(located.value, str) else f"got {describe(located)}"
        r.report(located, "action.url", f'{shown}; write a url such as "https://example.com/hook"')
        return None
    url: str = located.value.strip()
    # The url is not shown in messages: webhook urls carry their secret.
    if any(c.isspace() for c in url):
        r.report(located, "action.url", "holds whitespace; percent-encode it (%20) or remove it")
        return None
    if url.startswith("${"):
        return url  # scheme and host known only at send time; the engine re-checks then
    scheme_match = _SCHEME.match(url)
    if scheme_match is None or scheme_match.group(1).lower() not in ("http", "https"):
        r.report(located, "action.url", "must start with https:// or http:// (or a ${VARIABLE})")
        return None
    scheme = scheme_match.group(1).lower()
    authority_problem = _authority_problem(url)
    if authority_problem is not None:
        r.report(located, "action.url", authority_problem)
        return None
    credential = _credential_reason(auth, headers) or _userinfo_reason(url)
    if scheme == "http" and credential is not None:
        host = _host(url)
        if host is not None and not _is_loopback(host):
            r.report(
                located,
                "action.url",
                f"sends credentials ({credential}) over plain http to {host!r}; use https:// "
                f"(plain http is allowed only to a loopback host: {LOOPBACK_FORMS})",
            )
    return url


def _authority_problem(url: str) -> str | None:
    """What is wrong with a literal URL's host or port (`http://[::1/x`, port 99999), if
    anything; a variable in the authority is checked when the URL is rendered."""
    rest = url.split("://", 1)[-1]
    # Up to the first of / ? #, found without a pattern: this runs for every HTTP hook of every
    # `run` before its agent starts.
    ends = [end for end in map(rest.find, "/?#") if end != -1]
    authority = rest[: min(ends)] if ends else rest
    if "${" in authority:
        return None
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        if "IPv6" in str(exc) or "[" in authority:
            return "holds a malformed IPv6 address; write it in brackets: http://[::1]:8080/path"
        return "has a port that is not a number from 1 to 65535"
    if not parts.hostname:
        return "has no host; write e.g. https://example.com/hook"
    ambiguous = ambiguous_host_reason(parts.hostname)
    if ambiguous is not None:
        return ambiguous
    if port == 0:
        return "has port 0; a port is a number from 1 to 65535"
    return None


def _credential_reason(auth: AuthSpec, headers: Mapping[str, str]) -> str | None:
    if auth.type != "none":
        return f"auth: {auth.type}"
    for name in headers:
        if name.lower() in CREDENTIAL_HEADERS:
            return f"the {name} header"
    return None


def _host(url: str) -> str | None:
    """The url's host, or None when a variable makes it unknown until send time."""
    netloc = urllib.parse.urlsplit(url).netloc
    if "${" in netloc:
        return None
    return urllib.parse.urlsplit(url).hostname or ""


def _userinfo_reason(url: str) -> str | None:
    """A user name or password in the URL is sent as Basic auth: a credential."""
    netloc = urllib.parse.urlsplit(url).netloc
    return "a user name and password in the URL" if "@" in netloc else None


# The one definition the guard and the client use; a name of its own for the template rules.
_is_loopback = is_loopback_host


# --- response captures (warnings) ---------------------------------------------------------

# When each event can fire in a session, as (earliest, latest) on one scale: pre-start <
# post-start < runtime events < pre-stop < session-end. phase-change fires from provisioning
# (before pre-start) to stopped; error can come at any point.
_PRE_START, _POST_START, _RUNTIME, _PRE_STOP, _SESSION_END = 1, 2, 3, 4, 5
_EVENT_SPAN: dict[str, tuple[int, int]] = {
    "pre-start": (_PRE_START, _PRE_START),
    "post-start": (_POST_START, _POST_START),
    "pre-stop": (_PRE_STOP, _PRE_STOP),
    "session-end": (_SESSION_END, _SESSION_END),
    "phase-change": (0, _SESSION_END),
    "error": (0, _SESSION_END),
}
# Compiled by `re` when `validate` looks for warnings, not at import.
_CAPTURE_NAME = r"HOOK_([A-Z0-9_]+)_(?:RESPONSE|STATUS)"


def capture_warnings(template: Template) -> list[Problem]:
    """Uses of `${HOOK_<NAME>_RESPONSE}` / `_STATUS` that will render empty: a capture of no
    hook (or of a disabled one), or of a hook that can only run later in the session than
    the hook using it. Warnings, not errors: the template loads and runs as written."""
    producers = {
        captured_variable_names(hook.name)[0].removesuffix("_RESPONSE"): hook
        for hook in template.hooks
    }
    warnings: list[Problem] = []
    for hook in template.hooks:
        if not hook.enabled:
            continue
        for field_path, name in _capture_references(hook, template.env):
            stem = name.rsplit("_", 1)[0]
            producer = producers.get(stem)
            reason = _capture_problem(hook, producer, template) if producer else None
            if producer is None:
                reason = (
                    "no hook of this template captures it (a hook's captures are "
                    "HOOK_<NAME>_RESPONSE and HOOK_<NAME>_STATUS, its name upper-cased, - as _)"
                )
            if reason is not None:
                file = template.files[0] if template.files else ""
                position = hook.position_of(field_path) or Position(file, 0, 0)
                message = f"uses ${{{name}}}, which will be empty: {reason}"
                warnings.append(Problem(position, hook.name, field_path, message, hook.entry_index))
    return warnings


def _capture_references(hook: HookSpec, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(field, capture variable) for each capture the hook reads, through `env:` entries too."""
    action = hook.action
    texts = [("action.url", action.url or ""), ("action.body", action.body or "")]
    texts += [(f"action.headers.{k}", v) for k, v in action.headers.items()]
    texts += [(f"action.command[{i}]", arg) for i, arg in enumerate(action.command)]
    texts += [(f"action.env.{k}", v) for k, v in action.env.items()]
    found: list[tuple[str, str]] = []
    for field_path, text in texts:
        names, seen = referenced_names(text), set()
        while names:  # follow env: entries, each once
            name = names.pop()
            seen.add(name)
            if re.fullmatch(_CAPTURE_NAME, name) and name not in env:
                found.append((field_path, name))
            elif name in env:
                names |= referenced_names(env[name]) - seen
    if hook.condition is not None:
        read = hook.condition.variables
        found += [("condition", name) for name in read if re.fullmatch(_CAPTURE_NAME, name)]
    return sorted(set(found))


def _capture_problem(user: HookSpec, producer: HookSpec, template: Template) -> str | None:
    if not producer.enabled:
        return f'hook "{producer.name}" is disabled'
    if producer.action.type == "script" and producer.action.protocol != "host-v1":
        return f'hook "{producer.name}" is a script; only HTTP hooks capture their response'
    earliest = min(_EVENT_SPAN.get(event, (_RUNTIME, _RUNTIME))[0] for event in producer.on)
    latest = max(_EVENT_SPAN.get(event, (_RUNTIME, _RUNTIME))[1] for event in user.on)
    if earliest > latest:
        return (
            f'hook "{producer.name}" runs only later (on {", ".join(producer.on)}) than this '
            f"hook (on {', '.join(user.on)})"
        )
    if earliest == latest and earliest != _RUNTIME and producer is not user:
        order = [hook.name for hook in template.hooks]
        if order.index(producer.name) > order.index(user.name):
            return f'hook "{producer.name}" is declared after this hook, on the same event'
        if not producer.blocking:
            return (
                f'hook "{producer.name}" runs on the same event without blocking: '
                "make it blocking: true so that its response is there"
            )
    return None
