"""One attempt of an `http` or `webhook` action: one request through the shared, pooled client.

`send` performs exactly one request and classifies how it ended (`AttemptResult`); retries,
spans for the hook and policies belong to the engine. What `send` guarantees:

- The whole attempt - connect, TLS, sending, and reading up to `max_body` bytes of the
  response - ends by `timeout` seconds after it started: every socket operation waits only
  for the time left (see `transport.py`), so a server that drips bytes cannot stretch it.
- Redirects are never followed (a 3xx is a permanent failure naming the Location).
- At most `max_body` bytes of the response are read; the rest is never downloaded.
- The attempt is one CLIENT span, child of the current span (the hook's), with the stable
  HTTP semantic conventions (`http.request.method`, `url.full` as redacted, `server.address`,
  `server.port`, `network.protocol.version`, `http.response.status_code`, `error.type`), and
  its request carries the current trace context (`traceparent`) through the global
  propagator. Its duration is recorded in the `http.client.request.duration` histogram.
- No cookies are kept: a cookie one target sets (perhaps its session credential) never rides
  along on later requests.

error_type values: `http.<status>`, `http.redirect`, `timeout`, the transport's error class
for failures on the wire (`ConnectError`, `ReadError`, `WriteError`, `RemoteProtocolError`,
`ProxyError`), `DNSError` for a name that does not resolve (transient: resolvers flap while
containers start), `TLSError` for a failed TLS handshake or certificate check (permanent:
retrying does not change a certificate), `InvalidURL` / `UnsupportedProtocol` /
`LocalProtocolError` (permanent). Messages never contain the URL's path or query string or a
header value: they may hold secrets.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from .. import __version__
from ..render import RenderedRequest
from ..tracecontext import trace_headers
from . import wire
from .base import AttemptResult
from .transport import Connection, ConnectionPool, Target, basic_credentials
from .wire import Response, TransportError

DEFAULT_MAX_BODY = 64 * 1024
USER_AGENT = f"otel-lifecycle-hooks/{__version__}"
INSTRUMENTATION_SCOPE = "otel_lifecycle_hooks.http"

# Content types whose body is kept in the result, for response capture.
_TEXT_TYPES = ("application/json", "text/")
# The methods the HTTP conventions name; any other is `_OTHER` on the span.
_KNOWN_METHODS = frozenset(
    {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}
)
# The HTTP conventions' advice for http.client.request.duration, in seconds.
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
# Headers the client writes itself, from the body it sends.
_FRAMING_HEADERS = ("content-length", "transfer-encoding")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_READ_CHUNK = 64 * 1024  # bytes asked of the response per read


class HttpClient:
    """The client every hook of a process shares: a keep-alive pool, a tracer and a histogram."""

    def __init__(
        self,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.pool = ConnectionPool(environ)
        self.tracer = trace.get_tracer(INSTRUMENTATION_SCOPE, __version__, tracer_provider)
        meter = metrics.get_meter(INSTRUMENTATION_SCOPE, __version__, meter_provider)
        self.duration = meter.create_histogram(
            "http.client.request.duration",
            unit="s",
            description="Duration of HTTP client requests.",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )
        self.propagator = _propagator()

    def close(self) -> None:
        """Close the idle connections; the client is not used afterwards."""
        self.pool.close()


def _propagator() -> Any:
    """The global propagator (OTEL_PROPAGATORS, or what the host application set), or None
    for W3C trace context written directly (`tracecontext.py`) when nothing could have asked
    for more.

    Loading the global one reads the propagators' entry points (about 4 ms of every start-up).
    Without OTEL_PROPAGATORS, and with neither `opentelemetry.propagate` nor
    `opentelemetry.baggage` imported, the global one is the default (trace context and
    baggage) and there is no baggage in any context to send: trace context is all it would
    write. Chosen when the client is made, at the first HTTP hook.
    """
    if (
        os.environ.get("OTEL_PROPAGATORS")
        or "opentelemetry.propagate" in sys.modules
        or "opentelemetry.baggage" in sys.modules
    ):
        from opentelemetry import propagate

        return propagate.get_global_textmap()
    return None


def make_client(tracer_provider: Any = None, meter_provider: Any = None) -> HttpClient:
    """The one client shared by all hooks: pooled, no redirects, no cookies, traced.

    `tracer_provider` / `meter_provider` default to the global ones. Proxies and CA files
    come from the environment (`https_proxy`, `no_proxy`, `SSL_CERT_FILE`...), as the
    platform tells every client in a container how to reach the outside.
    """
    return HttpClient(tracer_provider, meter_provider)


def send(
    client: HttpClient,
    request: RenderedRequest,
    timeout: float,
    *,
    extra_headers: Mapping[str, str] = {},
    max_body: int = DEFAULT_MAX_BODY,
    redact_url: Callable[[str], str] | None = None,
) -> AttemptResult:
    """Send `request` once, within `timeout` seconds in total, and classify the outcome.

    `extra_headers` (auth, X-Scion-Hook-ID) replace the request's own headers of the same
    name. `redact_url` rewrites the URL where the CLIENT span records it.
    Never raises: every failure becomes an `AttemptResult`.
    """
    started = time.monotonic()
    try:
        target = Target(request.url)
    except TransportError as exc:
        return _classify_error(exc, request.url, 0.0, None)
    method = request.method.upper()
    span = client.tracer.start_span(
        method if method in _KNOWN_METHODS else "HTTP",
        kind=SpanKind.CLIENT,
        attributes=_span_attributes(method, request.url, target, redact_url),
    )
    headers = _headers(request, extra_headers, target)
    if client.propagator is None:
        headers.update(trace_headers(span.get_span_context()))
    else:
        client.propagator.inject(headers, context=trace.set_span_in_context(span))
    exchange = _Exchange(client.pool, target, method, request.body, started + timeout)
    try:
        result = exchange.run(list(headers.items()), max_body, timeout)
    except (wire.TimeoutException, TimeoutError):
        result = AttemptResult(
            kind="timeout",
            duration=time.monotonic() - started,
            status_code=exchange.status,
            error_type="timeout",
            message=f"no complete response within {timeout:g}s",
        )
    except Exception as exc:  # noqa: BLE001 - an attempt never raises into the engine
        result = _classify_error(exc, request.url, time.monotonic() - started, exchange.status)
    _end_span(span, client, result, method, target)
    return result


class _Exchange:
    """One request and its response on a pooled connection; `status` survives a failed read."""

    def __init__(
        self, pool: ConnectionPool, target: Target, method: str, body: bytes | None, deadline: float
    ) -> None:
        self.pool = pool
        self.target = target
        self.method = method
        self.body = body
        self.deadline = deadline
        self.status: int | None = None

    def run(self, headers: list[tuple[str, str]], max_body: int, timeout: float) -> AttemptResult:
        started = self.deadline - timeout
        connection, response = self._request(headers)
        self.status = response.status
        try:
            body = self._read(response, max_body)
        except BaseException:
            connection.close()
            raise
        if response.complete and not response.will_close:
            self.pool.release(connection)
        else:  # unread body, or the server closes: the connection cannot carry another request
            connection.close()
        return _classify_response(response, body, time.monotonic() - started)

    def _request(self, headers: list[tuple[str, str]]) -> tuple[Connection, Response]:
        try:
            return self._request_on(self.pool.acquire(self.target, self.deadline), headers)
        except _ClosedUnderUs:
            # A kept-alive connection the server closed just as it was reused, before any byte
            # of an answer: sent once more, on a new connection (the request carries its
            # idempotency key, X-Scion-Hook-ID, should the server have seen it).
            fresh = self.pool.acquire(self.target, self.deadline, fresh=True)
            return self._request_on(fresh, headers)

    def _request_on(
        self, connection: Connection, headers: list[tuple[str, str]]
    ) -> tuple[Connection, Response]:
        target = self.target
        path = target.path
        if connection.absolute_form:
            path = f"{target.scheme}://{target.authority}{target.path}"
            if connection.proxy is not None and connection.proxy.authorization:
                headers = [*headers, ("Proxy-Authorization", connection.proxy.authorization)]
        try:
            return connection, connection.request(self.method, path, headers, self.body)
        except (wire.WriteError, wire.ServerDisconnected) as exc:
            connection.close()
            if connection.reused:
                raise _ClosedUnderUs from exc
            raise
        except BaseException:
            connection.close()
            raise

    def _read(self, response: Response, max_body: int) -> bytes:
        """Up to max_body bytes of the body; the rest is left unread."""
        if 300 <= response.status < 400 or max_body <= 0:
            return b""
        chunks: list[bytes] = []
        size = 0
        while size < max_body:
            chunk = response.read(min(_READ_CHUNK, max_body - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)


class _ClosedUnderUs(Exception):
    """A reused connection failed before any byte of an answer came back."""


def _headers(
    request: RenderedRequest, extra_headers: Mapping[str, str], target: Target
) -> dict[str, str]:
    """The header block, names as written; a later source replaces an earlier one whatever the
    case of its name: defaults, the template's headers, then auth and the hook id."""
    merged: dict[str, tuple[str, str]] = {
        "host": ("Host", target.host_header),
        "user-agent": ("User-Agent", USER_AGENT),
        # A compressed body could inflate far beyond max_body inside a single read.
        "accept-encoding": ("Accept-Encoding", "identity"),
    }
    if target.userinfo is not None:
        merged["authorization"] = ("Authorization", basic_credentials(*target.userinfo))
    for source in (request.headers, extra_headers):
        for name, value in source.items():
            merged[name.lower()] = (name, value)
    for name in _FRAMING_HEADERS:
        merged.pop(name, None)
    if request.body is not None:
        merged["content-length"] = ("Content-Length", str(len(request.body)))
    elif request.method.upper() in _BODY_METHODS:
        merged["content-length"] = ("Content-Length", "0")
    return dict(merged.values())


