"""Agent limits: `max_turns` (agent-end count), `max_model_calls` (model-end count) and
`max_duration` (a timer), from the template's `limits:` or `SCION_MAX_*` variables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..template.durations import parse_duration


@dataclass(frozen=True, slots=True)
class Limits:
    """The agent's limits; None is no limit."""

    max_turns: int | None = None
    max_model_calls: int | None = None
    max_duration: float | None = None  # seconds

    @classmethod
    def from_sources(cls, template_limits: Mapping[str, str], environ: Mapping[str, str]) -> Limits:
        """Environment (`SCION_MAX_TURNS`, `SCION_MAX_MODEL_CALLS`, `SCION_MAX_DURATION`) over
        the template's `limits:`."""

        def pick(key: str) -> str | None:
            value = environ.get(f"SCION_{key.upper()}") or template_limits.get(key)
            return str(value) if value not in (None, "") else None

        turns, calls, duration = pick("max_turns"), pick("max_model_calls"), pick("max_duration")
        return cls(
            max_turns=_positive_int("max_turns", turns),
            max_model_calls=_positive_int("max_model_calls", calls),
            max_duration=parse_duration(duration) if duration else None,
        )

    def exceeded(self, turns: int, model_calls: int) -> tuple[str, int] | None:
        """The first count limit reached, as (name, count), else None."""
        if self.max_turns is not None and turns >= self.max_turns:
            return "max_turns", turns
        if self.max_model_calls is not None and model_calls >= self.max_model_calls:
            return "max_model_calls", model_calls
        return None


def _positive_int(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name}: expected a whole number, got {value!r}") from None
    if number <= 0:
        raise ValueError(f"{name}: expected a number above 0, got {number}")
    return number
