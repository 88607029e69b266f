"""HTTP/1.1 connections for hook attempts, and the keep-alive pool they are kept in.

Hooks send small requests to a handful of origins, one at a time per hook, and read at most a
bounded response. `wire.py` writes and reads the messages; this module adds what an attempt
needs around them:

- **One deadline per attempt.** Every socket operation - connect, TLS handshake, each send
  and each read - is given only the time left until the attempt's deadline, so a server that
  drips bytes cannot stretch an attempt past its timeout (a plain socket timeout would be
  granted afresh to every read).
- **Keep-alive.** Connections are reused per origin (scheme, host, port, proxy) while the
  server allows it. A pooled connection that the server has closed meanwhile is noticed before
  it is used; a request that still meets a connection closed under it, before any byte of
  the answer came back, is sent once more on a new one (a hook request carries its
  idempotency key, `X-Scion-Hook-ID`, so a receiver that did see the first can tell).
- **Proxies from the environment**, as containers are told them: `https_proxy`,
  `http_proxy`, `all_proxy` and `no_proxy` (either case; the lower-case one wins). HTTPS goes
  through a `CONNECT` tunnel. Loopback addresses never go through a proxy.
- **Errors that say what failed**, as classes named after the step (`ConnectError`,
  `ReadError`, `WriteError`, `RemoteProtocolError`, `ProxyError`...); the caller turns them
  into attempt outcomes.

Nothing here logs, and no message holds a URL's path, query or userinfo, or a header value.
"""

from __future__ import annotations

import base64
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping
from urllib.parse import SplitResult, quote, unquote, urlsplit

from .wire import (
    ConnectError,
    InvalidURL,
    ProxyError,
    Reader,
    ReadError,
    Response,
    TimeoutException,
    TransportError,
    UnsupportedProtocol,
    WriteError,
    request_head,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl

MAX_IDLE_PER_ORIGIN = 16
KEEPALIVE_EXPIRY = 30.0  # seconds an idle connection is kept

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "::1", "[::1]"})
# Every printable ASCII character but space: what a request target may carry as written.
_PRINTABLE_ASCII = "".join(chr(c) for c in range(0x21, 0x7F))


# -- URLs and proxies --------------------------------------------------------------------------


class Target:
    """Where a request goes: its origin, the request-target and what the Host header says."""

    __slots__ = ("host", "host_header", "path", "port", "scheme", "userinfo")

    def __init__(self, url: str) -> None:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            # urlsplit's own message may quote the authority, which may hold a password.
            raise InvalidURL("invalid URL: its host or port cannot be read") from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise UnsupportedProtocol(f"unsupported scheme {scheme or '(none)'!r}")
        host = parts.hostname
        if not host:
            raise InvalidURL("the URL has no host")
        if port == 0:
            raise InvalidURL("invalid URL: port 0")
        default_port = 443 if scheme == "https" else 80
        self.scheme = scheme
        self.host = host
        self.port = default_port if port is None else port
        self.path = _request_target(parts)
        shown = f"[{host}]" if ":" in host else _ascii_name(host)
        self.host_header = shown if self.port == default_port else f"{shown}:{self.port}"
        self.userinfo = _userinfo(parts)

    @property
    def authority(self) -> str:
        """host:port, with an IPv6 address in brackets."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{shown}:{self.port}"


def _request_target(parts: SplitResult) -> str:
    # The path is sent as written: the renderer has already percent-encoded what it inserted,
    # and an encoded dot segment (%2E%2E) must reach the server unchanged. Only characters a
    # request line cannot carry (non-ASCII, written in the template) are encoded, as UTF-8.
    path = parts.path or "/"
    target = f"{path}?{parts.query}" if parts.query else path
    return target if target.isascii() else quote(target, safe=_PRINTABLE_ASCII)


def _ascii_name(host: str) -> str:
    """A host name as the Host header carries it: an internationalised name in IDNA form."""
    return host if host.isascii() else host.encode("idna").decode("ascii")


def _userinfo(parts: SplitResult) -> tuple[str, str] | None:
    if parts.username is None:
        return None
    return unquote(parts.username), unquote(parts.password or "")


def basic_credentials(user: str, password: str) -> str:
    """The value of a Basic Authorization header."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return f"Basic {token}"


class Proxy:
    """A proxy to go through, from a `*_proxy` variable."""

    __slots__ = ("authorization", "host", "port")

    def __init__(self, url: str) -> None:
        if "://" not in url:
            url = f"http://{url}"
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            # Never urlsplit's message: it may quote the proxy's password.
            raise ProxyError("invalid proxy URL in the environment (host or port)") from None
        if parts.scheme.lower() != "http" or not parts.hostname:
            raise ProxyError(
                "only http:// proxies are supported (the proxy variable names another)"
            )
        self.host = parts.hostname
        self.port = 80 if port is None else port
        credentials = _userinfo(parts)
        self.authorization = basic_credentials(*credentials) if credentials else None

    @property
    def key(self) -> tuple[str, int]:
        return self.host, self.port


