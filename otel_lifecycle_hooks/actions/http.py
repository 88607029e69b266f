"""One attempt of an `http` or `webhook` action, through one pooled, instrumented httpx.Client.

`send` performs exactly one request and classifies how it ended (`AttemptResult`); retries,
spans for the hook and policies belong to the engine. What `send` guarantees:

- The whole attempt - connect, TLS, sending, and reading up to `max_body` bytes of the
  response - ends by `timeout` seconds after it started. httpx's timeouts bound each socket
  operation; the client built by `make_client` also clamps every socket operation to the time
  left (see `_DeadlineBackend`), so a server that drips bytes cannot stretch an attempt.
- Redirects are never followed (a 3xx is a permanent failure naming the Location).
- At most `max_body` bytes of the response are read; the rest is never downloaded.

error_type values: `http.<status>`, `http.redirect`, `timeout`, the httpx exception class for
transport failures (`ConnectError`, `ReadError`, `WriteError`, `RemoteProtocolError`,
`ProxyError`...), `DNSError` for a name that does not resolve (transient: resolvers flap while
containers start), `TLSError` for a failed TLS handshake or certificate check (permanent:
retrying does not change a certificate), `InvalidURL` / `UnsupportedProtocol` (permanent).
Messages never contain the URL's query string or a header value: they may hold secrets.
"""

from __future__ import annotations

import contextvars
import email.utils
import logging
import math
import os
import socket
import ssl
import time
import typing
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any

import httpcore
import httpx

from .. import __version__
from ..render import RenderedRequest
from .base import AttemptResult

# The pool is shared by every hook of the process.
MAX_CONNECTIONS = 32
MAX_KEEPALIVE_CONNECTIONS = 16
KEEPALIVE_EXPIRY = 30.0  # seconds
DEFAULT_MAX_BODY = 64 * 1024

_STABILITY_OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"

# Content types whose body is kept in the result, for response capture.
_TEXT_TYPES = ("application/json", "text/")

# Monotonic deadline of the attempt running in this context (thread), read by the backend.
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "otel_lifecycle_hooks_http_deadline", default=None
)
# How the attempt running in this context redacts its URL, for the CLIENT span and httpx's log:
# a webhook URL may be the secret itself.
_redact_url: contextvars.ContextVar[Callable[[str], str] | None] = contextvars.ContextVar(
    "otel_lifecycle_hooks_http_redact_url", default=None
)
_URL_ATTRIBUTES = ("url.full", "http.url")  # stable and old HTTP semantic conventions


