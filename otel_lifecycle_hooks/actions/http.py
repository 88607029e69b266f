"""One attempt of an `http`, `webhook` or `jsonrpc` request, through httpx.

`send` performs exactly one request and classifies how it ended (`AttemptResult`); retries,
hook spans and policies belong to the engine. What `send` guarantees:

- **One pooled client per engine** (`HttpClient`), an `httpx.Client` instrumented with
  `HTTPXClientInstrumentor.instrument_client` on the package's tracer and meter providers: each
  attempt is one CLIENT span of that instrumentation, a child of the current span (the hook's),
  its duration in `http.client.request.duration`, and the request carries the current trace
  context (`traceparent`) through the global propagator. The span uses the stable HTTP
  conventions (see `_stable_http_conventions`). A host application that instruments httpx
  globally gets no second span of these requests, whichever instruments first: the request
  leaves the package's span with HTTP instrumentation suppressed.
- **The attempt ends by `timeout` seconds after it started.** httpx's timeouts are the time
  left, and a watchdog shuts the attempt's socket down at the deadline, so a server that drips
  bytes cannot stretch it (httpx's timeouts hold per read).
- **Proxies and CA files come from the environment as httpx reads them** (`https_proxy`,
  `no_proxy`, `SSL_CERT_FILE`...). A loopback host (`loopback.py`) never goes through a
  proxy: a proxy's 127.0.0.1 is not ours, and a credential for a plain-http loopback target
  would cross it in clear.
- **The credential guard runs on the request as it is about to be sent**: one that carries
  credentials (auth, an Authorization header, URL userinfo) goes only over https or to a
  loopback host, and, given the origin the template fixed, only to that origin.
- Redirects are never followed (a 3xx is a permanent failure naming the Location); at most
  `max_body` bytes of the response are read; no cookies are kept.

error_type values: `http.<status>`, `http.redirect`, `timeout`, httpx's error class for
failures on the wire (`ConnectError`, `ReadError`, `WriteError`, `RemoteProtocolError`,
`ProxyError`), `DNSError` for a name that does not resolve (transient: resolvers flap while
containers start), `TLSError` for a failed TLS handshake or certificate check (permanent),
`InvalidURL` / `UnsupportedProtocol` / `LocalProtocolError` (permanent), and the guard's
`auth.transport_refused` / `auth.origin_refused` (permanent, nothing sent). Messages never
contain the URL's path, query or userinfo, or a header value: they may hold secrets.
"""

from __future__ import annotations

import contextlib
import contextvars
import email.utils
import heapq
import itertools
import logging
import math
import os
import re
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, Generic, NamedTuple, TypeVar
from urllib.parse import urlsplit

import httpcore
import httpx
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.utils import suppress_http_instrumentation

from ..auth.errors import ORIGIN_REFUSED, TRANSPORT_REFUSED
from ..loopback import LOOPBACK_FORMS, ambiguous_host_reason, is_loopback_host, loopback_addresses
from ..render import RenderedRequest
from ..version import __version__
from .base import AttemptResult, Exchange

DEFAULT_MAX_BODY = 64 * 1024
DEFAULT_KEEP_ALIVE = 20  # idle connections kept per origin (httpx keeps 20 in all)
USER_AGENT = f"otel-lifecycle-hooks/{__version__}"

# Content types whose body is kept in the result, for response capture.
_TEXT_TYPES = ("application/json", "text/")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# Headers httpx writes itself, from the body it sends.
_FRAMING_HEADERS = ("content-length", "transfer-encoding", "host")
_READ_CHUNK = 64 * 1024  # bytes asked of the response per read
# Where a request carries the function that redacts its URL for the CLIENT span.
_REDACT_EXTENSION = "otel_lifecycle_hooks.redact_url"
_STABILITY_VARIABLE = "OTEL_SEMCONV_STABILITY_OPT_IN"
_PROXY_ANSWER = re.compile(r"[1-5][0-9][0-9] [ -~]{0,80}$")
# The loggers httpx and httpcore write each request's URL and headers to.
_LIBRARY_LOGGERS = (
    "httpx",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)
# True while this context sends a hook request.
_SENDING = contextvars.ContextVar("otel_lifecycle_hooks_sending", default=False)
_Pool = TypeVar("_Pool")  # httpx.Client or httpx.HTTPTransport


