"""Checks for what template authors get wrong, beyond a field's shape: references that are
not references, names that differ from a known variable only by case or a typo, a JSON body
that is not JSON once rendered, a script that is not there.

Malformed references, JSON bodies that do not parse and conditions on a misspelt variable are
errors (reported with file:line:col); the rest are warnings, since the template is still usable
(a variable may come from the environment, a script may be installed later), and `test` turns a
missing script into an error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from ..extras import gcp_missing
from ..render import is_json_body, render_body
from ..variables import (
    EVENT_VARIABLES,
    METADATA_VARIABLES,
    Reference,
    Variables,
    captured_variable_names,
    parse_template,
)
from .model import HookAction, HookSpec, Position
from .problems import Located, Problem, field_positions, offset_position

if TYPE_CHECKING:
    from .model import Template

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PATH_STEP = re.compile(r"[A-Za-z0-9_-]+\Z")
_CAPTURED = re.compile(r"HOOK_[A-Za-z0-9_]+_(?:RESPONSE|STATUS)")
# Every `${`; one written as `$${` (the escape) is skipped by `_escaped`.
_OPENING = re.compile(r"\$\{")
VALID_FORMS = "${NAME}, ${NAME.path.0} or ${NAME:-default}"


# --- a child turning off a parent's hook ------------------------------------------------------

# The action of an entry that only says `name` and `enabled: false`: it turns off the hook of
# that name from an earlier (parent) template. Compared by identity.
TURN_OFF_ACTION = HookAction(type="script")


def turns_off_only(entry: Located) -> bool:
    """True for `- {name: x, enabled: false}` and nothing else."""
    if not entry.is_mapping or set(entry.value) != {"name", "enabled"}:
        return False
    name, enabled = entry.value["name"], entry.value["enabled"]
    return isinstance(name.value, str) and enabled.value is False


def turned_off(entry: Located, index: int | None = None) -> HookSpec:
    return HookSpec(
        name=entry.value["name"].value,
        on=(),
        action=TURN_OFF_ACTION,
        enabled=False,
        position=entry.position,
        field_positions=field_positions(entry),
        entry_index=index,
    )


def unmatched_turn_offs(template: Template) -> list[Problem]:
    """Entries that turn off a hook which no earlier template defines."""
    return [
        Problem(
            hook.position_of("enabled")
            or Position(template.files[-1] if template.files else "", 0, 0),
            hook.name,
            "enabled",
            f"name and enabled: false turn off a hook of an earlier template, and none defines "
            f'"{hook.name}"; give the parent template first (--template parent.yaml '
            "--template child.yaml), or write the whole hook",
            hook.entry_index,
        )
        for hook in template.hooks
        if hook.action is TURN_OFF_ACTION
    ]


# --- malformed references (errors) -------------------------------------------------------------


def malformed_references(text: str) -> list[tuple[int, str]]:
    """(offset, message) for each `${...}` in `text` that is not a valid reference; the
    message shows the valid form. `$${` (a literal `${`) is never reported."""
    problems: list[tuple[int, str]] = []
    valid_offsets = {piece.offset for piece in parse_template(text) if isinstance(piece, Reference)}
    for match in _OPENING.finditer(text):
        start = match.start()
        if start in valid_offsets or _escaped(text, start):
            continue
        end = text.find("}", match.end())
        if end == -1:
            word = re.match(r"[A-Za-z0-9_.-]*", text[match.end() :])
            inner = word.group(0) if word else ""
            fix = f"${{{_suggested_name(inner)}}}" if inner else "${NAME}"
            problems.append(
                (
                    start,
                    (
                        f"unclosed reference {_shown(text[start : match.end() + len(inner)])}: "
                        f"write {fix}; valid forms are {VALID_FORMS}, and $${{ for a literal ${{"
                    ),
                )
            )
            continue
        inner = text[match.end() : end]
        problems.append((start, _malformed_message(inner)))
    return problems


def _escaped(text: str, start: int) -> bool:
    """True when the `${` at `start` is the end of `$${`, the escape for a literal `${` (as
    the renderer reads it: any `$` right before a `${` makes it an escape)."""
    return start > 0 and text[start - 1] == "$"


def _malformed_message(inner: str) -> str:
    shown = _shown("${" + inner + "}")
    name = inner.partition(":-")[0]
    base, _, path = name.partition(".")
    if not inner:
        return f"empty reference {shown}: write ${{NAME}}; valid forms are {VALID_FORMS}"
    if "-" in inner and ":-" not in inner and _NAME.match(base.replace("-", "_")):
        return (
            f"{shown} is not a variable name (letters, digits and _; no -): did you mean "
            f"${{{base.replace('-', '_').upper()}}}? For a default write ${{NAME:-default}}"
        )
    if not _NAME.match(base):
        return (
            f"{shown} is not a variable name: a name is letters, digits and _, not starting "
            f"with a digit (did you mean ${{{_suggested_name(base)}}}?); "
            f"valid forms are {VALID_FORMS}"
        )
    if path and not all(_PATH_STEP.match(step) for step in path.split(".")):
        return f"{shown} has an empty or invalid path step: write ${{{base}.field.0}}"
    return f"{shown} is not a reference: valid forms are {VALID_FORMS}"


def _suggested_name(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", text).strip("_") or "NAME"
    if cleaned[0].isdigit():
        cleaned = "_" + cleaned if len(cleaned) == 1 else cleaned.lstrip("0123456789") or "NAME"
    return cleaned.upper()


def _shown(text: str, limit: int = 40) -> str:
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return json.dumps(shown, ensure_ascii=False)


def reference_problems(entry: Located) -> Iterator[tuple[Position, str, str]]:
    """(where, field, message) for every malformed reference in a hook entry's action."""
    action = entry.value.get("action") if entry.is_mapping else None
    if action is None or not action.is_mapping:
        return
    for field_path, located in _action_strings(action):
        for offset, message in malformed_references(located.value):
            yield offset_position(located, offset), field_path, message


