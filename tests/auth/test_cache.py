"""When a cached token is renewed: decided from the token's expiry and a clock, no I/O."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from otel_lifecycle_hooks.auth import AuthError
from otel_lifecycle_hooks.auth.cache import REFRESH_MARGIN, TokenCache, needs_refresh

UTC = dt.UTC
NOW = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> dt.datetime:
        return self.now


class FakeGoogleCredentials:
    """Issues `tok-N` valid for `lifetime`, with a naive UTC expiry as google-auth keeps it."""

    def __init__(self, clock: FakeClock, lifetime: dt.timedelta, fail: bool = False) -> None:
        self.clock = clock
        self.lifetime = lifetime
        self.fail = fail
        self.token: str | None = None
        self.expiry: dt.datetime | None = None
        self.refreshes = 0

    def refresh(self, request: Any) -> None:
        if self.fail:
            raise RuntimeError("invalid_grant: account disabled")
        self.refreshes += 1
        self.token = f"tok-{self.refreshes}"
        self.expiry = (self.clock.now + self.lifetime).replace(tzinfo=None)


def make_cache(credentials: FakeGoogleCredentials, clock: FakeClock) -> TokenCache:
    return TokenCache(
        lambda: credentials,
        request=None,
        describe_failure=lambda exc: AuthError(f"could not refresh ({exc})"),
        clock=clock,
    )


def test_the_margin_is_five_minutes() -> None:
    assert dt.timedelta(minutes=5) == REFRESH_MARGIN


@pytest.mark.parametrize(
    ("token", "expires_in", "due"),
    [
        (None, dt.timedelta(hours=1), True),  # nothing fetched yet
        ("t", dt.timedelta(hours=1), False),
        ("t", dt.timedelta(minutes=5, seconds=1), False),
        ("t", dt.timedelta(minutes=5), True),  # exactly at the margin
        ("t", dt.timedelta(seconds=200), True),
        ("t", -dt.timedelta(seconds=1), True),  # already expired
    ],
)
def test_a_token_is_due_when_it_expires_within_the_margin(
    token: str | None, expires_in: dt.timedelta, due: bool
) -> None:
    assert needs_refresh(token, NOW + expires_in, NOW) is due


def test_naive_and_aware_datetimes_compare_as_utc() -> None:
    naive_expiry = (NOW + dt.timedelta(minutes=4)).replace(tzinfo=None)
    assert needs_refresh("t", naive_expiry, NOW) is True
    assert needs_refresh("t", naive_expiry + dt.timedelta(minutes=2), NOW) is False
    naive_now = NOW.replace(tzinfo=None)
    assert needs_refresh("t", NOW + dt.timedelta(minutes=6), naive_now) is False


def test_a_token_without_expiry_is_never_due() -> None:
    assert needs_refresh("t", None, NOW) is False


def test_a_fresh_token_is_reused_and_renewed_five_minutes_before_expiry() -> None:
    clock = FakeClock()
    google = FakeGoogleCredentials(clock, lifetime=dt.timedelta(hours=1))
    cache = make_cache(google, clock)

    assert cache.token() == "tok-1"
    clock.now += dt.timedelta(minutes=54, seconds=59)
    assert cache.token() == "tok-1"
    clock.now += dt.timedelta(seconds=1)  # 55 minutes: 5 minutes before expiry
    assert cache.token() == "tok-2"
    assert google.refreshes == 2


def test_credentials_are_loaded_once() -> None:
    clock = FakeClock()
    loads: list[int] = []
    google = FakeGoogleCredentials(clock, lifetime=dt.timedelta(seconds=10))

    def load() -> FakeGoogleCredentials:
        loads.append(1)
        return google

    cache = TokenCache(load, None, lambda exc: AuthError(str(exc)), clock=clock)
    for _ in range(3):
        cache.token()
    assert len(loads) == 1
    assert google.refreshes == 1  # three calls at one instant: one token


def test_a_failed_refresh_is_an_auth_error_and_the_next_call_tries_again() -> None:
    clock = FakeClock()
    google = FakeGoogleCredentials(clock, lifetime=dt.timedelta(hours=1), fail=True)
    cache = make_cache(google, clock)

    with pytest.raises(AuthError, match="invalid_grant: account disabled"):
        cache.token()
    google.fail = False
    assert cache.token() == "tok-1"


def test_a_failed_load_is_not_remembered() -> None:
    clock = FakeClock()
    google = FakeGoogleCredentials(clock, lifetime=dt.timedelta(hours=1))
    attempts: list[int] = []

    def load() -> FakeGoogleCredentials:
        attempts.append(1)
        if len(attempts) == 1:
            raise FileNotFoundError("key.json")
        return google

    cache = TokenCache(load, None, lambda exc: AuthError(f"cannot load ({exc})"), clock=clock)
    with pytest.raises(AuthError, match="key.json"):
        cache.token()
    assert cache.token() == "tok-1"


def test_a_token_living_less_than_the_margin_is_not_fetched_for_every_request() -> None:
    # A four-minute token: under the five-minute margin from the start. It is renewed when
    # half its life is spent, not on every request.
    clock = FakeClock()
    credentials = FakeGoogleCredentials(clock, dt.timedelta(minutes=4))
    cache = make_cache(credentials, clock)
    tokens = []
    for _ in range(12):  # one request every 10 s for two minutes less a bit
        tokens.append(cache.token())
        clock.now += dt.timedelta(seconds=10)
    assert credentials.refreshes == 1
    assert set(tokens) == {"tok-1"}
    clock.now = NOW + dt.timedelta(minutes=2, seconds=1)  # half its life gone: renewed
    assert cache.token() == "tok-2"
