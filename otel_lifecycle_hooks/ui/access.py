"""Which requests the page's server answers: pure decisions over a request's parts.

The server binds a loopback address only, yet any web page the operator opens can make their
browser send requests to it, and a DNS-rebinding page can even make them same-origin under a
name the attacker controls. So every request must:

- name this server in its Host header as a loopback address or `localhost` with the bound
  port (a rebinding page's Host is the attacker's name: refused);
- carry the token the server printed: in the query of the first page load, then in the cookie
  that load sets (HttpOnly, SameSite=Strict: no other site's page sends it), or in a header;
- for a request that changes something (a POST), carry the token in a header as well: a
  cross-origin page cannot set a custom header without a CORS preflight, which this server
  never grants.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from ..loopback import is_loopback_host

TOKEN_HEADER = "X-Lifecycle-Hooks-Token"
TOKEN_QUERY = "token"

# The page's scripts, styles and data come from this server only; no inline script or style
# (a journaled body that slipped into markup could not run), no frames, no form posts.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


@dataclass(frozen=True)
class Refusal:
    """Why a request is not answered: its HTTP status and a line saying what would do."""

    status: int
    reason: str


def cookie_name(port: int) -> str:
    # Per port: cookies do not tell ports apart, and two pages may run side by side.
    return f"lifecycle-hooks-ui-{port}"


def cookie_header(token: str, port: int) -> str:
    """The Set-Cookie value that lets the page's later requests prove the token."""
    return f"{cookie_name(port)}={token}; HttpOnly; SameSite=Strict; Path=/"


def allowed_host(host_header: str | None, port: int) -> bool:
    """True when the Host header names a loopback address or `localhost` with `port`."""
    if not host_header:
        return False
    name, colon, given_port = host_header.strip().rpartition(":")
    if not colon or not name or given_port != str(port):
        return False  # the port is always written: the server never runs on 80
    if name.startswith("[") != name.endswith("]"):
        return False
    return is_loopback_host(name)


def cookie_token(cookie_header_value: str | None, port: int) -> str | None:
    """The token in the request's Cookie header, if it holds this server's cookie."""
    from http.cookies import CookieError, SimpleCookie

    if not cookie_header_value:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(cookie_header_value)
    except CookieError:
        return None
    morsel = jar.get(cookie_name(port))
    return morsel.value if morsel is not None else None


def token_matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def check(
    *,
    method: str,
    host_header: str | None,
    header_token: str | None,
    cookie_token: str | None,
    query_token: str | None,
    origin: str | None,
    port: int,
    token: str,
    page_load: bool,
) -> Refusal | None:
    """None when the request may be answered, else why not. `page_load`: a GET of the page
    itself, the one request that may prove the token in its query."""
    if not allowed_host(host_header, port):
        return Refusal(421, f"this server answers only to 127.0.0.1:{port} or localhost:{port}")
    # A sandboxed frame or a file sends Origin `null`: never this page, refused as well.
    if origin is not None and not _same_origin(origin, port):
        return Refusal(403, "requests from another origin are refused")
    if method == "POST":
        # The header alone: a cookie rides along on cross-site requests a page can forge.
        if not token_matches(header_token, token):
            return Refusal(403, f"a POST needs the token in the {TOKEN_HEADER} header")
        return None
    if method not in ("GET", "HEAD"):
        return Refusal(405, "only GET and POST are answered")
    proofs: list[str | None] = [header_token, cookie_token] + ([query_token] if page_load else [])
    if not any(token_matches(proof, token) for proof in proofs):
        return Refusal(401, "open the URL that `otel-lifecycle-hooks ui` printed (token included)")
    return None


def _same_origin(origin: str, port: int) -> bool:
    scheme, sep, rest = origin.partition("://")
    return scheme == "http" and bool(sep) and allowed_host(rest, port)
