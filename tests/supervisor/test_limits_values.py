"""Limits read from the environment (`SCION_MAX_*`): a bad value is an error naming the
variable and a fix, never a traceback at the start of `run`."""

from __future__ import annotations

import pytest

from otel_lifecycle_hooks.errors import LifecycleHooksError
from otel_lifecycle_hooks.supervisor.limits import Limits


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SCION_MAX_TURNS", "abc", 'SCION_MAX_TURNS: got "abc"; write a whole number above 0'),
        ("SCION_MAX_MODEL_CALLS", "0", 'SCION_MAX_MODEL_CALLS: got "0"; write a whole number'),
        ("SCION_MAX_DURATION", "3", 'SCION_MAX_DURATION: got 3 with no unit; write "3s"'),
    ],
)
def test_a_bad_environment_limit_names_its_variable(
    variable: str, value: str, message: str
) -> None:
    with pytest.raises(LifecycleHooksError) as caught:
        Limits.from_sources({}, {variable: value})
    assert str(caught.value).startswith(message)


def test_the_environment_wins_over_the_template() -> None:
    limits = Limits.from_sources({"max_turns": "5", "max_duration": "1m"}, {"SCION_MAX_TURNS": "7"})
    assert (limits.max_turns, limits.max_model_calls, limits.max_duration) == (7, None, 60.0)