def proxy_for(target: Target, environ: Mapping[str, str]) -> Proxy | None:
    """The proxy `environ` says to use for `target`, or None for a direct connection."""
    if _is_loopback(target.host):
        return None
    raw = _variable(environ, f"{target.scheme}_proxy") or _variable(environ, "all_proxy")
    if not raw or _bypassed(target.host, target.port, _variable(environ, "no_proxy") or ""):
        return None
    return Proxy(raw)


def _variable(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    if value is None:
        value = environ.get(name.upper())
    return value.strip() if value else None


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    octets = host.split(".")  # 127.0.0.0/8 written as an IPv4 address, not a name
    return len(octets) == 4 and octets[0] == "127" and all(o.isdigit() for o in octets)


def _bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether `no_proxy` (comma-separated hosts, .domains, IPs, CIDRs, or `*`) covers host."""
    host = host.lower()
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        name, _, entry_port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        if "/" in name:
            if _in_network(host, name):
                return True
            continue
        name = name.lstrip(".").strip("[]")
        if host == name or host.endswith(f".{name}"):
            return True
    return False


def _has_port(entry: str) -> bool:
    head, sep, tail = entry.rpartition(":")
    return bool(sep) and tail.isdigit() and (":" not in head or head.endswith("]"))


def _in_network(host: str, cidr: str) -> bool:
    import ipaddress  # only no_proxy entries written as networks need it

    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False


# -- deadline-bounded sockets ------------------------------------------------------------------


class Deadline:
    """The monotonic time by which an attempt must be over; the connection's sockets read it."""

    __slots__ = ("at",)

    def __init__(self, at: float) -> None:
        self.at = at

    def left(self) -> float:
        remaining = self.at - time.monotonic()
        if remaining <= 0:
            raise TimeoutException("attempt deadline reached")
        return remaining


class Connection:
    """One HTTP/1.1 connection to an origin (directly, or through a proxy or its tunnel)."""

    def __init__(
        self,
        target: Target,
        proxy: Proxy | None,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self.target = target
        self.proxy = proxy
        self.ssl_context = ssl_context
        self.deadline = Deadline(time.monotonic())
        self.idle_since = 0.0
        self.reused = False
        self._sock: socket.socket | None = None
        self._stream: Reader | None = None

    @property
    def absolute_form(self) -> bool:
        """Plain HTTP through a proxy: the request line carries the whole URL."""
        return self.proxy is not None and self.target.scheme == "http"

    def connect(self) -> None:
        host, port = self.proxy.key if self.proxy else (self.target.host, self.target.port)
        error = ProxyError if self.proxy else ConnectError
        raw = _connect(host, port, self.deadline, error)
        try:
            if self.proxy is not None and self.target.scheme == "https":
                self._open_tunnel(raw)
            if self.target.scheme == "https":
                assert self.ssl_context is not None
                raw.settimeout(self.deadline.left())
                raw = self.ssl_context.wrap_socket(raw, server_hostname=self.target.host)
        except BaseException:
            raw.close()
            raise
        self._sock = raw
        self._stream = Reader(_receiver(raw, self.deadline))

    def _open_tunnel(self, raw: socket.socket) -> None:
        assert self.proxy is not None
        authority = self.target.authority
        headers = [("Host", authority)]
        if self.proxy.authorization:
            headers.append(("Proxy-Authorization", self.proxy.authorization))
        stream = Reader(_receiver(raw, self.deadline))
        try:
            _send_all(raw, request_head("CONNECT", authority, headers), self.deadline)
            answer = Response(stream, "CONNECT")
        except (TimeoutException, TimeoutError):
            raise
        except TransportError as exc:
            raise ProxyError(f"the proxy's answer to CONNECT is not HTTP/1.1 ({exc})") from None
        except OSError as exc:
            raise ProxyError(f"the proxy dropped the tunnel: {exc.strerror or exc}") from None
        if answer.status != 200:
            raise ProxyError(f"the proxy refused the tunnel: {answer.status} {answer.reason}")
        if stream.buffered:  # the server speaks first after a tunnel opens: never in TLS
            raise ProxyError("the proxy sent bytes past its answer to CONNECT")

    def request(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes | None
    ) -> Response:
        """Send one request and read its answer's head; the body is read from the Response."""
        head = request_head(method, target, headers)
        if self._sock is None:
            self.connect()
        assert self._sock is not None and self._stream is not None
        try:
            _send_all(self._sock, head + body if body else head, self.deadline)
        except (TimeoutException, TimeoutError):
            raise
        except OSError as exc:
            raise WriteError(exc.strerror or type(exc).__name__) from exc
        try:
            return Response(self._stream, method)
        except (TimeoutException, TimeoutError, TransportError):
            raise
        except OSError as exc:
            raise ReadError(exc.strerror or type(exc).__name__) from exc

    def dropped(self) -> bool:
        """Whether this idle connection cannot carry a request: the server closed it or wrote
        unasked on it, or bytes past the last answer are still unread."""
        if self._sock is None or self._stream is None or self._stream.buffered:
            return True
        pending = getattr(self._sock, "pending", None)  # TLS records already decrypted
        if pending is not None and pending():
            return True
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    def close(self) -> None:
        self._stream = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _connect(
    host: str, port: int, deadline: Deadline, error: type[TransportError]
) -> socket.socket:
    """A TCP connection to the first of `host`'s addresses that answers, all of them within
    the attempt's deadline (each address gets only the time left, not a timeout of its own)."""
    # An ASCII name is passed as bytes: a str one makes the resolver load the IDNA codec
    # (about 1 ms of every start-up) only to encode it unchanged.
    name: str | bytes = host.encode("ascii") if host.isascii() else host
    try:
        addresses = socket.getaddrinfo(name, port, 0, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if error is ProxyError:
            raise ProxyError(f"cannot resolve the proxy's host {host}") from exc
        raise  # the attempt's DNSError
    failure: OSError | None = None
    for family, kind, protocol, _, address in addresses:
        sock = socket.socket(family, kind, protocol)
        try:
            sock.settimeout(deadline.left())
            sock.connect(address)
        except TimeoutError:
            sock.close()
            raise TimeoutException("connect timed out") from None
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    reason = failure.strerror if failure is not None and failure.strerror else "no address"
    raise error(reason) from failure


def _receiver(sock: socket.socket, deadline: Deadline) -> Callable[[int], bytes]:
    """Reads from `sock` that each wait only for the time left until the deadline."""

    def receive(size: int) -> bytes:
        sock.settimeout(deadline.left())
        return sock.recv(size)

    return receive


def _send_all(sock: socket.socket, data: bytes, deadline: Deadline) -> None:
    sock.settimeout(deadline.left())
    sock.sendall(data)


# -- the pool ----------------------------------------------------------------------------------


class ConnectionPool:
    """Idle keep-alive connections by origin; a connection is used by one attempt at a time."""

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN,
        keepalive_expiry: float = KEEPALIVE_EXPIRY,
    ) -> None:
        self._environ = os.environ if environ is None else environ
        self._max_idle = max_idle_per_origin
        self._expiry = keepalive_expiry
        self._idle: dict[tuple[object, ...], list[Connection]] = {}
        self._lock = threading.Lock()
        self._ssl_context: ssl.SSLContext | None = None
        self._closed = False

    def acquire(self, target: Target, deadline: float, *, fresh: bool = False) -> Connection:
        """A live idle connection to the target's origin, or (always, when `fresh`) a new
        one, not yet opened."""
        proxy = proxy_for(target, self._environ)
        key = (target.scheme, target.host, target.port, proxy.key if proxy else None)
        now = time.monotonic()
        stale: list[Connection] = []
        found: Connection | None = None
        with self._lock:
            idle = None if fresh else self._idle.get(key)
            while idle:
                candidate = idle.pop()
                if now - candidate.idle_since < self._expiry:
                    found = candidate
                    break
                stale.append(candidate)
        for connection in stale:
            connection.close()
        if found is not None and not found.dropped():
            found.reused = True
            found.deadline.at = deadline
            return found
        if found is not None:
            found.close()
        context = self._tls_context() if target.scheme == "https" else None
        connection = Connection(target, proxy, context)
        connection.deadline.at = deadline
        return connection

    def release(self, connection: Connection) -> None:
        """Keep a connection whose response was read to its end, for the next request."""
        proxy = connection.proxy
        target = connection.target
        key = (target.scheme, target.host, target.port, proxy.key if proxy else None)
        connection.idle_since = time.monotonic()
        with self._lock:
            if not self._closed:
                idle = self._idle.setdefault(key, [])
                if len(idle) < self._max_idle:
                    idle.append(connection)
                    return
        connection.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for connection in connections:
            connection.close()

    def _tls_context(self) -> ssl.SSLContext:
        # Built outside the lock (loading CAs takes milliseconds); two first https requests at
        # once may each build one, and one of them is kept.
        if self._ssl_context is None:
            context = make_tls_context(self._environ)
            with self._lock:
                if self._ssl_context is None:
                    self._ssl_context = context
        return self._ssl_context


def make_tls_context(environ: Mapping[str, str]) -> ssl.SSLContext:
    """Certificate checks against the system's CAs (or SSL_CERT_FILE / SSL_CERT_DIR), plus
    certifi's bundle when it is installed and no CA file is named: slim images may lack one."""
    import ssl

    context = ssl.create_default_context(
        cafile=environ.get("SSL_CERT_FILE") or None, capath=environ.get("SSL_CERT_DIR") or None
    )
    if not environ.get("SSL_CERT_FILE") and not environ.get("SSL_CERT_DIR"):
        try:
            import certifi
        except ImportError:
            pass
        else:
            context.load_verify_locations(cafile=certifi.where())
    return context