def env_reference_problems(env: Located | None) -> Iterator[tuple[Position, str, str]]:
    """The same for the template's `env:` values."""
    if env is None or not env.is_mapping:
        return
    for key, located in env.value.items():
        if isinstance(located.value, str):
            for offset, message in malformed_references(located.value):
                yield offset_position(located, offset), f"env.{key}", message


def _action_strings(action: Located) -> Iterator[tuple[str, Located]]:
    fields: dict[str, Located] = action.value
    for key in ("url", "body"):
        located = fields.get(key)
        if located is not None and isinstance(located.value, str):
            yield f"action.{key}", located
    for key in ("headers", "env"):
        located = fields.get(key)
        if located is not None and located.is_mapping:
            for name, value in located.value.items():
                if isinstance(value.value, str):
                    yield f"action.{key}.{name}", value
    command = fields.get("command")
    if command is not None and command.is_list:
        for index, item in enumerate(command.value):
            if isinstance(item.value, str):
                yield f"action.command[{index}]", item


# --- warnings ----------------------------------------------------------------------------------


def known_variables(template: Template) -> set[str]:
    """Every name a template can rely on: event context, metadata, captured responses of its
    hooks, its `env:` keys and its secrets."""
    names = set(EVENT_VARIABLES) | set(METADATA_VARIABLES) | set(template.env)
    names |= set(template.secrets)
    for hook in template.hooks:
        names |= set(captured_variable_names(hook.name))
    return names


def _suggestion(name: str, known: set[str]) -> str | None:
    """A known name that `name` is probably meant to be: the same but for case, or close."""
    import difflib  # only a template with a mistake pays for it (about 1 ms before the spawn)

    if name in known or _CAPTURED.fullmatch(name):
        return None  # captures have their own warnings (validate.capture_warnings)
    by_upper = {option.upper(): option for option in known}
    if name.upper() in by_upper:
        return by_upper[name.upper()]
    matches = difflib.get_close_matches(name.upper(), list(by_upper), n=1, cutoff=0.8)
    return by_upper[matches[0]] if matches else None


