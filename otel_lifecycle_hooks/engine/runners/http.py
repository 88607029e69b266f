"""One attempt of an http or webhook hook: check where the request goes, add its credentials
and signature, and send it once (actions/http.py)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ...actions.base import AttemptResult
from ...render import RenderedRequest
from ...variables import Variables
from .base import ActionServices, Attempt, Refusal

if TYPE_CHECKING:
    from ...actions.http import Origin


class HttpRunner:
    """Runs http and webhook actions: one request per attempt."""

    renders = True

    def attempt(self, services: ActionServices, attempt: Attempt) -> AttemptResult:
        """Send the rendered request once."""
        assert isinstance(attempt.rendered, RenderedRequest)
        return send_request(services, attempt, attempt.rendered, attempt.timeout)


def send_request(
    services: ActionServices, attempt: Attempt, request: RenderedRequest, timeout: float
) -> AttemptResult:
    """Send `request` for `attempt`'s hook once, within `timeout` seconds, with the hook's
    credentials and signature; raises `Refusal` when it may not be sent at all."""
    # Imported here, not above: httpx and its instrumentation would cost `run` 180 ms or more
    # before its agent starts (python -X importtime, busy 2-core machine); a template's first
    # HTTP hook pays it instead. tests/test_startup_imports.py pins it.
    from ...actions.http import origin_of, send
    from ...auth import AuthError, check_transport
    from ...auth.errors import ORIGIN_REFUSED

    headers: dict[str, str] = {"X-Scion-Hook-ID": attempt.hook_id}
    action = attempt.hook.action
    has_written_credentials = "authorization" in {k.lower() for k in request.headers}
    # Where the template's own text says the request goes; checked before any token is
    # made, and again by `send` on the request as httpx is about to send it.
    fixed = _fixed_origin(action.url)
    origin = None
    if fixed is not None:
        literal, origin = fixed
        # A rendered URL that begins with the template's literal text (the whole
        # authority) has that text's origin: it is parsed again only when it does not.
        if not request.url.startswith(literal) and origin_of(request.url) != origin:
            raise Refusal(
                ORIGIN_REFUSED,
                f"the rendered URL leaves {origin.scheme}://{origin.host}:{origin.port}, "
                "the origin the template's URL fixes; nothing was sent",
            )
    try:
        # Credentials only over https (loopback excepted), checked on the rendered URL:
        # a URL from a variable cannot be checked at load time.
        check_transport(request.url, action.auth, has_credentials=has_written_credentials)
        if action.type in ("http", "jsonrpc") and action.auth.type != "none":
            environ = _env_for_auth(services, attempt.variables)
            headers.update(services.credentials().headers_for(action.auth, request.url, environ))
        if action.signing_secret_env:
            headers.update(
                services.credentials().signing_headers(
                    action,
                    attempt.hook_id,
                    request.body or b"",
                    _env_for_auth(services, attempt.variables),
                    timestamp=int(services.clock.wall()),
                )
            )
    except AuthError as exc:
        raise Refusal(getattr(exc, "error_type", "AuthError"), str(exc)) from None
    redact_url = services.redactor(attempt.variables).redact_url
    return send(
        services.http_client(),
        request,
        timeout,
        extra_headers=headers,
        redact_url=redact_url,
        credentialed=action.auth.type != "none" or has_written_credentials,
        origin=origin,
    )


def _env_for_auth(services: ActionServices, variables: Variables) -> Mapping[str, str]:
    """Secrets named by `token_env` come from the template's env, then the process's."""
    merged = dict(services.template.env)
    merged.update(services.environ)
    return merged


@functools.lru_cache(maxsize=1024)
def _fixed_origin(url_template: str | None) -> tuple[str, Origin] | None:
    """(the literal text before the URL template's first `${`, the origin it fixes), once per
    template: every execution of a hook checks its rendered URL against it."""
    origin = literal_origin(url_template)
    if origin is None or url_template is None:
        return None
    return url_template.partition("${")[0], origin


def literal_origin(url_template: str | None) -> Origin | None:
    """The origin (scheme, host, port) a URL template's literal text fixes: everything before
    its first `${` when that already holds the whole authority; None when a variable forms
    part of the scheme, host or port (validate decides which variables may)."""
    if not url_template:
        return None
    from ...actions.http import origin_of  # see send_request: httpx only when a hook sends

    literal, variable, _ = url_template.partition("${")
    if not variable:
        return origin_of(literal)
    _, separator, rest = literal.partition("://")
    if not separator or not any(mark in rest for mark in "/?#"):
        return None
    return origin_of(literal)
