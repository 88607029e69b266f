"""Agent limits: `max_turns` (turns closed by agent-end), `max_model_calls` (model-start
count) and `max_duration` (a timer), from the template's `limits:` or `SCION_MAX_*` variables.

The template's values were checked when it was loaded (template/loader.py); the variables are
checked here, each error naming the variable and a fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NamedTuple

from ..errors import LifecycleHooksError
from ..template.durations import DurationError, parse_duration


class LimitError(ValueError, LifecycleHooksError):
    """A limit whose value is not one: the message names where it was set and a fix."""


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class Limits(NamedTuple):
    """The agent's limits; None is no limit."""

    max_turns: int | None = None
    max_model_calls: int | None = None
    max_duration: float | None = None  # seconds

    @classmethod
    def from_sources(cls, template_limits: Mapping[str, str], environ: Mapping[str, str]) -> Limits:
        """Environment (`SCION_MAX_TURNS`, `SCION_MAX_MODEL_CALLS`, `SCION_MAX_DURATION`) over
        the template's `limits:`; raise LimitError for a value that is not a limit."""

        def pick(key: str) -> tuple[str, str] | None:
            """(where the value was set, the value), or None when it is not set."""
            variable = f"SCION_{key.upper()}"
            if environ.get(variable):
                return variable, environ[variable]
            value = template_limits.get(key)
            return (f"limits.{key}", str(value)) if value not in (None, "") else None

        turns, calls, duration = pick("max_turns"), pick("max_model_calls"), pick("max_duration")
        return cls(
            max_turns=_positive_int(turns),
            max_model_calls=_positive_int(calls),
            max_duration=_duration(duration),
        )

    def exceeded(self, turns: int, model_calls: int) -> tuple[str, int] | None:
        """The first count limit reached, as (name, count), else None."""
        if self.max_turns is not None and turns >= self.max_turns:
            return "max_turns", turns
        if self.max_model_calls is not None and model_calls >= self.max_model_calls:
            return "max_model_calls", model_calls
        return None


def _positive_int(source: tuple[str, str] | None) -> int | None:
    if source is None:
        return None
    where, value = source
    text = value.strip()
    if not text.isdecimal() or int(text) <= 0:
        message = f"{where}: got {json.dumps(value)}; write a whole number above 0, e.g. 50"
        raise LimitError(message)
    return int(text)


def _duration(source: tuple[str, str] | None) -> float | None:
    if source is None:
        return None
    where, value = source
    try:
        return parse_duration(value)
    except DurationError as error:
        raise LimitError(f"{where}: {error}") from None
