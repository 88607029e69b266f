"""Durations as templates write them: `500ms`, `10s`, `1m`, `1m30s`, `1.5h`.

A unit is always required: a bare `10` is ambiguous between seconds and milliseconds, and
guessing wrong turns a ten-second timeout into a three-hour one (or the reverse).
"""

from __future__ import annotations

import math
import re

from ..errors import LifecycleHooksError

_UNIT_SECONDS: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h)")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")
# A bare number above this is almost certainly milliseconds written without a unit.
_LOOKS_LIKE_MILLISECONDS = 1000


class DurationError(ValueError, LifecycleHooksError):
    """A value that is not a duration; the message says what would be valid."""


def parse_duration(text: str | float) -> float:
    """Parse `text` into seconds; raise DurationError naming what is wrong and a fix.

    Numbers (as YAML gives `timeout: 10`) are accepted only to be refused with a helpful
    message: every duration needs a unit.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise DurationError('write a duration with a unit, e.g. "10s" or "500ms"')
    source = str(text).strip()
    if _NUMBER.fullmatch(source):
        raise DurationError(_bare_number_message(source))
    if source.startswith("-"):
        raise DurationError(f'got "{source}"; a duration cannot be negative')
    if not source:
        raise DurationError('is empty; write a duration with a unit, e.g. "10s" or "500ms"')
    total = 0.0
    position = 0
    for match in _PART.finditer(source):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(source):
        raise DurationError(
            f'got "{source}"; write a number and a unit (ms, s, m or h), '
            'e.g. "500ms", "10s", "1m30s"'
        )
    return total


def _bare_number_message(source: str) -> str:
    number = float(source)
    if number > _LOOKS_LIKE_MILLISECONDS:
        return f'got {source} with no unit; that looks like milliseconds: write "{source}ms"'
    return f'got {source} with no unit; write "{source}s" or "{source}ms"'


def format_duration(seconds: float) -> str:
    """Seconds as the shortest template spelling: 0.5 -> "500ms", 90 -> "1m30s"."""
    if seconds < 0 or math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"not a duration: {seconds!r}")
    milliseconds = round(seconds * 1000)
    if milliseconds % 1000 and milliseconds < 60_000:
        return f"{milliseconds}ms"
    whole, remainder_ms = divmod(milliseconds, 1000)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    parts.append(f"{secs}s" if secs else "")
    if remainder_ms:
        parts.append(f"{remainder_ms}ms")
    return "".join(parts) or "0s"
