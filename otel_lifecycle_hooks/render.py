"""Context-safe rendering of an action's url, headers, body, argv and env.

STUB being completed: the dataclasses below are the contract other modules rely on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class RenderedRequest:
    """An HTTP request exactly as it will be sent (before auth headers are added)."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None = None


@dataclass(frozen=True)
class RenderedCommand:
    """A script invocation: argv (no shell), the environment overlay, and stdin bytes."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: bytes = b""


class RenderError(ValueError):
    """A rendered value would change the request's shape (e.g. CR/LF in a header)."""
