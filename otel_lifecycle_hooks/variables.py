"""`${VAR}` resolution, in the seed's priority order.

A name is looked up in these layers, first match wins:

1. event context   PHASE, ACTIVITY, TOOL_NAME, EXIT_CODE, ASSISTANT_TEXT, EVENT, TIMESTAMP, ...
2. agent metadata  AGENT_NAME, AGENT_ID, TEMPLATE_NAME, GROVE_NAME, IMAGE, HOOK_NAME, ...
3. captured        HOOK_<NAME>_RESPONSE and HOOK_<NAME>_STATUS of hooks that already ran
4. template env    the `env:` block; its values may reference other variables. These are
                   defaults: a name the process environment also sets takes the
                   environment's value, unless the entry references itself (`${PATH}:/x`)
5. environment     the process environment, passed in (never read implicitly)

Syntax: `${NAME}`, NAME being `[A-Za-z_][A-Za-z0-9_]*`, optionally followed by a dotted path
into a JSON value (`${HOOK_REGISTER_RESPONSE.service.id}`, `${HOOK_LIST_RESPONSE.items.0.id}`),
and by `:-default` (`${REGION:-us-east1}`): the literal default when the name is unset or empty.
`$${` is a literal `${`; any other `$` is just a character. Text that looks like `${...}` but
is not a valid reference stays as written (the loader reports it).

A template `env:` value is expanded once when first used: its references resolve through all
layers, a reference to an `env:` entry that is already being expanded (`PATH: "${PATH}:/x"`, or
a cycle) skips to the process environment, and substituted text is never expanded again.

Values from `env:` and the process environment are configuration the template author or
operator wrote, so `Resolved.trusted` is True for them (when everything they reference is
trusted too); values from events, metadata and captured responses come from the agent or the
network and are not. Rendering uses this to decide how much structure a value may carry.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import NamedTuple

EVENT_VARIABLES: tuple[str, ...] = (
    "PHASE",
    "ACTIVITY",
    "PREVIOUS_PHASE",
    "PREVIOUS_ACTIVITY",
    "TOOL_NAME",
    "EXIT_CODE",
    "ERROR_MESSAGE",
    "TASK_SUMMARY",
    "ASSISTANT_TEXT",
    "EVENT",
    "TIMESTAMP",
    "LIMIT_NAME",
    "LIMIT_COUNT",
)

METADATA_VARIABLES: tuple[str, ...] = (
    "AGENT_NAME",
    "AGENT_SLUG",
    "AGENT_ID",
    "TEMPLATE_NAME",
    "HARNESS_NAME",
    "HARNESS_CONFIG",
    "GROVE_NAME",
    "GROVE_ID",
    "GROVE_PATH",
    "CONTAINER_ID",
    "IMAGE",
    "SESSION_ID",
    "HOOK_NAME",
)
# The supervisor's journal settings (where it is, the key that seals its session rows): the
# supervisor's alone, never passed to the agent (agent_env.py, journal/seal.py).
JOURNAL_SETTINGS = ("LIFECYCLE_HOOKS_JOURNAL", "OTEL_LIFECYCLE_HOOKS_JOURNAL")
JOURNAL_KEY_ENV = "LIFECYCLE_HOOKS_JOURNAL_KEY"
JOURNAL_KEY_FILE_ENV = "LIFECYCLE_HOOKS_JOURNAL_KEY_FILE"
# Agent metadata and the variable the operator (Scion, in the container) sets each with.
METADATA_ENV: Mapping[str, str] = MappingProxyType(
    {
        "AGENT_NAME": "SCION_AGENT_NAME",
        "AGENT_ID": "SCION_AGENT_ID",
        "AGENT_SLUG": "SCION_AGENT_SLUG",
        "TEMPLATE_NAME": "SCION_TEMPLATE_NAME",
        "HARNESS_NAME": "SCION_HARNESS",
        "HARNESS_CONFIG": "SCION_HARNESS_CONFIG",
        "GROVE_NAME": "SCION_GROVE",
        "GROVE_ID": "SCION_GROVE_ID",
        "GROVE_PATH": "SCION_GROVE_PATH",
        "CONTAINER_ID": "SCION_CONTAINER_ID",
        "IMAGE": "SCION_IMAGE",
    }
)

# How deep `env:` entries may refer to each other (template/trust.py refuses deeper templates).
MAX_ENV_DEPTH = 16

LAYERS: tuple[str, ...] = ("event", "metadata", "captured", "env", "environ")
_TRUSTED_LAYERS = frozenset({"env", "environ"})
_EMPTY: Mapping[str, str] = MappingProxyType({})

_REFERENCE = re.compile(
    r"\$\$\{"  # the escape: a literal "${"
    r"|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<path>(?:\.[A-Za-z0-9_-]+)*)"
    r"(?::-(?P<default>[^}]*))?\}"  # `${NAME:-default}`, as in shells and Compose
)


class Reference(NamedTuple):
    """One `${NAME.path}` in a template string."""

    name: str
    path: tuple[str, ...]
    offset: int  # where the `$` stands in the template string
    default: str | None = None  # `${NAME:-default}`: used when NAME is unset or empty

    @property
    def text(self) -> str:
        """The reference as a dotted name: `HOOK_X_RESPONSE.items.0.id`."""
        return ".".join((self.name, *self.path))


# A parsed template string: literal text and references, in order.
Piece = str | Reference


class Resolved(NamedTuple):
    """A variable's value and where it came from."""

    value: str
    layer: str  # one of LAYERS
    trusted: bool  # written by the template author or operator, not by the agent or network