# -- the CLIENT span ---------------------------------------------------------------------------


def _span_attributes(
    method: str, url: str, target: Target, redact_url: Callable[[str], str] | None
) -> dict[str, Any]:
    shown = _without_userinfo(url)
    attributes: dict[str, Any] = {
        "http.request.method": method if method in _KNOWN_METHODS else "_OTHER",
        "url.full": redact_url(shown) if redact_url is not None else shown,
        "server.address": target.host,
        "server.port": target.port,
    }
    if method not in _KNOWN_METHODS:
        attributes["http.request.method_original"] = method
    return attributes


def _end_span(
    span: trace.Span, client: HttpClient, result: AttemptResult, method: str, target: Target
) -> None:
    measured: dict[str, Any] = {
        "http.request.method": method if method in _KNOWN_METHODS else "_OTHER",
        "server.address": target.host,
        "server.port": target.port,
    }
    status = result.status_code
    if status is not None:
        measured["network.protocol.version"] = "1.1"
        measured["http.response.status_code"] = status
    error_type = None
    if status is not None and status >= 400:
        error_type = str(status)
    elif status is None and not result.ok:
        error_type = result.error_type or "_OTHER"
    if error_type is not None:
        measured["error.type"] = error_type
    client.duration.record(result.duration, measured)
    if span.is_recording():
        span.set_attributes(measured)
        if error_type is not None:
            span.set_status(Status(StatusCode.ERROR, result.message))
    span.end()


