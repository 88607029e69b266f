"""Credentials travel only over https, or to this machine (loopback) for local testing."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from ..spec.model import AuthSpec
from .errors import TRANSPORT_REFUSED, AuthError

_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


def is_loopback_host(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 (also IPv4-mapped) and the name `localhost`."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def check_transport(url: str, auth: AuthSpec, *, has_credentials: bool = False) -> None:
    """Refuse to send credentials over a channel others could read.

    A request carries credentials when `auth` is not `none` or, as the caller knows,
    `has_credentials` (e.g. the hook writes its own `Authorization` header). Such a request must
    use `https://`, unless its host is loopback. Raises `AuthError` (error_type
    `auth.transport_refused`); the message names the scheme and host only, as a URL's query may
    hold a secret.
    """
    if auth.type == "none" and not has_credentials:
        return
    what = f"auth: {auth.type}" if auth.type != "none" else "an Authorization header"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        raise AuthError(
            f"refusing to send credentials ({what}): the URL could not be parsed; "
            "write an absolute https:// URL",
            error_type=TRANSPORT_REFUSED,
        ) from None
    scheme = parts.scheme.lower()
    if scheme == "https" and host:
        return
    if scheme == "http" and host and is_loopback_host(host):
        return
    shown = f"{scheme}://{host}" if scheme or host else "(no scheme or host)"
    raise AuthError(
        f"refusing to send credentials ({what}) to {shown}: use https://, or a loopback host "
        "(127.0.0.1, [::1], localhost) for local testing",
        error_type=TRANSPORT_REFUSED,
    )