class Origin(NamedTuple):
    """Where a request may go: scheme, host (lower case, no brackets) and port."""

    scheme: str
    host: str
    port: int


def origin_of(url: str) -> Origin | None:
    """The origin of an absolute http(s) URL; None when it has none (or cannot be read)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    default = 443 if scheme == "https" else 80
    return Origin(scheme, parts.hostname.lower(), default if port is None else port)


class HttpClient:
    """The client every hook of an engine shares: one pooled, instrumented `httpx.Client`.

    One for all hooks is safe: a connection carries no credential (auth is a header of each
    request, cookies are never kept) and TLS verification is the environment's, the same for
    every hook. Each origin has a connection pool of its own (`_PerOrigin`), keeping up to
    `keep_alive` idle connections; open ones are not capped, since the engine's worker pool
    already bounds how many requests are in flight, and a cap would make one hook's request
    wait for another's connection.
    """

    def __init__(
        self,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        keep_alive: int = DEFAULT_KEEP_ALIVE,
    ) -> None:
        self._through_environment: _PerOrigin[httpx.Client] | None = None
        self._unusable_proxy: str | None = None
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=keep_alive)
        # One TLS context (the environment's CA settings) for every pool: loaded once.
        tls = httpx.create_ssl_context(trust_env=True)

        def through_environment() -> httpx.Client:
            return _CookielessClient(
                trust_env=True,
                follow_redirects=False,
                timeout=None,
                limits=limits,
                verify=tls,
            )

        try:
            # The first is made now: a proxy that cannot be used is known at once.
            self._through_environment = _PerOrigin(through_environment, through_environment())
        except ImportError as exc:  # a socks:// proxy without httpx's `socks` extra
            # Every request that would go through it fails with this; none goes around it.
            self._unusable_proxy = f"the proxy the environment names cannot be used: {exc}"

        def direct() -> httpx.HTTPTransport:
            return _LoopbackTransport(limits=limits, verify=tls)

        self._direct = _PerOrigin(direct, direct())
        self.client: httpx.Client = _CookielessClient(
            transport=_Route(self._through_environment, self._direct, self._unusable_proxy),
            trust_env=False,
            follow_redirects=False,
            headers={
                "User-Agent": USER_AGENT,
                # A compressed body could inflate far beyond max_body inside a single read.
                "Accept-Encoding": "identity",
            },
        )
        _quiet_library_logs()
        with _stable_http_conventions():
            HTTPXClientInstrumentor.instrument_client(
                self.client,
                tracer_provider=tracer_provider,
                meter_provider=meter_provider,
                request_hook=_redact_span_url,
            )

    def close(self) -> None:
        """Close the pooled connections; the client is not used afterwards."""
        self.client.close()


class _WithoutHookRequests(logging.Filter):
    """Drops what httpx and httpcore log about the package's own requests: their URLs and
    headers may hold secrets (the hook log and journal record each execution, redacted). A
    host application's requests are logged as it configured."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _SENDING.get()


_FILTER = _WithoutHookRequests()


def _quiet_library_logs() -> None:
    for name in _LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def make_client(
    tracer_provider: Any = None, meter_provider: Any = None, keep_alive: int = DEFAULT_KEEP_ALIVE
) -> HttpClient:
    """The one client shared by all hooks of an engine: pooled (`keep_alive` idle
    connections per origin), no redirects, no cookies, instrumented on `tracer_provider` /
    `meter_provider` (the global ones by default)."""
    return HttpClient(tracer_provider, meter_provider, keep_alive)


class _Route(httpx.BaseTransport):
    """The package client's transport: loopback directly, anything else as the environment says.

    The package's CLIENT span is made around this call (`instrument_client` wraps it); below it
    the request goes on with HTTP instrumentation suppressed, so that httpx transports a host
    application instrumented globally make no second span of it, in the host's provider.
    """

    def __init__(
        self,
        through_environment: _PerOrigin[httpx.Client] | None,
        direct: _PerOrigin[httpx.HTTPTransport],
        unusable_proxy: str | None = None,
    ) -> None:
        self._through_environment = through_environment
        self._direct = direct
        self._unusable_proxy = unusable_proxy

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with suppress_http_instrumentation():
            if is_loopback_host(request.url.host):
                return self._direct.pool_for(request.url).handle_request(request)
            if self._through_environment is None:
                raise _ProxyUnusable(self._unusable_proxy or "no usable proxy")
            return self._through_environment.pool_for(request.url).send(request, stream=True)

    def close(self) -> None:
        for transport in self._direct.pools():
            transport.close()
        if self._through_environment is not None:
            for client in self._through_environment.pools():
                client.close()


