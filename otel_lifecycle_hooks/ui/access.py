"""Which requests the page's server answers: pure decisions over a request's parts.

The server binds a loopback address only, yet any web page the operator opens can make their
browser send requests to it, a DNS-rebinding page can even make them same-origin under a
name the attacker controls, and any other server on 127.0.0.1 (one the agent runs, say) is
sent every cookie the browser holds for 127.0.0.1, whatever its port. So:

- every request must name this server in its Host header as a loopback address or
  `localhost` with the bound port (a rebinding page's Host is the attacker's name: refused);
- the page's shell (`/`, its script and style) holds no data and is served without the token;
- every data and action request must carry the token in the `X-Lifecycle-Hooks-Token`
  header. A cross-origin page cannot set a custom header without a CORS preflight, which this
  server never grants. The token is never taken from a cookie (a cookie would ride to every
  port of 127.0.0.1) nor from a query (which lands in logs and histories): the printed URL
  holds it in its fragment, which browsers never send, and the page keeps it in
  sessionStorage, which is scoped to the page's origin, port included.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from ..loopback import is_loopback_host

TOKEN_HEADER = "X-Lifecycle-Hooks-Token"
# The printed URL's fragment: `#token=...`.
TOKEN_FRAGMENT = "token"
# The page's shell: no journal data, so no token needed to load it.
SHELL_PATHS = frozenset({"/", "/app.js", "/app.css"})

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


def token_matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def check(
    *,
    method: str,
    path: str,
    host_header: str | None,
    header_token: str | None,
    origin: str | None,
    port: int,
    token: str,
) -> Refusal | None:
    """None when the request may be answered, else why not."""
    if not allowed_host(host_header, port):
        return Refusal(421, f"this server answers only to 127.0.0.1:{port} or localhost:{port}")
    # A sandboxed frame or a file sends Origin `null`: never this page, refused as well.
    if origin is not None and not _same_origin(origin, port):
        return Refusal(403, "requests from another origin are refused")
    if method not in ("GET", "HEAD", "POST"):
        return Refusal(405, "only GET and POST are answered")
    if method != "POST" and path in SHELL_PATHS:
        return None
    if not token_matches(header_token, token):
        return Refusal(
            401 if method != "POST" else 403,
            f"a request for the journal needs the token in the {TOKEN_HEADER} header: open "
            "the URL that `otel-lifecycle-hooks ui` printed (its #token=... included)",
        )
    return None


def _same_origin(origin: str, port: int) -> bool:
    scheme, sep, rest = origin.partition("://")
    return scheme == "http" and bool(sep) and allowed_host(rest, port)
