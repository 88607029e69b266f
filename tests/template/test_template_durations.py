"""Durations: a unit is always required, and a slip into milliseconds is named as such."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_lifecycle_hooks.template.durations import DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("10s", 10.0),
        ("1m", 60.0),
        ("1m30s", 90.0),
        ("1.5s", 1.5),
        ("2h", 7200.0),
        ("1h1m1s1ms", 3661.001),
        (" 5s ", 5.0),
        ("0s", 0.0),
    ],
)
def test_durations_with_units_parse_to_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (10, 'got 10 with no unit; write "10s" or "10ms"'),
        ("10", 'got 10 with no unit; write "10s" or "10ms"'),
        (1500, 'got 1500 with no unit; that looks like milliseconds: write "1500ms"'),
        ("-5s", 'got "-5s"; a duration cannot be negative'),
        ("", 'is empty; write a duration with a unit, e.g. "10s" or "500ms"'),
        (
            "10 sec",
            'got "10 sec"; write a number and a unit (ms, s, m or h), e.g. "500ms", "10s", "1m30s"',
        ),
        (
            "1:30",
            'got "1:30"; write a number and a unit (ms, s, m or h), e.g. "500ms", "10s", "1m30s"',
        ),
        (True, 'write a duration with a unit, e.g. "10s" or "500ms"'),
    ],
)
def test_bad_durations_say_what_would_be_valid(value: object, message: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(value)  # type: ignore[arg-type]
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.5, "500ms"), (10, "10s"), (90, "1m30s"), (3600, "1h"), (0, "0s"), (61.5, "1m1s500ms")],
)
def test_format_duration_writes_the_shortest_spelling(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=10**9))
def test_format_then_parse_round_trips_to_the_millisecond(milliseconds: int) -> None:
    assert parse_duration(format_duration(milliseconds / 1000)) == pytest.approx(
        milliseconds / 1000
    )
