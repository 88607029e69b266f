"""gcp-default and gcp-service-account: Google credentials through google-auth's own code paths.

`gcp-default` is Application Default Credentials: the file named by GOOGLE_APPLICATION_CREDENTIALS
(a service-account key, a workload identity federation `external_account` file, ...), the gcloud
ADC file, then the metadata server (GCE, GKE workload identity, Cloud Run). `gcp-service-account`
is a key file: `credentials_file`, else GOOGLE_APPLICATION_CREDENTIALS.

This module (and google-auth with it) is imported only when a hook first needs a Google token.
The HTTP transport is google-auth's `requests`-based one, which google-auth itself requires to
reach the metadata server.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import google.auth
import google.auth.transport.requests
from google.oauth2 import service_account

from ..template.model import AuthSpec
from .cache import RefreshableCredentials
from .errors import CREDENTIALS_UNAVAILABLE, REFRESH_FAILED, AuthError, safe_reason

CREDENTIALS_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
# Longest a single request to a token endpoint or metadata server may take: google-auth's own
# default (120s) would outlast any hook's timeout.
DEFAULT_REQUEST_TIMEOUT = 10.0

CacheKey = tuple[str, str | None, tuple[str, ...]]


def credentials_file(auth: AuthSpec, environ: Mapping[str, str]) -> str | None:
    """The key or ADC file a GCP strategy reads, or None (gcp-default then searches further)."""
    path: str | None
    if auth.type == "gcp-service-account" and auth.credentials_file:
        path = auth.credentials_file
    else:
        path = environ.get(CREDENTIALS_ENV) or None
    return os.path.expanduser(path) if path else None


def cache_key(auth: AuthSpec, environ: Mapping[str, str]) -> CacheKey:
    """Which cached credential serves `auth`: strategy, file and scopes."""
    return (auth.type, credentials_file(auth, environ), tuple(auth.scopes))


class BoundedRequest(google.auth.transport.requests.Request):
    """google-auth's requests transport, with every request ending within `timeout` seconds."""

    def __init__(self, timeout: float = DEFAULT_REQUEST_TIMEOUT) -> None:
        super().__init__()
        self.timeout = timeout

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: object = None,
        **kwargs: Any,
    ) -> google.auth.transport.Response:
        if not isinstance(timeout, (int, float)) or timeout > self.timeout:
            timeout = self.timeout
        # google-auth leaves `__call__` unannotated; its documented result is a Response.
        send: Callable[..., google.auth.transport.Response] = super().__call__
        return send(url, method, body, headers, timeout, **kwargs)


def load_credentials(
    auth: AuthSpec, environ: Mapping[str, str], request: google.auth.transport.Request
) -> RefreshableCredentials:
    """The google-auth credentials for `auth`, not yet refreshed.

    Raises `AuthError` (error_type `auth.credentials_unavailable`) when none can be found or the
    file is not usable.
    """
    path = credentials_file(auth, environ)
    scopes = list(auth.scopes)
    try:
        if auth.type == "gcp-service-account":
            if path is None:
                raise AuthError(
                    "gcp-service-account: no key file; set credentials_file in the hook's auth, "
                    f"or {CREDENTIALS_ENV} to the path of a service-account JSON key",
                    error_type=CREDENTIALS_UNAVAILABLE,
                )
            loaded: Any = service_account.Credentials.from_service_account_file(path, scopes=scopes)
        elif auth.type == "gcp-default" and path is not None:
            # The hook's environment may name a file the process environment does not.
            loaded = _load_file(path, scopes)
        elif auth.type == "gcp-default":
            loaded, _ = google.auth.default(scopes=scopes, request=request)
        else:
            raise ValueError(f"not a GCP credential strategy: {auth.type}")
    except AuthError:
        raise
    except Exception as exc:  # noqa: BLE001 - google-auth raises several unrelated types
        raise AuthError(
            _unavailable_message(auth, path, exc), error_type=CREDENTIALS_UNAVAILABLE
        ) from None
    return loaded  # type: ignore[no-any-return]


def _load_file(path: str, scopes: list[str]) -> Any:
    with open(path, encoding="utf-8") as file:
        info = json.load(file)
    if isinstance(info, dict) and info.get("type") == "external_account":
        return _external_account(info, scopes)
    loaded, _ = google.auth.load_credentials_from_file(path, scopes=scopes)
    return loaded


def _external_account(info: dict[str, Any], scopes: list[str]) -> Any:
    """Workload identity federation credentials, built as google-auth's file loader builds them.

    The loader would also look the project up at Cloud Resource Manager, a call hooks do not
    need and that fails where egress is restricted, so the public constructors are used directly.
    """
    # Each kind's module of the [gcp] extra, for a file of that kind only (about 2 ms each,
    # -X importtime): other credential files never need them.
    if info.get("subject_token_type") == "urn:ietf:params:aws:token-type:aws4_request":
        from google.auth import aws

        return aws.Credentials.from_info(info, scopes=scopes)
    if (info.get("credential_source") or {}).get("executable") is not None:
        from google.auth import pluggable

        return pluggable.Credentials.from_info(info, scopes=scopes)
    from google.auth import identity_pool

    return identity_pool.Credentials.from_info(info, scopes=scopes)


def _unavailable_message(auth: AuthSpec, path: str | None, exc: Exception) -> str:
    reason = safe_reason(exc)
    if path is not None and isinstance(exc, OSError):
        return (
            f"{auth.type}: cannot read credentials file {path} ({reason}); "
            "check the path and that the file is mounted and readable"
        )
    if path is not None:
        return (
            f"{auth.type}: credentials file {path} is not usable ({reason}); "
            "it must be a Google JSON credentials file"
            + (" of type service_account" if auth.type == "gcp-service-account" else "")
        )
    return (
        f"gcp-default: no Google credentials found ({reason}); set {CREDENTIALS_ENV} to a key "
        "or workload identity federation file, run `gcloud auth application-default login`, "
        "or run where a metadata server is reachable"
    )


def refresh_failure(
    auth: AuthSpec, path: str | None, secrets: Callable[[], Iterable[str]]
) -> Callable[[Exception], AuthError]:
    """How a failed refresh of `auth`'s credentials is reported (reason kept, secrets removed)."""

    def describe(exc: Exception) -> AuthError:
        source = f"the credentials file {path}" if path else "the credentials ADC found"
        reason = safe_reason(exc, secrets())
        return AuthError(
            f"{auth.type}: could not get an access token from Google ({reason}); check that "
            f"{source} is valid and not revoked, and that its token endpoint is reachable",
            error_type=REFRESH_FAILED,
        )

    return describe
