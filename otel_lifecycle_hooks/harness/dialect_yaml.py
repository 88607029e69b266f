"""Data-driven dialects: a harness described by a `dialect.yaml` instead of code.

The format is Scion's declarative dialect spec:

```yaml
dialect: cursor
event_name_field: hook_event_name        # or event_name_fields: [hook_event_name, type]
mappings:
  beforeSubmitPrompt:                    # the raw event name
    event: prompt-submit                 # a runtime event (events.RUNTIME_EVENTS)
    fields:
      prompt: .prompt                    # field: dotted path into the payload
  stop: agent-end                        # shorthand when there are no fields
responses:                               # optional: what the command prints on stdout
  beforeSubmitPrompt: {continue: true}   # a mapping is printed as JSON, a string as is
  default: "{}"                          # for any other raw event
```

Field names are template variables: `tool_name` fills `TOOL_NAME`, `error` fills `ERROR_MESSAGE`,
any other name is upper-cased; `session_id` sets the event's session id. A mapping may name only
the fields its event may carry (reported.py): `tool-start` may set TOOL_NAME, never
PHASE, AGENT_ID or a template's `env:` name. A path's segments are
mapping keys or list indexes (`tool_input.files.0`); a leading `.` is allowed. Raw events with no
mapping produce no event.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import LifecycleHooksError
from ..events import RUNTIME_EVENTS
from ..reported import allowed_fields
from .normalized import ERROR_MESSAGE, NormalizedEvent, as_text

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FIELD_ALIASES = {"error": ERROR_MESSAGE}
_DEFAULT_RESPONSE = "default"
MAX_DIALECT_BYTES = 256 * 1024


class DialectFileError(ValueError, LifecycleHooksError):
    """A dialect file that cannot be read or does not follow the format."""


@dataclass(frozen=True)
class EventMapping:
    """How one raw event becomes a normalized event: its name and its field paths."""

    event: str
    fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class MappingDialect:
    """A dialect read from a dialect.yaml (see the module docstring)."""

    name: str
    event_name_fields: tuple[tuple[str, ...], ...]
    mappings: Mapping[str, EventMapping]
    responses: Mapping[str, str] = field(default_factory=dict)

    def raw_event(self, payload: Mapping[str, object]) -> str:
        """The payload's raw event name: the first non-empty string among the name fields."""
        for path in self.event_name_fields:
            value = resolve(payload, path)
            if isinstance(value, str) and value:
                return value
        return ""

    def translate(self, payload: dict[str, object], argv_extra: list[str]) -> list[NormalizedEvent]:
        """Raw payload -> the mapped normalized event, or none when the event is unmapped."""
        raw = self.raw_event(payload)
        mapping = self.mappings.get(raw)
        if mapping is None:
            return []
        values = {name: as_text(resolve(payload, path)) for name, path in mapping.fields.items()}
        session_id = values.pop("session_id", "") or as_text(payload.get("session_id"))
        return [
            NormalizedEvent(
                event=mapping.event,
                dialect=self.name,
                raw_event=raw,
                session_id=session_id,
                fields=values,
            )
        ]

    def response(self, payload: Mapping[str, object]) -> str | None:
        """What to print on stdout for this payload, if the dialect asks for anything."""
        raw = self.raw_event(payload)
        return self.responses.get(raw, self.responses.get(_DEFAULT_RESPONSE))


def resolve(value: Any, path: tuple[str, ...]) -> Any:
    """The value at `path` (keys or list indexes), or None where the payload has no such path."""
    for segment in path:
        if isinstance(value, Mapping):
            value = value.get(segment)
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return None
    return value


def load_dialect_file(path: str | Path) -> MappingDialect:
    """Read and check a dialect file; every problem raises `DialectFileError` naming the file."""
    try:
        text = _read_bounded(Path(path))
        document = yaml.load(text, Loader=_loader_without_aliases())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise DialectFileError(f"{path}: cannot read dialect file: {exc}") from None
    return parse_dialect(document, str(path))