class _LoopbackConnector(httpcore.SyncBackend):
    """Connects to a loopback host's own addresses (`localhost` as 127.0.0.1, then ::1) and
    never asks a resolver: whoever answers a lookup would choose where a credential sent in
    clear goes. The request keeps its host for the Host header and TLS's server name."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        *first, last = loopback_addresses(host)
        for address in first:
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError:
                continue  # localhost may listen on ::1 only: try the next address
        return super().connect_tcp(last, port, timeout, local_address, socket_options)


class _LoopbackTransport(httpx.HTTPTransport):
    """httpx's transport with its connections made by `_LoopbackConnector`."""

    def __init__(self, *, limits: httpx.Limits, verify: ssl.SSLContext) -> None:
        super().__init__(trust_env=True, limits=limits, verify=verify)
        # httpx takes no network backend of its own; its pool's backend is where a connection's
        # address is chosen (httpcore 1.x).
        self._pool._network_backend = _LoopbackConnector()


class _PerOrigin(Generic[_Pool]):
    """A connection pool per origin, each made at the origin's first request.

    httpcore looks through every connection of a pool for each request it sends and each it
    ends, so one pool for many origins makes every request pay for all their connections: with
    1,000 hooks over four origins that was a fifth of a delivery's CPU. Past MAX_POOLS origins
    (URLs whose host comes from a variable) the rest share one more pool, `shared`.
    """

    MAX_POOLS = 64

    def __init__(self, make: Callable[[], _Pool], shared: _Pool) -> None:
        self._make = make
        self._shared = shared
        self._by_origin: dict[tuple[bytes, bytes, int | None], _Pool] = {}
        self._lock = threading.Lock()

    def pool_for(self, url: httpx.URL) -> _Pool:
        origin = (url.raw_scheme, url.raw_host, url.port)
        pool = self._by_origin.get(origin)
        if pool is not None:
            return pool
        with self._lock:
            pool = self._by_origin.get(origin)
            if pool is None:
                full = len(self._by_origin) >= self.MAX_POOLS
                pool = self._shared if full else self._make()
                if not full:
                    self._by_origin[origin] = pool
            return pool

    def pools(self) -> list[_Pool]:
        with self._lock:
            return [self._shared, *self._by_origin.values()]


class _ProxyUnusable(httpx.ProxyError):
    """The environment names a proxy this installation cannot speak to (a configuration
    error: retrying does not help)."""


class _NoCookies(httpx.Cookies):
    """An empty cookie store that takes nothing from a response."""

    def __init__(self) -> None:
        # A jar that refuses every domain: nothing set through it is kept either.
        super().__init__(CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])))

    def extract_cookies(self, response: httpx.Response) -> None:
        """Nothing is kept, so a response's Set-Cookie headers are not parsed at all."""


class _CookielessClient(httpx.Client):
    """An httpx client that keeps no cookie: one a target sets (perhaps its session
    credential) never rides along on a later request, to it or to another target.

    httpx hands every response to its client's cookie store; a store that refuses every cookie
    still parsed the response into urllib's request and response shapes first (about 4% of a
    webhook delivery's CPU, `bench_delivery_cpu.py`). This client's store takes nothing."""

    @property
    def cookies(self) -> httpx.Cookies:
        """Always empty."""
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        # httpx's own __init__ sets `_cookies`, not this: only a caller's assignment gets here.
        if cookies:
            raise TypeError("the hook client keeps no cookies")


_NO_COOKIES = _NoCookies()


def _redact_span_url(span: Any, request: Any) -> None:
    """The instrumentation's request hook: `url.full` as the engine's redactor shows it."""
    redact = request.extensions.get(_REDACT_EXTENSION)
    if redact is not None and span.is_recording():
        url = str(request.url)
        shown = redact(url)
        if shown != url:  # else the instrumentation's own (credential-free) value stands
            span.set_attribute("url.full", shown)