def _without_userinfo(url: str) -> str:
    """The URL as a span may record it: credentials in the authority are never kept."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = next((i for i, c in enumerate(rest) if c in "/?#"), len(rest))
    authority = rest[:end]
    if "@" not in authority:
        return url
    return f"{scheme}://REDACTED:REDACTED@{authority.rpartition('@')[2]}{rest[end:]}"


# -- classification ----------------------------------------------------------------------------


def _classify_response(response: Response, body: bytes, duration: float) -> AttemptResult:
    status = response.status
    content_type = response.headers.get("content-type")
    kept_body, kept_type = (body, content_type) if _is_text(content_type) else (None, None)
    if 200 <= status < 300:
        return AttemptResult(
            kind="ok",
            duration=duration,
            status_code=status,
            response_body=kept_body,
            response_content_type=kept_type,
        )
    if 300 <= status < 400:
        location = response.headers.get("location")
        where = f" to {_safe_url(location)}" if location else ""
        return AttemptResult(
            kind="permanent",
            duration=duration,
            status_code=status,
            error_type="http.redirect",
            message=f"HTTP {status} redirect{where} (redirects are not followed)",
        )
    transient = status == 429 or status >= 500
    return AttemptResult(
        kind="transient" if transient else "permanent",
        duration=duration,
        status_code=status,
        error_type=f"http.{status}",
        message=f"HTTP {status} {_reason(status)}".rstrip(),
        retry_after=parse_retry_after(response.headers.get("retry-after"), time.time()),
        response_body=kept_body,
        response_content_type=kept_type,
    )


def _classify_error(
    exc: BaseException, url: str, duration: float, status: int | None
) -> AttemptResult:
    host = _host_of(url)
    causes = list(_cause_chain(exc))
    # ssl is imported only when an https target is met: without it there is no TLS error.
    ssl = sys.modules.get("ssl")
    tls_error = ssl and next((c for c in causes if isinstance(c, ssl.SSLError)), None)
    if tls_error is not None:
        return AttemptResult(
            kind="permanent",
            duration=duration,
            error_type="TLSError",
            message=f"TLS handshake with {host} failed: {_ssl_reason(tls_error)}",
        )
    if isinstance(exc, wire.ProxyError):  # its message names the proxy, not the target
        return AttemptResult(
            kind="transient",
            duration=duration,
            status_code=status,
            error_type="ProxyError",
            message=f"ProxyError on the way to {host}: {exc}",
        )
    if any(isinstance(cause, socket.gaierror) for cause in causes):
        return AttemptResult(
            kind="transient",
            duration=duration,
            error_type="DNSError",
            message=f"cannot resolve host {host}",
        )
    if isinstance(exc, (wire.InvalidURL, wire.UnsupportedProtocol, wire.LocalProtocolError)):
        return AttemptResult(
            kind="permanent",
            duration=duration,
            error_type=type(exc).__name__,
            message=f"request to {host} cannot be sent: {exc}",
        )
    error = _wire_error(exc)
    if error is not None:
        # ServerDisconnected is the transport's own distinction (worth a retry on a reused
        # connection); outside, it is one of the ways a server breaks the protocol.
        name = type(error).__name__
        if isinstance(error, wire.RemoteProtocolError):
            name = "RemoteProtocolError"
        return AttemptResult(
            kind="transient",
            duration=duration,
            status_code=status,
            error_type=name,
            message=f"{name} talking to {host}: {_os_reason(causes)}",
        )
    return AttemptResult(
        kind="permanent",
        duration=duration,
        status_code=status,
        error_type=type(exc).__name__,
        message=f"unexpected {type(exc).__name__} sending to {host}",
    )


def _wire_error(exc: BaseException) -> TransportError | None:
    """The transport error a failure on the wire stands for; None for anything else."""
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, OSError):
        return wire.ReadError(exc.strerror or type(exc).__name__)
    return None


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header: delay-seconds or an HTTP-date.

    `now` is the current unix time (a parameter so that the date form is testable).
    Returns None for a missing or unparseable value; never a negative delay.
    """
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        import email.utils  # the HTTP-date form only

        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # HTTP-dates are GMT; a naive parse means "-0000"
            return None
        return max(0.0, when.timestamp() - now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


# -- small helpers -----------------------------------------------------------------------------


def _is_text(content_type: str | None) -> bool:
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media.startswith(_TEXT_TYPES) or media.endswith("+json")


def _reason(status: int) -> str:
    from http import HTTPStatus  # failures only: its enum costs every start-up otherwise

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _safe_url(url: str) -> str:
    """scheme://host/path of a URL: query strings and userinfo may carry credentials."""
    try:
        parsed = urlsplit(url)
        port = f":{parsed.port}" if parsed.port else ""
    except ValueError:  # a malformed Location is only named, never used
        return "(unparseable location)"
    if not parsed.hostname:
        return parsed.path or "/"
    return f"{parsed.scheme}://{parsed.hostname}{port}{parsed.path}"


def _host_of(url: str) -> str:
    try:
        parsed = urlsplit(url)
        port = f":{parsed.port}" if parsed.port else ""
    except ValueError:
        return "(invalid url)"
    return f"{parsed.hostname}{port}" if parsed.hostname else "(no host)"


def _cause_chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _ssl_reason(exc: Any) -> str:
    if hasattr(exc, "verify_message"):  # ssl.SSLCertVerificationError
        return f"certificate verify failed ({exc.verify_message})"
    return exc.reason or type(exc).__name__


def _os_reason(causes: list[BaseException]) -> str:
    for cause in causes:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
    return str(causes[0]) or type(causes[0]).__name__
