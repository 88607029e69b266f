"""The dialect registry: one small translator per harness, found by name.

Built-in dialects are modules of this package, imported only when named. Any other name is
looked up as `<name>.yaml` in the directories of `$OTEL_LIFECYCLE_HOOKS_DIALECTS`
(`os.pathsep`-separated), then among the data-driven dialects shipped beside this file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping

from ...errors import LifecycleHooksError
from ...events import RUNTIME_EVENTS
from ..normalized import NormalizedEvent

# On the hook path (14.7 ms, target 17 ms: bench_hook_path.py), which loads neither `typing`
# (3 ms), `dataclasses` (7 ms) nor `pathlib` (only to look a dialect file up).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Protocol

DIALECTS_ENV = "OTEL_LIFECYCLE_HOOKS_DIALECTS"

# dialect name -> module under this package
BUILTIN_DIALECTS: dict[str, str] = {
    "claude": "claude",
    "gemini": "gemini",
    "codex": "codex",
    "opencode": "opencode",
    "core-agent": "core_agent",
}

# A pattern, not a compiled one: compiling it at import would cost every harness event, and
# only a dialect looked up by file name needs it.
_SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_GEMINI_ONLY = frozenset(
    {"BeforeAgent", "AfterAgent", "BeforeModel", "AfterModel", "BeforeTool", "AfterTool"}
    | {"BeforeToolSelection", "PreCompress"}
)


class UnknownDialectError(LookupError, LifecycleHooksError):
    """No built-in dialect and no dialect file has this name."""


if TYPE_CHECKING:
    Translate = Callable[[dict[str, object], list[str]], list[NormalizedEvent]]

    class Dialect(Protocol):
        """What the `hook` command needs of a dialect (for type checkers only)."""

        @property
        def name(self) -> str:
            """The dialect's name, as `--dialect` takes it."""
            ...

        def translate(
            self, payload: dict[str, object], argv_extra: list[str]
        ) -> list[NormalizedEvent]:
            """Raw payload (and any extra argv) -> normalized events, usually one."""
            ...

        def response(self, payload: Mapping[str, object]) -> str | None:
            """Text to print on stdout for the harness, or None for nothing."""
            ...


class BuiltinDialect:
    """A dialect written in Python: a name and a translate function."""

    # A plain class, not a dataclass: the hook path never imports `dataclasses` (see above).
    __slots__ = ("name", "translate_fn")

    def __init__(self, name: str, translate_fn: Translate) -> None:
        self.name = name
        self.translate_fn = translate_fn

    def __repr__(self) -> str:
        return f"BuiltinDialect(name={self.name!r})"

    def translate(self, payload: dict[str, object], argv_extra: list[str]) -> list[NormalizedEvent]:
        return self.translate_fn(payload, argv_extra)

    def response(self, payload: Mapping[str, object]) -> str | None:
        return None


def get_dialect(name: str, environ: Mapping[str, str] | None = None) -> Dialect:
    """The dialect called `name`; raises `UnknownDialectError` listing what is available."""
    module_name = BUILTIN_DIALECTS.get(name)
    if module_name is not None:
        # `__import__` rather than importlib.import_module: importing `importlib` (and the
        # `warnings` it imports) is a quarter of a millisecond on every harness event.
        module = __import__(f"{__name__}.{module_name}", fromlist=["translate"])
        return BuiltinDialect(name=name, translate_fn=module.translate)
    path = find_dialect_file(name, os.environ if environ is None else environ)
    if path is None:
        known = ", ".join(sorted(BUILTIN_DIALECTS) + shipped_dialect_names())
        raise UnknownDialectError(
            f"unknown dialect {name!r}: use one of {known}, put {name}.yaml in a directory "
            f"of ${DIALECTS_ENV.removeprefix('OTEL_')}, or pass --dialect-file"
        )
    # Here, not at the top: the YAML parser (about 25 ms, -X importtime) for a file dialect only.
    from ..dialect_yaml import load_dialect_file

    return load_dialect_file(path)


def find_dialect_file(name: str, environ: Mapping[str, str]) -> Path | None:
    """`<name>.yaml` from $OTEL_LIFECYCLE_HOOKS_DIALECTS, then the shipped ones; else None."""
    from pathlib import Path  # a file dialect only: about 3 ms (-X importtime)

    if not re.match(_SAFE_NAME, name):
        return None  # never let a name walk out of the directories
    named = environ.get(DIALECTS_ENV.removeprefix("OTEL_")) or environ.get(DIALECTS_ENV, "")
    directories = [Path(d) for d in named.split(os.pathsep) if d]
    for directory in [*directories, Path(__file__).parent]:
        candidate = directory / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    return None


def shipped_dialect_names() -> list[str]:
    """Names of the data-driven dialects that ship with the package."""
    from pathlib import Path  # an unknown name's message only: about 3 ms (-X importtime)

    return sorted(p.stem for p in Path(__file__).parent.glob("*.yaml"))


def detect_dialect(payload: Mapping[str, object], argv_extra: list[str]) -> str:
    """Guess the built-in dialect from a payload's shape, for `hook` without `--dialect`."""
    if argv_extra and argv_extra[-1].lstrip().startswith("{"):
        return "codex"  # notify passes its JSON as the last argument
    hook_event = payload.get("hook_event_name")
    kind = payload.get("type")
    if isinstance(payload.get("event"), dict) or (isinstance(kind, str) and "." in kind):
        return "opencode"
    if isinstance(kind, str) and kind:
        return "codex"
    if hook_event in RUNTIME_EVENTS:
        return "core-agent"
    if hook_event in _GEMINI_ONLY or ("timestamp" in payload and "permission_mode" not in payload):
        return "gemini"
    if "turn_id" in payload:
        return "codex"
    return "claude"
