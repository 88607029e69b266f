"""The package's optional extras, and the one line a user gets when a setting needs one that is
not installed: `[grpc]` (the OTLP gRPC exporter), `[prometheus]` (the Prometheus reader),
`[postgres]` (a PostgreSQL journal), `[gcp]` (google-auth, for `auth: gcp-default` and
`gcp-service-account`)."""

from __future__ import annotations

import importlib.util

from .errors import LifecycleHooksError

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
GCP_AUTH_TYPES = ("gcp-default", "gcp-service-account")


class MissingExtra(LifecycleHooksError):
    """A setting asks for what a package extra brings, and the extra is not installed."""


def missing_extra(module: str, extra: str, asked_by: str) -> str | None:
    """The message for `asked_by` when `module` (brought by `extra`) cannot be imported,
    else None."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing, or the import is blocked
        found = False
    if found:
        return None
    return (
        f"{asked_by} needs the {extra!r} extra, which is not installed: "
        f"pip install 'otel-lifecycle-hooks[{extra}]'"
    )


def require_extra(module: str, extra: str, asked_by: str) -> None:
    """Raise `MissingExtra` when `module`, which `extra` brings, cannot be imported."""
    message = missing_extra(module, extra, asked_by)
    if message is not None:
        raise MissingExtra(message)


def postgres_missing(location: object) -> str | None:
    """Why a journal at `location` cannot be opened with what is installed, or None."""
    if not (isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)):
        return None
    return missing_extra("psycopg", "postgres", "a PostgreSQL journal")


def gcp_missing(auth_type: str) -> str | None:
    """Why a hook's `auth: <auth_type>` cannot get a token with what is installed, or None."""
    if auth_type not in GCP_AUTH_TYPES:
        return None
    return missing_extra("google.auth", "gcp", f"auth: {auth_type}")