def template_warnings(template: Template) -> list[Problem]:
    """Warnings for a loaded template: misspelt variables in references (a misspelt one in a
    condition is an error: `condition_problems`) and scripts that are missing or not
    executable."""
    known = known_variables(template)
    problems: list[Problem] = []
    unknown = Position(template.files[0] if template.files else "", 0, 0)

    def warning(hook: HookSpec, field_path: str, message: str) -> Problem:
        where = hook.position_of(field_path) or unknown
        return Problem(where, hook.name, field_path, message, hook.entry_index)

    for hook in template.hooks:
        for field_path, text in _hook_texts(hook):
            for piece in parse_template(text):
                if not isinstance(piece, Reference):
                    continue
                suggestion = _suggestion(piece.name, known)
                if suggestion is not None:
                    problems.append(
                        warning(
                            hook,
                            field_path,
                            f"${{{piece.name}}} is no known variable (did you mean "
                            f"${{{suggestion}}}?); names are case-sensitive, and an unknown "
                            "one renders empty unless the environment sets it",
                        )
                    )
        if hook.action.type == "script":
            missing = script_problem(hook.action.command)
            if missing is not None:
                problems.append(warning(hook, "action.command", missing))
        # The template is valid, yet every token fetch would fail on this install.
        extra = gcp_missing(hook.action.auth.type)
        if extra is not None:
            problems.append(warning(hook, "action.auth.type", extra))
    return problems


def condition_problems(template: Template) -> list[Problem]:
    """Errors for conditions on a misspelt variable (`ACTIVTY == completed`): compared as
    empty, such a condition loads and never holds. A name close to no known variable is
    left alone, since the environment may set it; so is one declared under `env:`."""
    known = known_variables(template)
    unknown = Position(template.files[0] if template.files else "", 0, 0)
    problems: list[Problem] = []
    for hook in template.hooks:
        if hook.condition is None:
            continue
        for name in sorted(hook.condition.variables):
            suggestion = _suggestion(name, known)
            if suggestion is not None:
                problems.append(
                    Problem(
                        hook.position_of("condition") or unknown,
                        hook.name,
                        "condition",
                        f"{name} is no known variable (did you mean {suggestion}?): compared "
                        "as empty, the condition would never hold. Names are case-sensitive; "
                        f"if the environment sets {name}, declare it under env: with a default",
                        hook.entry_index,
                    )
                )
    return problems


def _hook_texts(hook: HookSpec) -> Iterator[tuple[str, str]]:
    action = hook.action
    if action.url:
        yield "action.url", action.url
    if action.body:
        yield "action.body", action.body
    for name, value in action.headers.items():
        yield f"action.headers.{name}", value
    for index, arg in enumerate(action.command):
        yield f"action.command[{index}]", arg
    for name, value in action.env.items():
        yield f"action.env.{name}", value


class _SampleValues(Mapping[str, str]):
    """Every name has the value "1": a number, and a string's worth of text, wherever it lands."""

    def __getitem__(self, name: str) -> str:
        return "1"

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def get(self, name: str, default: object = None) -> str:
        return "1"


def json_body_problem(action: HookAction) -> str | None:
    """Why the body, sent as JSON, is not JSON once rendered with sample values; else None."""
    if not action.body or not action.is_http:
        return None
    content_type = next(
        (value for name, value in action.headers.items() if name.lower() == "content-type"), None
    )
    if not is_json_body(action.body, content_type):
        return None
    rendered = render_body(
        action.body, Variables(environ=_SampleValues()), content_type=content_type
    )
    try:
        json.loads(rendered)
    except ValueError as exc:
        return (
            f"sent as JSON but is not JSON once rendered (every variable given a sample value): "
            f"{exc}"
        )
    return None


def script_problem(command: Sequence[str], environ: Mapping[str, str] | None = None) -> str | None:
    """Why the script's program cannot run (missing, not executable); None when it can, or
    when its path is only known at run time (it references a variable)."""
    if not command or "${" in command[0]:
        return None
    program = command[0]
    env = os.environ if environ is None else environ
    if os.sep in program:
        if not os.path.exists(program):
            return f"the script {program} does not exist"
        if os.path.isdir(program):
            return f"the script {program} is a directory"
        if not os.access(program, os.X_OK):
            return f"the script {program} is not executable (chmod +x {program})"
        return None

    if shutil.which(program, path=env.get("PATH")) is None:
        return f"the program {program} is not on the PATH"
    return None
