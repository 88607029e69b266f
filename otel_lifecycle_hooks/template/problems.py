"""What is wrong with a template, and where: the parsed values with their positions
(`Located`), one `Problem` each, and `TemplateError` holding every problem of a load.

The loader, the rules (validate.py), the checks (checks.py) and the other hook systems' readers
all report through these; none of them imports another to do so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from ..errors import LifecycleHooksError
from .model import Position


# Neither these two nor any other class made before `run` spawns its agent is a dataclass: the
# dataclasses module brings inspect, ast and dis, 33M instructions, 8% of that start
# (callgrind, bench_startup.py's judged template; tests/test_startup_imports.py).
class Located:
    """A parsed value and where it was written.

    `value` is a scalar (str, int, float, bool, None, date), a list of Located, or a dict of
    key -> Located. `source` is a scalar's text as written, `style` its YAML quoting style
    (None when plain). Mappings keep their keys' positions and any key written twice. Not
    frozen, compared by identity: the loader fills a mapping's keys in after making it.
    """

    __slots__ = ("duplicate_keys", "key_positions", "position", "source", "style", "value")

    def __init__(
        self, value: Any, position: Position, source: str | None = None, style: str | None = None
    ) -> None:
        self.value = value
        self.position = position
        self.source = source
        self.style = style
        self.key_positions: dict[str, Position] = {}
        # (key, where the repeat stands, message) for each key written more than once
        self.duplicate_keys: list[tuple[str, Position, str]] = []

    def __repr__(self) -> str:
        return f"Located({self.value!r}, {self.position})"

    @property
    def is_mapping(self) -> bool:
        return isinstance(self.value, dict)

    @property
    def is_list(self) -> bool:
        return isinstance(self.value, list)

    @property
    def is_scalar(self) -> bool:
        return not (self.is_mapping or self.is_list)

    def text(self) -> str:
        """A scalar as a string: strings as they are, other scalars as written."""
        if isinstance(self.value, str):
            return self.value
        if self.value is None:
            return ""
        return self.source if self.source is not None else str(self.value)


class Problem(NamedTuple):
    """One thing wrong with a template, and where."""

    position: Position
    hook: str | None
    field: str | None
    message: str
    # The entry's index in its file's `lifecycle_hooks`, for a problem about an entry (also
    # points at a hook that has no usable name); None for the rest of the file.
    entry: int | None = None

    def __str__(self) -> str:
        parts = [str(self.position) if self.position.line else self.position.file]
        if self.hook is not None:
            parts.append(f'hook "{self.hook}"')
        elif self.entry is not None:
            parts.append(f"lifecycle_hooks[{self.entry}]")
        if self.field:
            parts.append(f'field "{self.field}"')
        parts.append(self.message)
        return ": ".join(parts)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready view, for `validate --json`; `index` only for a problem about an entry
        of `lifecycle_hooks`."""
        view: dict[str, object] = {
            "file": self.position.file,
            "line": self.position.line,
            "column": self.position.column,
            "hook": self.hook,
            "field": self.field,
            "message": self.message,
            "text": str(self),
        }
        if self.entry is not None:
            view["index"] = self.entry
        return view


class TemplateError(LifecycleHooksError):
    """Every problem of every file of a template that failed to load."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


def describe(located: Located, show_text: bool = True) -> str:
    """What a value is, for "got ..." messages; `show_text=False` hides a string's text."""
    value = located.value
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return located.source or str(value).lower()
    if isinstance(value, (int, float)):
        return f"the number {located.source or value}"
    if isinstance(value, str):
        return quote(value) if show_text else "a string"
    return f"the value {located.source or value}"


def quote(text: str, limit: int = 60) -> str:
    """A string in double quotes on one line, shortened past `limit` characters."""
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return json.dumps(shown, ensure_ascii=False)


def did_you_mean(word: str, options: Sequence[str]) -> str:
    """` (did you mean "x"?)` when an option is close to `word`, else ""."""
    import difflib  # only a template with a mistake pays for it (about 1 ms before the spawn)

    lowered = {option.lower(): option for option in options}
    matches = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean {quote(lowered[matches[0]])}?)" if matches else ""


def field_positions(entry: Located) -> Mapping[str, Position]:
    """Where each field of a hook entry is written, by path: `on[0]`, `action.url`,
    `action.headers.Host`, `action.command[2]`."""
    positions: dict[str, Position] = {}

    def visit(located: Located, path: str) -> None:
        if path:
            positions[path] = located.position
        if located.is_mapping:
            for key, value in located.value.items():
                visit(value, f"{path}.{key}" if path else key)
        elif located.is_list:
            for item_index, item in enumerate(located.value):
                visit(item, f"{path}[{item_index}]")

    visit(entry, "")
    return MappingProxyType(positions)


def offset_position(located: Located, offset: int) -> Position:
    """Where character `offset` of a one-line scalar stands in the file."""
    position = located.position
    if located.style not in (None, '"', "'") or "\n" in located.value:
        return position  # block scalars: the value's start is the best we know
    opening_quote = 1 if located.style else 0
    return Position(position.file, position.line, position.column + opening_quote + offset)
