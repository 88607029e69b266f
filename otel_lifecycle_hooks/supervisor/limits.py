"""Agent limits: `max_turns` (agent-end count), `max_model_calls` (model-end count) and
`max_duration` (a timer), from the template's `limits:` or `SCION_MAX_*` variables."""

from __future__ import annotations

from collections.abc import Mapping

from ..template.durations import parse_duration


class Limits:
    """The agent's limits; None is no limit."""

    # A plain class: a dataclass costs about half a millisecond at import, paid by every `run`.
    __slots__ = ("max_duration", "max_model_calls", "max_turns")

    def __init__(
        self,
        max_turns: int | None = None,
        max_model_calls: int | None = None,
        max_duration: float | None = None,  # seconds
    ) -> None:
        self.max_turns = max_turns
        self.max_model_calls = max_model_calls
        self.max_duration = max_duration

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Limits):
            return NotImplemented
        return (self.max_turns, self.max_model_calls, self.max_duration) == (
            other.max_turns,
            other.max_model_calls,
            other.max_duration,
        )

    def __hash__(self) -> int:
        return hash((self.max_turns, self.max_model_calls, self.max_duration))

    def __repr__(self) -> str:
        return (
            f"Limits(max_turns={self.max_turns!r}, max_model_calls={self.max_model_calls!r}, "
            f"max_duration={self.max_duration!r})"
        )

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