def _read_bounded(path: Path) -> str:
    """The file's text: a regular file of at most `MAX_DIALECT_BYTES`, opened without blocking
    (whoever wrote the hook configuration may name a FIFO or a device)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    with open(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(f"{path} is not a regular file")
        data = handle.read(MAX_DIALECT_BYTES + 1)
    if len(data) > MAX_DIALECT_BYTES:
        raise OSError(f"larger than {MAX_DIALECT_BYTES // 1024} KiB")
    return data.decode("utf-8")


def _loader_without_aliases() -> type[yaml.SafeLoader]:
    """yaml.SafeLoader refusing aliases: a few nested aliases expand exponentially once the
    document is walked (a `responses:` value is serialized), and a dialect needs none."""

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            if self.check_event(yaml.AliasEvent):
                # Through the class: the stubs leave peek_event untyped, allowed for yaml only.
                mark = yaml.SafeLoader.peek_event(self).start_mark
                raise yaml.composer.ComposerError(
                    None, None, "aliases (*name) are not allowed in a dialect file", mark
                )
            return super().compose_node(parent, index)

    return NoAliasLoader


def parse_dialect(document: Any, source: str) -> MappingDialect:
    """Build a MappingDialect from a parsed document; `source` names it in errors."""
    if not isinstance(document, dict):
        raise DialectFileError(f"{source}: a dialect file must be a mapping")
    name = document.get("dialect")
    if not isinstance(name, str) or not name:
        raise DialectFileError(f"{source}: 'dialect' must name the dialect")
    return MappingDialect(
        name=name,
        event_name_fields=_name_fields(document, source),
        mappings=_mappings(document.get("mappings"), source),
        responses=_responses(document.get("responses"), source),
    )


def _path(text: Any, where: str) -> tuple[str, ...]:
    if not isinstance(text, str) or not text.strip(". "):
        raise DialectFileError(f"{where}: expected a dotted path such as '.tool_name'")
    return tuple(text.strip().lstrip(".").split("."))


def _name_fields(document: dict[str, object], source: str) -> tuple[tuple[str, ...], ...]:
    several = document.get("event_name_fields")
    if several is not None:
        if not isinstance(several, list) or not several:
            raise DialectFileError(f"{source}: 'event_name_fields' must be a non-empty list")
        return tuple(_path(item, f"{source}: event_name_fields") for item in several)
    one = document.get("event_name_field", "hook_event_name")
    return (_path(one, f"{source}: event_name_field"),)


def _mappings(raw_mappings: Any, source: str) -> dict[str, EventMapping]:
    if not isinstance(raw_mappings, dict) or not raw_mappings:
        raise DialectFileError(f"{source}: 'mappings' must map raw event names to events")
    valid = ", ".join(RUNTIME_EVENTS)
    result: dict[str, EventMapping] = {}
    for raw, spec in raw_mappings.items():
        where = f"{source}: mappings.{raw}"
        if isinstance(spec, str):
            spec = {"event": spec}
        if not isinstance(spec, dict):
            raise DialectFileError(f"{where}: expected a mapping with 'event' and 'fields'")
        event = spec.get("event")
        if event not in RUNTIME_EVENTS:
            raise DialectFileError(f"{where}.event: {event!r} is not one of {valid}")
        fields = spec.get("fields") or {}
        if not isinstance(fields, dict):
            raise DialectFileError(f"{where}.fields: expected field: path pairs")
        mapped = {
            _field_name(name, f"{where}.fields"): _path(path, f"{where}.fields.{name}")
            for name, path in fields.items()
        }
        _check_reportable(event, mapped, f"{where}.fields")
        result[str(raw)] = EventMapping(event=event, fields=mapped)
    return result


def _check_reportable(event: str, mapped: Mapping[str, object], where: str) -> None:
    """A dialect file maps only the fields its event may carry (reported.py): an
    agent's payload must never fill PHASE, AGENT_ID, metadata or a template's `env:` name."""
    allowed = allowed_fields(event)
    for name in mapped:
        if name != "session_id" and name not in allowed:
            valid = ", ".join(sorted(allowed)) or "none"
            raise DialectFileError(
                f"{where}: {event} may not set {name}; the fields it may set: {valid}"
            )


def _field_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise DialectFileError(f"{where}: {name!r} is not a valid field name")
    if name == "session_id":
        return name
    return _FIELD_ALIASES.get(name, name.upper())


def _responses(raw_responses: Any, source: str) -> dict[str, str]:
    if raw_responses is None:
        return {}
    if not isinstance(raw_responses, dict):
        raise DialectFileError(f"{source}: 'responses' must map raw event names to output")
    return {
        str(raw): value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        for raw, value in raw_responses.items()
    }
