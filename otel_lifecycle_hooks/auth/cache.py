"""One credential's access token, refreshed ahead of expiry, once, however many hooks ask.

The cache holds a google-auth credentials object (anything with `token`, `expiry` and
`refresh(request)`), loaded lazily on first use. A lock serialises loading and refreshing, so
ten hooks that find the token stale cause exactly one refresh; callers that waited on a refresh
that failed get that failure instead of each trying again.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from .errors import AuthError

if TYPE_CHECKING:
    from google.auth.transport import Request

# Tokens are renewed when they expire within this margin (the product contract says 5 minutes).
REFRESH_MARGIN = dt.timedelta(minutes=5)

_T = TypeVar("_T")


class RefreshableCredentials(Protocol):
    """What the cache needs of a google-auth `Credentials` object."""

    token: str | None
    expiry: dt.datetime | None

    def refresh(self, request: Request) -> None: ...


def utc_now() -> dt.datetime:
    """The current time, timezone-aware UTC."""
    return dt.datetime.now(dt.UTC)


def _as_utc(moment: dt.datetime) -> dt.datetime:
    # google-auth keeps expiry as a naive datetime meaning UTC.
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment


def needs_refresh(
    token: str | None,
    expiry: dt.datetime | None,
    now: dt.datetime,
    margin: dt.timedelta = REFRESH_MARGIN,
) -> bool:
    """True when there is no token yet, or it expires within `margin` of `now`.

    A token without an expiry never needs refreshing. Naive datetimes are read as UTC.
    """
    if not token:
        return True
    if expiry is None:
        return False
    return _as_utc(now) >= _as_utc(expiry) - margin


class TokenCache:
    """The access token of one credential (one strategy, key file and scope set).

    `load` builds the credentials object on first use and may raise `AuthError`; `request` is
    the google-auth transport refreshes use; `describe_failure` turns any other exception from
    loading or `credentials.refresh(request)` into the `AuthError` to raise.
    """

    def __init__(
        self,
        load: Callable[[], RefreshableCredentials],
        request: Request,
        describe_failure: Callable[[Exception], AuthError],
        *,
        clock: Callable[[], dt.datetime] = utc_now,
        margin: dt.timedelta = REFRESH_MARGIN,
    ) -> None:
        self._load = load
        self._request = request
        self._describe_failure = describe_failure
        self._clock = clock
        self._margin = margin
        self._lock = threading.Lock()
        self._credentials: RefreshableCredentials | None = None
        self._attempts = 0  # finished load/refresh attempts, successful or not
        self._last_failure: AuthError | None = None
        # A token issued for less than twice the margin is renewed when half its life is
        # spent: with the margin alone, a four-minute token would be fetched for every request.
        self._token_margin = margin
        self.refreshes = 0  # successful refreshes, for tests and diagnostics

    def token(self) -> str:
        """A token valid for at least the refresh margin (or without expiry).

        Raises `AuthError` when the credentials cannot be loaded or refreshed.
        """
        attempts_seen = self._attempts
        with self._lock:
            if self._attempts != attempts_seen and self._last_failure is not None:
                # An attempt failed while this caller waited: share it, don't repeat it.
                failure = self._last_failure
                raise AuthError(str(failure), error_type=failure.error_type)
            if self._credentials is not None and not needs_refresh(
                self._credentials.token,
                self._credentials.expiry,
                self._clock(),
                self._token_margin,
            ):
                return str(self._credentials.token)
            return self._load_and_refresh()

    def _load_and_refresh(self) -> str:
        try:
            if self._credentials is None:
                self._credentials = self._guarded(self._load)
            credentials = self._credentials
            if needs_refresh(
                credentials.token, credentials.expiry, self._clock(), self._token_margin
            ):
                self._guarded(lambda: credentials.refresh(self._request))
                self.refreshes += 1
                self._token_margin = self._margin_for(credentials.expiry)
            if not credentials.token:
                raise self._describe_failure(RuntimeError("the refresh returned no access token"))
        except AuthError as failure:
            self._last_failure = failure
            raise
        finally:
            self._attempts += 1
        self._last_failure = None
        return str(credentials.token)

    def _margin_for(self, expiry: dt.datetime | None) -> dt.timedelta:
        """The margin for a token just issued: the configured one, or half the token's
        lifetime when that is shorter."""
        if expiry is None:
            return self._margin
        lifetime = _as_utc(expiry) - _as_utc(self._clock())
        return min(self._margin, max(lifetime / 2, dt.timedelta(0)))

    def _guarded(self, step: Callable[[], _T]) -> _T:
        try:
            return step()
        except AuthError:
            raise
        except Exception as exc:  # noqa: BLE001 - google-auth raises several unrelated types
            raise self._describe_failure(exc) from None