@contextmanager
def _stable_http_conventions() -> Iterator[None]:
    """Ask for the stable HTTP conventions while the client is instrumented.

    The instrumentation reads OTEL_SEMCONV_STABILITY_OPT_IN once per process, the first time
    any OpenTelemetry instrumentation is set up, and keeps that answer for every later one.
    When the variable does not name `http` (or `http/dup`), `http` is added for this call only:
    the environment children inherit is unchanged. If this is the process's first
    instrumentation, instrumentations set up later in the process also get the stable HTTP
    conventions; if another one came first, its answer stands (docs/existing-tracer.md).
    """
    before = os.environ.get(_STABILITY_VARIABLE)
    chosen = [s.strip() for s in (before or "").split(",") if s.strip()]
    if "http" in chosen or "http/dup" in chosen:
        yield
        return
    os.environ[_STABILITY_VARIABLE] = ",".join([*chosen, "http"])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_STABILITY_VARIABLE, None)
        else:
            os.environ[_STABILITY_VARIABLE] = before


# -- one attempt -------------------------------------------------------------------------------


def send(
    client: HttpClient,
    request: RenderedRequest,
    timeout: float,
    *,
    extra_headers: Mapping[str, str] = {},
    max_body: int = DEFAULT_MAX_BODY,
    redact_url: Callable[[str], str] | None = None,
    credentialed: bool = False,
    origin: Origin | None = None,
) -> AttemptResult:
    """Send `request` once, within `timeout` seconds in total, and classify the outcome.

    `extra_headers` (auth, X-Scion-Hook-ID) replace the request's own headers of the same
    name. `redact_url` rewrites the URL where the CLIENT span records it. `credentialed` says
    the caller added credentials; `origin` is where the template's own text said the request
    goes. Never raises: every failure becomes an `AttemptResult`.
    """
    started = time.monotonic()
    method = request.method.upper()
    scheme = request.url.partition("://")[0].lower() if "://" in request.url else ""
    if scheme not in ("http", "https"):
        return _failure(
            "permanent",
            0.0,
            "UnsupportedProtocol",
            f"unsupported scheme {scheme or '(none)'!r}: write an http(s) URL",
        )
    invalid = _invalid_url(request.url)
    if invalid is not None:
        return _failure("permanent", 0.0, "InvalidURL", f"invalid URL: {invalid}")
    body = request.body
    if body is None and method in _BODY_METHODS:
        body = b""
    deadline = _Deadline(timeout)
    extensions: dict[str, Any] = {"trace": deadline.trace}
    if redact_url is not None:
        extensions[_REDACT_EXTENSION] = redact_url
    try:
        built = client.client.build_request(
            method,
            request.url,
            headers=_headers(request, extra_headers),
            content=body,
            timeout=httpx.Timeout(max(timeout, 0.001)),
            extensions=extensions,
        )
    except httpx.InvalidURL:
        # httpx's own message may quote the authority, which may hold a password.
        return _failure(
            "permanent", 0.0, "InvalidURL", "invalid URL: its host or port cannot be read"
        )
    except (ValueError, UnicodeError):  # a header httpx cannot encode (its value unquoted)
        return _failure(
            "permanent",
            0.0,
            "LocalProtocolError",
            "a header name or value cannot be sent: HTTP headers are ASCII text",
        )
    refusal = guard_request(built, credentialed=credentialed, origin=origin)
    if refusal is not None:
        return refusal
    status: int | None = None
    deadline.start()
    sending = _SENDING.set(True)
    try:
        response = client.client.send(built, stream=True)
        try:
            deadline.watch(response.extensions.get("network_stream"))
            status = response.status_code
            kept = b"" if response.is_redirect else _read(response, max_body, deadline)
        finally:
            response.close()
        result = _classify_response(response, kept, time.monotonic() - started)
        # For the delivery history (redacted and bounded by the engine before it is kept).
        result = result._replace(
            exchange=Exchange(
                method, str(built.url), tuple(built.headers.multi_items()), body,
                tuple(response.headers.multi_items()), kept, len(kept) >= max_body > 0,
            )
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - an attempt never raises into the engine
        elapsed = time.monotonic() - started
        if deadline.expired or isinstance(exc, httpx.TimeoutException):
            result = _failure(
                "timeout", elapsed, "timeout", f"no complete response within {timeout:g}s", status
            )
        else:
            result = _classify_error(exc, built.url, elapsed, status)
        result = result._replace(
            exchange=Exchange(method, str(built.url), tuple(built.headers.multi_items()), body)
        )
    finally:
        _SENDING.reset(sending)
        deadline.stop()
    return result


def _invalid_url(url: str) -> str | None:
    """What makes `url` unsendable, in words that never quote it (userinfo may hold a
    password); None for a URL httpx may try."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "its host or port cannot be read"
    if not parts.hostname:
        return "it has no host"
    if port == 0:
        return "port 0"
    return ambiguous_host_reason(parts.hostname)


def guard_request(
    request: httpx.Request, *, credentialed: bool = False, origin: Origin | None = None
) -> AttemptResult | None:
    """Refuse the request as it is about to be sent, when it would carry credentials in clear
    or go elsewhere than the template's own text said. None when it may go."""
    url = request.url
    host = url.host.lower()
    if origin is not None:
        port = url.port or (443 if url.scheme == "https" else 80)
        if (url.scheme, host, port) != tuple(origin):
            return _failure(
                "permanent",
                0.0,
                ORIGIN_REFUSED,
                f"refusing to send to {url.scheme}://{host}:{port}: the template's URL fixes "
                f"{origin.scheme}://{origin.host}:{origin.port}",
            )
    if url.scheme == "https":
        return None  # credentials may go anywhere over TLS
    # The header names in one pass (`name in headers` looks the name up, raising inside when
    # it is absent: twice per request).
    carries = credentialed or bool(url.userinfo)
    if not carries:
        names = request.headers.keys()
        carries = "authorization" in names or "proxy-authorization" in names
    if carries and not is_loopback_host(host):
        return _failure(
            "permanent",
            0.0,
            TRANSPORT_REFUSED,
            f"refusing to send credentials to {url.scheme}://{host}: use https://, or a "
            f"loopback host ({LOOPBACK_FORMS}) for local testing",
        )
    return None


def _headers(request: RenderedRequest, extra_headers: Mapping[str, str]) -> dict[str, str]:
    """The template's headers, then auth and the hook id; a later source replaces an earlier
    one whatever the case of its name. Framing is httpx's, from the body it sends."""
    merged: dict[str, tuple[str, str]] = {}
    for source in (request.headers, extra_headers):
        for name, value in source.items():
            merged[name.lower()] = (name, value)
    for name in _FRAMING_HEADERS:
        merged.pop(name, None)
    return dict(merged.values())


def _read(response: httpx.Response, max_body: int, deadline: _Deadline) -> bytes:
    """Up to max_body bytes of the body, as sent; the rest is never downloaded."""
    if max_body <= 0:
        return b""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_raw(min(_READ_CHUNK, max_body)):
        chunks.append(chunk)
        size += len(chunk)
        if size >= max_body:
            break
        if deadline.expired:
            raise httpx.ReadTimeout("attempt deadline reached")
    return b"".join(chunks)[:max_body]


class _Deadline:
    """The attempt's total deadline: at `timeout` seconds, its sockets are shut down.

    httpx bounds each read and write, not their sum. The sockets are learnt from httpcore's
    `trace` extension when a connection is opened, and from the response's `network_stream`
    when a pooled one is reused (so a reused connection's headers are bounded per read only).
    Before a connection exists there is no socket to shut: httpcore tries each address of a
    name in turn, each within the connect timeout (the time left), so a name with several
    unreachable addresses can take that long per address.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = False

    def start(self) -> None:
        _WATCHDOG.watch(time.monotonic() + max(self.timeout, 0.0), self)

    def stop(self) -> None:
        with self._lock:
            self._done = True
            self._sockets.clear()

    def trace(self, event_name: str, info: Mapping[str, Any]) -> None:
        if event_name == "connection.connect_tcp.complete":
            self.watch(info.get("return_value"))

    def watch(self, stream: Any) -> None:
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            if self._done:
                return
            if self.expired:
                _shut(sock)
            else:
                self._sockets.append(sock)

    def expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


class _Watchdog:
    """One thread for every attempt's deadline (a thread per attempt would cost a tenth of
    a request): it sleeps until the earliest deadline and expires those that passed. A
    finished attempt stays in the heap until its time, and is skipped then."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Deadline]] = []
        self._condition = threading.Condition()
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, at: float, deadline: _Deadline) -> None:
        with self._condition:
            heapq.heappush(self._heap, (at, next(self._order), deadline))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="otel-lifecycle-hooks-deadlines", daemon=True
                )
                self._thread.start()
            elif self._heap[0][2] is deadline:  # a new earliest deadline: wake to it
                self._condition.notify()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._heap:
                    self._condition.wait()
                at = self._heap[0][0]
                now = time.monotonic()
                if at > now:
                    # Up to _DEADLINE_SLACK late, so that one wake-up expires every deadline
                    # of that spell: a finished attempt's stays in the heap until its time,
                    # and waking for each was a thread switch per delivery.
                    self._condition.wait(at - now + _DEADLINE_SLACK)
                    continue
                _, _, deadline = heapq.heappop(self._heap)
            deadline.expire()


