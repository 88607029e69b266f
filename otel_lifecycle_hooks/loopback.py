"""What "loopback" means, once, for every part that asks: template validation, the credential
guard and the HTTP client's choice of a direct connection.

A host is loopback when it is written as an address of this machine's loopback interface -
127.0.0.0/8, ::1, or ::1's IPv4-mapped form ::ffff:127.x.y.z - or is the name `localhost`
(any case, with or without the root's trailing dot). Nothing is resolved: a name that happens
to resolve to 127.0.0.1, or that starts with "127.", is not loopback, since whoever controls
the resolver (or the name) would otherwise choose where credentials go.
"""

from __future__ import annotations

import functools
import ipaddress

_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


# Asked several times per HTTP attempt (the client's route, the credential guard) about the
# few hosts a template names; parsing an address each time was a visible part of a delivery.
@functools.lru_cache(maxsize=1024)
def is_loopback_host(host: str) -> bool:
    """True for a loopback address literal (brackets allowed) or the name localhost."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host in _LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 zone id is not a host
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
