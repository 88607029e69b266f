"""Credentials travel only over https, or to this machine (loopback) for local testing."""

from __future__ import annotations

from urllib.parse import urlsplit

from ..loopback import LOOPBACK_FORMS, is_loopback_host
from ..template.model import AuthSpec
from .errors import TRANSPORT_REFUSED, AuthError

__all__ = ["check_transport", "is_loopback_host"]


def check_transport(url: str, auth: AuthSpec, *, has_credentials: bool = False) -> None:
    """Refuse to send credentials over a channel others could read.

    A request carries credentials when `auth` is not `none`, when its URL holds userinfo
    (`user:password@`, sent as Basic auth) or, as the caller knows, `has_credentials` (e.g. the
    hook writes its own `Authorization` header). Such a request must use `https://`, unless its
    host is loopback (`loopback.py`). Raises `AuthError` (error_type `auth.transport_refused`);
    the message names the scheme and host only, as a URL's query may hold a secret.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        userinfo = "@" in parts.netloc
    except ValueError:
        if auth.type == "none" and not has_credentials:
            return
        raise AuthError(
            "refusing to send credentials: the URL could not be parsed; "
            "write an absolute https:// URL",
            error_type=TRANSPORT_REFUSED,
        ) from None
    if auth.type == "none" and not has_credentials and not userinfo:
        return
    if auth.type != "none":
        what = f"auth: {auth.type}"
    elif has_credentials:
        what = "an Authorization header"
    else:
        what = "a user name and password in the URL"
    scheme = parts.scheme.lower()
    if scheme == "https" and host:
        return
    if scheme == "http" and host and is_loopback_host(host):
        return
    shown = f"{scheme}://{host}" if scheme or host else "(no scheme or host)"
    raise AuthError(
        f"refusing to send credentials ({what}) to {shown}: use https://, or a loopback host "
        f"({LOOPBACK_FORMS}) for local testing",
        error_type=TRANSPORT_REFUSED,
    )