# A hook renders the same few template strings for every event: each is parsed once.
@functools.lru_cache(maxsize=1024)
def parse_template(text: str) -> tuple[Piece, ...]:
    """Split `text` into literal strings and `Reference`s (`$${` becomes a literal `${`)."""
    pieces: list[Piece] = []
    literal: list[str] = []
    position = 0
    for match in _REFERENCE.finditer(text):
        literal.append(text[position : match.start()])
        position = match.end()
        if match.group("name") is None:
            literal.append("${")
            continue
        if literal:
            joined = "".join(literal)
            if joined:
                pieces.append(joined)
            literal = []
        path = tuple(match.group("path").split(".")[1:])
        pieces.append(Reference(match.group("name"), path, match.start(), match.group("default")))
    literal.append(text[position:])
    joined = "".join(literal)
    if joined:
        pieces.append(joined)
    return tuple(pieces)


def referenced_names(text: str) -> set[str]:
    """The variable names `text` references (without any `.path` suffix)."""
    return {piece.name for piece in parse_template(text) if isinstance(piece, Reference)}


def captured_variable_names(hook_name: str) -> tuple[str, str]:
    """`register-agent` -> (`HOOK_REGISTER_AGENT_RESPONSE`, `HOOK_REGISTER_AGENT_STATUS`)."""
    stem = "".join(c if c.isascii() and c.isalnum() else "_" for c in hook_name).upper()
    return f"HOOK_{stem}_RESPONSE", f"HOOK_{stem}_STATUS"


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC to the microsecond, with a `Z`: `2026-05-01T12:00:00.250000Z` (what
    `${TIMESTAMP}` holds). Always six digits: each event of a session has its own microsecond,
    and the text is the end of its X-Scion-Hook-ID."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def format_unix_timestamp(unix: float) -> str:
    """`format_timestamp` of a unix time, rounded to the nearest microsecond exactly the same
    way wherever it is formatted (a live run, a recovery, `reconcile --dry-run`)."""
    micros = round(unix * 1_000_000)
    whole = datetime.fromtimestamp(micros // 1_000_000, tz=UTC)
    return format_timestamp(whole.replace(microsecond=micros % 1_000_000))


class Variables:
    """Resolves variable names through the five layers; see the module docstring.

    The mappings are read when a name is looked up, not copied, so the engine may keep filling
    `captured` as hooks complete.
    """

    def __init__(
        self,
        *,
        event: Mapping[str, str] | None = None,
        metadata: Mapping[str, str] | None = None,
        captured: Mapping[str, str] | None = None,
        template_env: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        secret_names: Iterable[str] = frozenset(),
    ) -> None:
        self._layers: tuple[tuple[str, Mapping[str, str]], ...] = (
            ("event", _EMPTY if event is None else event),
            ("metadata", _EMPTY if metadata is None else metadata),
            ("captured", _EMPTY if captured is None else captured),
            ("env", _EMPTY if template_env is None else template_env),
            ("environ", _EMPTY if environ is None else environ),
        )
        self.secret_names: frozenset[str] = frozenset(secret_names)
        # Names (dotted, as written) that resolved to nothing, for the caller to warn about once.
        self.unresolved: set[str] = set()

    def get(self, name: str, *, record: bool = True) -> str | None:
        """The value of `name` (`NAME` or `NAME.path`), or None; None is recorded if `record`."""
        resolved = self.resolve(name, record=record)
        return None if resolved is None else resolved.value

    def resolve(self, name: str, *, record: bool = True) -> Resolved | None:
        """Like `get`, also saying which layer the value came from and whether it is trusted."""
        base, _, path = name.partition(".")
        resolved = self._resolve_name(base, expanding=(), record=record)
        if resolved is not None and path:
            resolved = _follow_json_path(resolved, tuple(path.split(".")))
        if resolved is None and record:
            self.unresolved.add(name)
        return resolved

    def resolve_reference(self, reference: Reference) -> Resolved | None:
        """Resolve a parsed `${...}`, recording it when unresolved (and it has no default)."""
        if reference.default is None:
            return self.resolve(reference.text)
        resolved = self.resolve(reference.text, record=False)
        if resolved is None or resolved.value == "":
            # The default is the template author's text: trusted, as `env:` is.
            return Resolved(reference.default, "default", True)
        return resolved

    def origins(self, reference: Reference) -> list[tuple[str, str]]:
        """(layer, name) of every value outside `env:` that `reference` takes its text from,
        through the `env:` entries it expands (as `resolve` walks them): whom a rendered
        value really comes from."""
        return self._origins(reference.name, ())

    def _origins(self, name: str, expanding: tuple[str, ...]) -> list[tuple[str, str]]:
        for layer, mapping in self._layers:
            if layer == "env" and name in expanding:
                continue
            value = mapping.get(name)
            if value is None:
                continue
            if layer != "env":
                return [(layer, name)]
            if name in self._layers[-1][1] and name not in referenced_names(str(value)):
                continue  # the process environment's value wins, as in `_resolve_name`
            if len(expanding) >= MAX_ENV_DEPTH:
                return []
            found: list[tuple[str, str]] = []
            for piece in parse_template(str(value)):
                if isinstance(piece, Reference):
                    found += self._origins(piece.name, (*expanding, name))
            return found
        return []

    def substitute(self, text: str) -> str:
        """Plain substitution: every reference replaced by its value, unresolved ones by ''."""
        return "".join(
            piece if isinstance(piece, str) else _text_of(self.resolve_reference(piece))
            for piece in parse_template(text)
        )

    def secret_values(self) -> set[str]:
        """The non-empty values of the variables named as secrets, for redaction."""
        values = set()
        for name in self.secret_names:
            value = self.get(name, record=False)
            if value:
                values.add(value)
        return values

    def _resolve_name(self, name: str, expanding: tuple[str, ...], record: bool) -> Resolved | None:
        for layer, mapping in self._layers:
            if layer == "env" and name in expanding:
                continue  # a self-reference or cycle: fall through to the process environment
            value = mapping.get(name)
            if value is None:
                continue
            if layer == "env":
                if name in self._layers[-1][1] and name not in referenced_names(str(value)):
                    # The environment the operator set beats the template's default, as
                    # OTEL_* does; an entry that extends it (`PATH: "${PATH}:/x"`) still applies.
                    continue
                return self._expand_env(name, value, expanding, record)
            return Resolved(str(value), layer, layer in _TRUSTED_LAYERS)
        return None

    def _expand_env(
        self, name: str, raw: str, expanding: tuple[str, ...], record: bool
    ) -> Resolved:
        # Expanded on every use (it is cheap) so that late-captured responses are seen.
        if len(expanding) >= MAX_ENV_DEPTH:
            # Validation refuses deeper templates (template/trust.py); one built in code stops here
            # rather than growing exponentially.
            return Resolved("", "env", True)
        parts: list[str] = []
        trusted = True
        for piece in parse_template(str(raw)):
            if isinstance(piece, str):
                parts.append(piece)
                continue
            inner = self._resolve_name(piece.name, (*expanding, name), record)
            if inner is not None and piece.path:
                inner = _follow_json_path(inner, piece.path)
            if piece.default is not None and (inner is None or inner.value == ""):
                inner = Resolved(piece.default, "default", True)
            if inner is None:
                if record:
                    self.unresolved.add(piece.text)
                continue
            parts.append(inner.value)
            trusted = trusted and inner.trusted
        return Resolved("".join(parts), "env", trusted)


def _text_of(resolved: Resolved | None) -> str:
    return "" if resolved is None else resolved.value


def _follow_json_path(resolved: Resolved, path: tuple[str, ...]) -> Resolved | None:
    """`{"items": [{"id": 7}]}` with path (items, 0, id) -> "7"; None when anything is missing."""
    try:
        node: object = json.loads(resolved.value)
    except ValueError:
        return None
    for step in path:
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            return None
    if isinstance(node, str):
        text = node
    else:
        text = json.dumps(node, separators=(",", ":"), ensure_ascii=False)
    return Resolved(text, resolved.layer, resolved.trusted)