_DEADLINE_SLACK = 0.05  # seconds an attempt's deadline may pass before it is enforced
_WATCHDOG = _Watchdog()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed: nothing left to stop
        sock.shutdown(socket.SHUT_RDWR)


# -- classification ----------------------------------------------------------------------------


def _failure(
    kind: Any, duration: float, error_type: str, message: str, status: int | None = None
) -> AttemptResult:
    return AttemptResult(
        kind=kind, duration=duration, status_code=status, error_type=error_type, message=message
    )


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
        return _failure(
            "permanent",
            duration,
            "http.redirect",
            f"HTTP {status} redirect{where} (redirects are not followed)",
            status,
        )
    transient = status == 429 or status >= 500
    return AttemptResult(
        kind="transient" if transient else "permanent",
        duration=duration,
        status_code=status,
        error_type=f"http.{status}",
        message=f"HTTP {status} {response.reason_phrase}".rstrip(),
        retry_after=parse_retry_after(response.headers.get("retry-after"), time.time()),
        response_body=kept_body,
        response_content_type=kept_type,
    )


def _classify_error(
    exc: BaseException, url: httpx.URL, duration: float, status: int | None
) -> AttemptResult:
    host = f"{url.host}:{url.port}" if url.port else url.host
    causes = list(_cause_chain(exc))
    tls_error = next((c for c in causes if isinstance(c, ssl.SSLError)), None)
    if tls_error is not None:
        return _failure(
            "permanent",
            duration,
            "TLSError",
            f"TLS handshake with {host} failed: {_ssl_reason(tls_error)}",
        )
    if isinstance(exc, _ProxyUnusable):
        return _failure("permanent", duration, "ProxyError", str(exc))
    if isinstance(exc, httpx.ProxyError):
        # httpx names the proxy's answer ("407 Proxy Authentication Required"), never its URL.
        answer = str(exc) if _PROXY_ANSWER.match(str(exc)) else "the proxy refused or failed"
        return _failure(
            "transient", duration, "ProxyError", f"ProxyError on the way to {host}: {answer}",
            status,
        )  # fmt: skip
    if any(isinstance(cause, socket.gaierror) for cause in causes):
        through = " (or the proxy the environment names for it)" if _proxied(url) else ""
        return _failure("transient", duration, "DNSError", f"cannot resolve host {host}{through}")
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.InvalidURL)):
        return _failure(
            "permanent",
            duration,
            type(exc).__name__,
            f"request to {host} cannot be sent ({type(exc).__name__})",
            status,
        )
    if isinstance(exc, (httpx.TransportError, OSError)):
        name = type(exc).__name__ if isinstance(exc, httpx.TransportError) else "ReadError"
        return _failure(
            "transient", duration, name, f"{name} talking to {host}: {_os_reason(causes)}", status
        )
    return _failure(
        "permanent",
        duration,
        type(exc).__name__,
        f"unexpected {type(exc).__name__} sending to {host}",
        status,
    )


def _proxied(url: httpx.URL) -> bool:
    """Whether the environment names a proxy for `url`'s scheme (as httpx reads it)."""
    if is_loopback_host(url.host):
        return False
    proxies = urllib.request.getproxies()
    return bool(proxies.get(url.scheme) or proxies.get("all"))


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


# -- small helpers -----------------------------------------------------------------------------


def _is_text(content_type: str | None) -> bool:
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media.startswith(_TEXT_TYPES) or media.endswith("+json")


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
    return type(causes[0]).__name__
