"""`Credentials`: the auth headers of one HTTP attempt, for every strategy, with cached tokens.

One instance serves one engine; it is thread-safe. It remembers every secret value it reads or
hands out, so the redactor can take them out of logs, spans and the journal.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..extras import GCP_AUTH_TYPES, gcp_missing
from ..template.model import AuthSpec, HookAction
from .cache import REFRESH_MARGIN, TokenCache, utc_now
from .errors import CREDENTIALS_UNAVAILABLE, AuthError
from .guard import check_transport
from .signing import parse_secret, sign_request
from .static import AUTHORIZATION, read_secret, static_headers

if TYPE_CHECKING:
    from .gcp import BoundedRequest, CacheKey


class Credentials:
    """Auth headers for hooks' HTTP attempts, one token cache per GCP credential.

    `request_timeout` bounds each request google-auth makes (token endpoint, metadata server);
    `clock` (timezone-aware UTC) decides when a token is due for refresh.
    """

    def __init__(
        self,
        *,
        request_timeout: float | None = None,
        clock: Callable[[], dt.datetime] = utc_now,
        refresh_margin: dt.timedelta = REFRESH_MARGIN,
    ) -> None:
        self._request_timeout = request_timeout
        self._clock = clock
        self._refresh_margin = refresh_margin
        self._lock = threading.Lock()
        self._caches: dict[CacheKey, TokenCache] = {}
        self._requests: list[BoundedRequest] = []
        self._secrets: set[str] = set()

    def headers_for(self, auth: AuthSpec, url: str, environ: Mapping[str, str]) -> dict[str, str]:
        """The headers that authenticate one attempt to `url` ({} for `auth: none`).

        gcp-* and bearer-token give `Authorization: Bearer <token>`, api-key-header gives
        `<header>: <key>`. A bearer-token or api-key-header hook that names no `token_env` writes
        its own header (`Authorization: Bearer ${VAR}`), rendered by the engine: {} here.
        `environ` is where `token_env` and GOOGLE_APPLICATION_CREDENTIALS are looked up.

        Raises `AuthError` before anything is sent when `url` is neither https nor loopback, a
        named variable is unset or empty, or Google credentials cannot be found or refreshed.
        """
        if auth.type == "none":
            return {}
        check_transport(url, auth)
        if auth.type in GCP_AUTH_TYPES:
            token = self._token_cache(auth, environ).token()
            self._remember(token)
            return {AUTHORIZATION: f"Bearer {token}"}
        secret = read_secret(auth, environ)
        if secret is not None:
            self._remember(secret)
        return static_headers(auth, secret)

    def signing_headers(
        self,
        action: HookAction,
        idempotency_key: str,
        body: bytes,
        environ: Mapping[str, str],
        *,
        timestamp: int | None = None,
    ) -> dict[str, str]:
        """Standard Webhooks headers for one attempt when the action names `signing_secret_env`.

        The same `idempotency_key` gives the same `webhook-id` on every retry. `timestamp`
        defaults to now. Raises `AuthError` when the secret is unset or malformed.
        """
        if not action.signing_secret_env:
            return {}
        secret = environ.get(action.signing_secret_env, "").strip()
        if secret:
            self._remember(secret)
        parse_secret(secret, secret_env=action.signing_secret_env)
        when = int(self._clock().timestamp()) if timestamp is None else timestamp
        return sign_request(
            secret, idempotency_key, when, body, secret_env=action.signing_secret_env
        )

    def secret_values(self) -> set[str]:
        """Every token, key and signing secret read or handed out so far (for the redactor)."""
        with self._lock:
            return set(self._secrets)

    def close(self) -> None:
        """Release the HTTP sessions used to fetch tokens; cached tokens are dropped."""
        with self._lock:
            requests, self._requests = self._requests, []
            self._caches.clear()
        for request in requests:
            session = getattr(request, "session", None)
            if session is not None:
                session.close()

    def _remember(self, value: str) -> None:
        with self._lock:
            self._secrets.add(value)

    def _token_cache(self, auth: AuthSpec, environ: Mapping[str, str]) -> TokenCache:
        missing = gcp_missing(auth.type)
        if missing is not None:  # the `gcp` extra brings google-auth; the attempt fails, told why
            raise AuthError(missing, error_type=CREDENTIALS_UNAVAILABLE)
        # The [gcp] extra's google-auth, imported when a hook first needs a Google token.
        from .gcp import (
            CREDENTIALS_ENV,
            DEFAULT_REQUEST_TIMEOUT,
            BoundedRequest,
            cache_key,
            credentials_file,
            load_credentials,
            refresh_failure,
        )

        key = cache_key(auth, environ)
        with self._lock:
            cache = self._caches.get(key)
            if cache is not None:
                return cache
            timeout = self._request_timeout or DEFAULT_REQUEST_TIMEOUT
            request = BoundedRequest(timeout)
            # Frozen copies: the cache outlives this call's environ.
            spec = auth
            env = {k: environ[k] for k in (CREDENTIALS_ENV,) if k in environ}
            cache = TokenCache(
                lambda: load_credentials(spec, env, request),
                request,
                refresh_failure(spec, credentials_file(spec, env), self.secret_values),
                clock=self._clock,
                margin=self._refresh_margin,
            )
            self._caches[key] = cache
            self._requests.append(request)
            return cache