def make_client(
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> httpx.Client:
    """The one httpx.Client shared by all hooks: pooled, no redirects, instrumented.

    The client is instrumented with opentelemetry-instrumentation-httpx, so each attempt is a
    CLIENT span (stable HTTP semantic conventions) and carries a `traceparent` header.
    `tracer_provider` / `meter_provider` default to the global ones.

    `trust_env` stays on: in containers, HTTP(S)_PROXY / NO_PROXY and SSL_CERT_FILE are how the
    platform says how to reach the outside, and hooks must honour them like any other client.
    """
    limits = httpx.Limits(
        max_connections=MAX_CONNECTIONS,
        max_keepalive_connections=MAX_KEEPALIVE_CONNECTIONS,
        keepalive_expiry=KEEPALIVE_EXPIRY,
    )
    client = httpx.Client(
        follow_redirects=False,
        trust_env=True,
        transport=_OwnSpanTransport(limits=limits, trust_env=True),
        limits=limits,
        headers={
            "User-Agent": f"otel-lifecycle-hooks/{__version__}",
            # A compressed body could inflate far beyond max_body inside a single read.
            "Accept-Encoding": "identity",
        },
    )
    # Hook requests are independent of one another: a cookie one target sets (perhaps its
    # session credential) must not ride along on later requests. It also spares every response
    # httpx's cookie-jar bookkeeping.
    client._cookies = _NoCookies()
    for transport in _transports(client):
        _install_deadline_backend(transport)
    _instrument(client, tracer_provider, meter_provider)
    return client


class _NoCookies(httpx.Cookies):
    """A cookie jar that never keeps what a response sets."""

    def extract_cookies(self, response: httpx.Response) -> None:
        pass


class _OwnSpanTransport(httpx.HTTPTransport):
    """The client's transport, quiet to a global httpx instrumentation.

    Under `opentelemetry-instrument`, httpx is also instrumented globally; the client's own
    instrumentation (with its URL redaction) already made the attempt's CLIENT span, so the
    global one is suppressed here instead of nesting a second span with the raw URL.
    """

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        # A global instrumentation wraps the base class's method; only then is there
        # anything to suppress (attaching a context costs every request otherwise).
        if not hasattr(httpx.HTTPTransport.__dict__["handle_request"], "__wrapped__"):
            return super().handle_request(request)
        from opentelemetry.instrumentation.utils import suppress_http_instrumentation

        with suppress_http_instrumentation():
            return super().handle_request(request)


def _instrument(client: httpx.Client, tracer_provider: Any, meter_provider: Any) -> None:
    # The instrumentation reads the opt-in once per process, at the first instrument call of
    # any OTel instrumentation (not at import). Set it only if the host has not chosen: when
    # another instrumentation already initialised, the host's choice stands.
    os.environ.setdefault(_STABILITY_OPT_IN, "http")
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    HTTPXClientInstrumentor.instrument_client(
        client,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        request_hook=_redact_span_url,
    )
    _install_log_redaction()


def _redact_span_url(span: Any, request: Any) -> None:
    """The CLIENT span carries the URL as redacted for this attempt (`send`'s `redact_url`)."""
    redact = _redact_url.get()
    attributes = getattr(span, "attributes", None) or {}
    if redact is None or not span.is_recording():
        return
    for key in _URL_ATTRIBUTES:
        if key in attributes:
            span.set_attribute(key, redact(str(attributes[key])))


class _RedactRequestLine(logging.Filter):
    """httpx logs each request's URL at INFO: redact it the same way, while we are sending."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact = _redact_url.get()
        if redact is not None and isinstance(record.args, tuple):
            record.args = tuple(
                redact(str(arg)) if isinstance(arg, httpx.URL) else arg for arg in record.args
            )
        return True


def _install_log_redaction() -> None:
    logger = logging.getLogger("httpx")
    if not any(isinstance(existing, _RedactRequestLine) for existing in logger.filters):
        logger.addFilter(_RedactRequestLine())


def send(
    client: httpx.Client,
    request: RenderedRequest,
    timeout: float,
    *,
    extra_headers: Mapping[str, str] = {},
    max_body: int = DEFAULT_MAX_BODY,
    redact_url: Callable[[str], str] | None = None,
) -> AttemptResult:
    """Send `request` once, within `timeout` seconds in total, and classify the outcome.

    `extra_headers` (auth, X-Scion-Hook-ID) are added over the request's own headers.
    `redact_url` rewrites the URL wherever the instrumentation and httpx record it.
    Never raises: every failure becomes an `AttemptResult`.
    """
    started = time.monotonic()
    deadline = started + timeout
    headers = httpx.Headers(request.headers)
    headers.update(extra_headers)  # case-insensitive: an auth header replaces the template's
    token = _deadline.set(deadline)
    redact_token = _redact_url.set(redact_url)
    status: int | None = None
    try:
        with client.stream(
            request.method,
            request.url,
            headers=headers,
            content=request.body,
            timeout=httpx.Timeout(timeout),
        ) as response:
            status = response.status_code
            body = _read_bounded(response, max_body, deadline)
            return _classify_response(response, body, time.monotonic() - started)
    except httpx.TimeoutException:
        return AttemptResult(
            kind="timeout",
            duration=time.monotonic() - started,
            status_code=status,
            error_type="timeout",
            message=f"no complete response within {timeout:g}s",
        )
    except Exception as exc:  # noqa: BLE001 - an attempt never raises into the engine
        return _classify_error(exc, request.url, time.monotonic() - started, status)
    finally:
        _deadline.reset(token)
        _redact_url.reset(redact_token)


def _read_bounded(response: httpx.Response, max_body: int, deadline: float) -> bytes:
    """Up to max_body bytes of the body; the rest is left unread (the connection is dropped)."""
    if response.is_redirect or max_body <= 0:
        return b""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= max_body:
            break
        if time.monotonic() >= deadline:
            raise httpx.ReadTimeout("attempt deadline reached while reading the body")
    return b"".join(chunks)[:max_body]


def _classify_response(response: httpx.Response, body: bytes, duration: float) -> AttemptResult:
    status = response.status_code
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
    if any(isinstance(cause, ssl.SSLError) for cause in causes):
        reason = next(c for c in causes if isinstance(c, ssl.SSLError))
        return AttemptResult(
            kind="permanent",
            duration=duration,
            error_type="TLSError",
            message=f"TLS handshake with {host} failed: {_ssl_reason(reason)}",
        )
    if any(isinstance(cause, socket.gaierror) for cause in causes):
        return AttemptResult(
            kind="transient",
            duration=duration,
            error_type="DNSError",
            message=f"cannot resolve host {host}",
        )
    if isinstance(exc, (httpx.InvalidURL, httpx.UnsupportedProtocol, httpx.LocalProtocolError)):
        return AttemptResult(
            kind="permanent",
            duration=duration,
            error_type=type(exc).__name__,
            message=f"request to {host} cannot be sent: {type(exc).__name__}",
        )
    if isinstance(exc, httpx.TransportError):
        return AttemptResult(
            kind="transient",
            duration=duration,
            status_code=status,
            error_type=type(exc).__name__,
            message=f"{type(exc).__name__} talking to {host}: {_os_reason(causes)}",
        )
    return AttemptResult(
        kind="permanent",
        duration=duration,
        status_code=status,
        error_type=type(exc).__name__,
        message=f"unexpected {type(exc).__name__} sending to {host}",
    )


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


# -- the deadline-clamping network backend ---------------------------------------------------


def _time_left(exc_type: type[Exception]) -> float | None:
    deadline = _deadline.get()
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise exc_type("attempt deadline reached")
    return left


def _clamp(timeout: float | None, exc_type: type[Exception]) -> float | None:
    left = _time_left(exc_type)
    if left is None:
        return timeout
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read and write ends by the attempt's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(
            ssl_context, server_hostname, _clamp(timeout, httpcore.ConnectTimeout)
        )
        return _DeadlineStream(inner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's socket backend, with each operation bounded by the attempt's time left."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(
            host,
            port,
            _clamp(timeout, httpcore.ConnectTimeout),
            local_address=local_address,
            socket_options=socket_options,
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_unix_socket(
            path, _clamp(timeout, httpcore.ConnectTimeout), socket_options=socket_options
        )
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _transports(client: httpx.Client) -> list[Any]:
    # Proxy transports built from the environment live in the client's mounts.
    mounted = getattr(client, "_mounts", {}) or {}
    return [client._transport, *(t for t in mounted.values() if t is not None)]


def _install_deadline_backend(transport: Any) -> None:
    # httpx takes no network_backend argument; its connection pool holds one, and hands it to
    # each connection it opens. Feature-detected: without it, httpx's per-operation timeouts
    # and the body-reading loop still bound the attempt, only less tightly.
    pool = getattr(transport, "_pool", None)
    inner = getattr(pool, "_network_backend", None)
    if isinstance(inner, httpcore.NetworkBackend) and not isinstance(inner, _DeadlineBackend):
        pool._network_backend = _DeadlineBackend(inner)  # type: ignore[union-attr]


# -- small helpers -----------------------------------------------------------------------------


def _is_text(content_type: str | None) -> bool:
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media.startswith(_TEXT_TYPES) or media.endswith("+json")


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _safe_url(url: str) -> str:
    """scheme://host/path of a URL: query strings and userinfo may carry credentials."""
    try:
        parsed = httpx.URL(url)
    except Exception:  # noqa: BLE001 - a malformed Location is only named, never used
        return "(unparseable location)"
    if not parsed.host:
        return parsed.path or "/"
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{parsed.host}{port}{parsed.path}"


def _host_of(url: str) -> str:
    try:
        parsed = httpx.URL(url)
    except Exception:  # noqa: BLE001
        return "(invalid url)"
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.host}{port}" if parsed.host else "(no host)"


def _cause_chain(exc: BaseException) -> typing.Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _ssl_reason(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed ({exc.verify_message})"
    return exc.reason or type(exc).__name__


def _os_reason(causes: list[BaseException]) -> str:
    for cause in causes:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
    return str(causes[0]) or type(causes[0]).__name__
