"""bearer-token and api-key-header: a secret read from the environment variable the hook names.

The value is read at call time, so a rotated secret takes effect on the next attempt. When a
hook names no `token_env`, it writes the header itself (`Authorization: Bearer ${VAR}`), the
engine renders that header, and nothing is added here.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..template.model import AuthSpec
from .errors import INVALID_SECRET, MISSING_SECRET, AuthError

AUTHORIZATION = "Authorization"


def auth_header_names(auth: AuthSpec) -> set[str]:
    """The header names whose values are secrets for `auth` (for the redactor)."""
    if auth.type == "api-key-header":
        return {auth.header}
    if auth.type == "none":
        return set()
    return {AUTHORIZATION}


def read_secret(auth: AuthSpec, environ: Mapping[str, str]) -> str | None:
    """The value of `environ[auth.token_env]`, or None when the hook names no variable.

    Surrounding whitespace is dropped (secrets mounted from files often end in a newline).
    Raises `AuthError` when the variable is unset or empty, or holds a line break.
    """
    if auth.token_env is None:
        return None
    value = environ.get(auth.token_env, "").strip()
    if not value:
        raise AuthError(
            f"{auth.type}: environment variable {auth.token_env} is unset or empty; "
            f"set it in the agent's environment (or the template's env:/secrets:) "
            "before the hook runs",
            error_type=MISSING_SECRET,
        )
    if any(ch in value for ch in "\r\n\0"):
        raise AuthError(
            f"{auth.type}: environment variable {auth.token_env} holds a line break or NUL, "
            "which cannot go in a header; store the secret on one line",
            error_type=INVALID_SECRET,
        )
    return value


def static_headers(auth: AuthSpec, secret: str | None) -> dict[str, str]:
    """The header carrying `secret` for a bearer-token or api-key-header action ({} for None)."""
    if secret is None:
        return {}
    if auth.type == "bearer-token":
        return {AUTHORIZATION: f"Bearer {secret}"}
    if auth.type == "api-key-header":
        return {auth.header: secret}
    raise ValueError(f"not a static credential strategy: {auth.type}")
