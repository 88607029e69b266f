"""What "loopback" means, once, for every part that asks: template validation, the credential
guard and the HTTP client's choice of a direct connection.

Loopback is an allow-list of spellings that never reach a resolver:

- the name `localhost` (hosts are case-insensitive), which the HTTP client connects to as
  127.0.0.1 and then ::1 without a lookup (`loopback_addresses`);
- an IPv4 address in 127.0.0.0/8 written as a canonical dotted quad (`127.0.0.1`);
- `::1` (bracketed in a URL) and its IPv4-mapped form `::ffff:127.x.y.z`.

Anything else is not loopback, however it would resolve: `localhost.` (a name the resolver
may send to DNS), a zone id (`::1%lo`), percent-encoded or whitespace-bearing hosts
(`127.0.0.1%09`), and the numeric forms C resolvers read their own way (`2130706433`,
`0177.0.0.1`, `0x7f.0.0.1`, `127.1`). Whoever controls the resolver (or the name) would
otherwise choose where credentials sent "to loopback" go. `ambiguous_host_reason` names the
hosts no part of the package sends to at all, since what they reach is not what they say.
"""

from __future__ import annotations

import functools
import ipaddress
import re

LOCALHOST = "localhost"
# How an error message says what is accepted.
LOOPBACK_FORMS = "localhost, a 127.x.y.z address such as 127.0.0.1, or [::1]"
# localhost's addresses, in the order /etc/hosts conventionally lists them.
_LOCALHOST_ADDRESSES = ("127.0.0.1", "::1")
# The characters of an address literal: no zone id (%), no whitespace, no encoding.
_LITERAL = re.compile(r"[0-9a-f:.]+")
# A host whose last label is a number: a resolver reads it as an IPv4 address in some form.
_ENDS_IN_NUMBER = re.compile(r"(?:^|\.)(?:[0-9]+|0x[0-9a-f]*)\.?\Z")


# Asked several times per HTTP attempt (the client's route, the credential guard) about the
# few hosts a template names; parsing an address each time was a visible part of a delivery.
@functools.lru_cache(maxsize=1024)
def is_loopback_host(host: str) -> bool:
    """True for `localhost`, a canonical 127.x.y.z, or ::1 / ::ffff:127.x.y.z (brackets
    allowed); False for every other spelling, whatever it would resolve to."""
    lowered = host.lower()
    bracketed = lowered.startswith("[") and lowered.endswith("]")
    if bracketed:
        lowered = lowered[1:-1]
    elif lowered == LOCALHOST:
        return True
    if not _LITERAL.fullmatch(lowered):
        return False
    try:
        address = ipaddress.ip_address(lowered)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        # Only the canonical form: brackets are for IPv6, and ipaddress already refuses
        # leading zeros and short forms; this keeps it so whatever its version does.
        return not bracketed and str(address) == lowered and address.is_loopback
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def loopback_addresses(host: str) -> tuple[str, ...]:
    """The address literals to connect to for loopback `host`, tried in order; no lookup.

    Raises ValueError for a host that is not loopback (`is_loopback_host`)."""
    if not is_loopback_host(host):
        raise ValueError(f"{host!r} is not a loopback host; write {LOOPBACK_FORMS}")
    lowered = host.lower()
    if lowered == LOCALHOST:
        return _LOCALHOST_ADDRESSES
    return (lowered.strip("[]"),)


# A webhook's URL keeps its host from one delivery to the next: each host is checked once.
@functools.lru_cache(maxsize=256)
def ambiguous_host_reason(host: str) -> str | None:
    """Why a resolver would not read `host` (a URL's host, without brackets) as it is written,
    or None when it would: percent-encoding, whitespace or control characters, a zone id, or a
    number that is not a canonical dotted-quad address. The reason names the valid forms."""
    lowered = host.lower()
    if "%" in host:
        why = "holds a percent sign (an encoded character or an IPv6 zone id)"
    elif any(not char.isprintable() or char.isspace() for char in host):
        why = "holds whitespace or a control character"
    elif _ENDS_IN_NUMBER.search(lowered) and not _is_canonical_ipv4(lowered):
        why = "is a number a resolver reads as an IPv4 address of its own choosing"
    else:
        return None
    return (
        f"host {host!r} {why}; write a DNS name, four decimal numbers (10.0.0.1) or an IPv6 "
        f"address in brackets; a loopback host is {LOOPBACK_FORMS}"
    )


def _is_canonical_ipv4(host: str) -> bool:
    try:
        return str(ipaddress.IPv4Address(host)) == host
    except ValueError:
        return False
