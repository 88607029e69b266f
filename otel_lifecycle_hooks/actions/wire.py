"""HTTP/1.1 on the wire: writing a request's head, reading a response, and what can go wrong.

Hook requests are small and their answers are read up to a bound, so the client needs only a
small part of HTTP/1.1 (RFC 9112): a request line and header fields; a status line, header
fields and a body framed by Content-Length, chunked transfer coding or the end of the
connection. The standard library's `http.client` does this too, but its header parsing goes
through the e-mail package (a tenth of a hook delivery's CPU) and importing it costs every
`run` about 10 ms; both are avoided here.

Reading goes through `Reader`, whose `receive` the caller bounds in time (see
`transport.py`); every read here may raise `TimeoutError` or the transport's deadline error.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MAX_LINE = 65536  # bytes in a status line, a header line or a chunk-size line
MAX_FIELDS = 100  # header fields in one response
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEX = re.compile(r"[0-9A-Fa-f]+")
_RECEIVE_SIZE = 64 * 1024
_FORBIDDEN_IN_VALUE = re.compile(r"[\x00\r\n]")


# -- errors ------------------------------------------------------------------------------------


class TransportError(Exception):
    """A request did not complete; the subclass names the step that failed."""


class ConnectError(TransportError):
    """The connection could not be opened (refused, unreachable, reset during set-up)."""


class ReadError(TransportError):
    """The connection failed while the response was being read."""


class WriteError(TransportError):
    """The connection failed while the request was being sent."""


class RemoteProtocolError(TransportError):
    """The server broke HTTP/1.1: a malformed answer, or one cut short."""


class ServerDisconnected(RemoteProtocolError):
    """The connection ended before the first byte of an answer."""


class ProxyError(TransportError):
    """The proxy refused or failed to open the tunnel."""


class TimeoutException(TransportError):
    """The attempt's deadline passed."""


class InvalidURL(TransportError):
    """The URL cannot be requested: no host, a bad port."""


class UnsupportedProtocol(TransportError):
    """The URL's scheme is neither http nor https."""


class LocalProtocolError(TransportError):
    """The request itself cannot be written: a header name or value HTTP does not allow."""


# -- requests ----------------------------------------------------------------------------------


def request_head(method: str, target: str, headers: list[tuple[str, str]]) -> bytes:
    """The request line and header block, checked: a field that could split the message (a
    line break in a value) or is not ISO-8859-1 is refused rather than sent."""
    if not _TOKEN.fullmatch(method):
        raise LocalProtocolError("the method is not an HTTP token")
    if not target or any(c in target for c in " \r\n\x00"):
        raise LocalProtocolError("the request target holds a space or a line break")
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in headers:
        if not _TOKEN.fullmatch(name):
            raise LocalProtocolError(f"header name {name[:40]!r} is not an HTTP token")
        value = str(value).strip(" \t")
        if _FORBIDDEN_IN_VALUE.search(value):
            raise LocalProtocolError(f"the value of header {name} holds a line break")
        lines.append(f"{name}: {value}")
    lines.append("\r\n")
    try:
        return "\r\n".join(lines).encode("iso-8859-1")
    except UnicodeEncodeError:
        raise LocalProtocolError("a header holds characters HTTP/1.1 cannot carry") from None


# -- reading -----------------------------------------------------------------------------------


class Reader:
    """A connection's bytes as they arrive, buffered; `buffered` says what is left unread, so
    that a connection with bytes past its last answer is never reused."""

    def __init__(self, receive: Callable[[int], bytes]) -> None:
        self._receive = receive  # at most n bytes; b"" at the end of the connection
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def readline(self, limit: int) -> bytes:
        """Up to and including the next LF, at most `limit` bytes; what is left at the end."""
        searched = 0
        while True:
            end = self._buffer.find(b"\n", searched)
            if 0 <= end < limit:
                return self._take(end + 1)
            if len(self._buffer) >= limit:
                return self._take(limit)
            searched = len(self._buffer)
            if not self._fill():
                return self._take(len(self._buffer))

    def read(self, limit: int) -> bytes:
        """What is buffered, or else what arrives next, up to `limit` bytes; b"" at the end."""
        if not self._buffer and not self._fill():
            return b""
        return self._take(min(limit, len(self._buffer)))

    def _fill(self) -> bool:
        data = self._receive(_RECEIVE_SIZE)
        self._buffer += data
        return bool(data)

    def _take(self, size: int) -> bytes:
        taken = bytes(self._buffer[:size])
        del self._buffer[:size]
        return taken


# -- responses ---------------------------------------------------------------------------------


class Headers:
    """A response's header fields: looked up by name whatever its case, repeats kept in order."""

    __slots__ = ("_fields",)

    def __init__(self) -> None:
        self._fields: dict[str, list[str]] = {}

    def add(self, name: str, value: str) -> None:
        self._fields.setdefault(name.lower(), []).append(value)

    def get(self, name: str) -> str | None:
        """The first value of `name`, or None."""
        found = self._fields.get(name.lower())
        return found[0] if found else None

    def get_all(self, name: str) -> list[str]:
        return list(self._fields.get(name.lower(), ()))


class Response:
    """A response whose status line and header fields have been read; the body is read on
    demand with `read`, at most as far as its framing says it goes."""

    def __init__(self, stream: Reader, method: str) -> None:
        self._stream = stream
        self.version, self.status, self.reason = _status_line(stream)
        while 100 <= self.status < 200 and self.status != 101:  # interim answers
            _header_block(stream)
            self.version, self.status, self.reason = _status_line(stream)
        self.headers = _header_block(stream)
        connection = (self.headers.get("connection") or "").lower()
        if self.version == "HTTP/1.1":
            self.will_close = "close" in connection
        else:  # HTTP/1.0 keeps a connection only when it says so
            self.will_close = "keep-alive" not in connection
        # How the body is framed (RFC 9112 6.3): none after HEAD, 1xx, 204 and 304 whatever
        # the fields say; chunked when it is the last transfer coding; else Content-Length;
        # else to the end of the connection.
        self._left: int | None  # bytes left in the body (sized) or in the current chunk
        codings = self.headers.get_all("transfer-encoding")
        self.chunked = False
        if self.status in (204, 304) or 100 <= self.status < 200 or method == "HEAD":
            self._left = 0
        elif codings:
            self.chunked = ",".join(codings).split(",")[-1].strip().lower() == "chunked"
            self._left = None
        else:
            self._left = _content_length(self.headers.get_all("content-length"))
        if self.status == 101:  # the connection now speaks another protocol
            self.will_close = True
        self.to_end_of_connection = not self.chunked and self._left is None
        if self.to_end_of_connection:
            self.will_close = True
        self.complete = self._left == 0

    def read(self, limit: int) -> bytes:
        """Up to `limit` bytes of the body; b"" once it has all been read."""
        if self.complete or limit <= 0:
            return b""
        if self.chunked:
            return self._read_chunked(limit)
        if self._left is None:  # to the end of the connection
            data = self._stream.read(limit)
            if not data:
                self.complete = True
            return data
        data = self._stream.read(min(limit, self._left))
        if not data:
            raise RemoteProtocolError("the answer was cut short")
        self._left -= len(data)
        self.complete = self._left == 0
        return data

    def _read_chunked(self, limit: int) -> bytes:
        if not self._left:
            if self._left == 0:  # the CRLF that ends the previous chunk
                _expect_line_end(self._stream)
            self._left = _chunk_size(self._stream)
            if self._left == 0:
                _header_block(self._stream)  # trailer fields, not used
                self.complete = True
                return b""
        data = self._stream.read(min(limit, self._left))
        if not data:
            raise RemoteProtocolError("the answer was cut short")
        self._left -= len(data)
        return data


def _line(stream: Reader) -> bytes:
    line = stream.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise RemoteProtocolError("a line of the answer is too long")
    return line


def _status_line(stream: Reader) -> tuple[str, int, str]:
    try:
        line = _line(stream)
    except ConnectionError as exc:
        raise ServerDisconnected("the connection was reset before any answer") from exc
    if not line:
        raise ServerDisconnected("the server closed the connection without answering")
    version, _, rest = line.decode("iso-8859-1").rstrip("\r\n").partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise RemoteProtocolError(f"the answer is not HTTP/1.x ({version[:20]!r})")
    if len(code) != 3 or not code.isdigit():
        raise RemoteProtocolError(f"invalid status code {code[:20]!r}")
    return version, int(code), reason.strip()


def _header_block(stream: Reader) -> Headers:
    headers = Headers()
    pending: tuple[str, str] | None = None
    for _ in range(MAX_FIELDS + 1):
        line = _line(stream)
        if not line:
            raise RemoteProtocolError("the answer was cut short in its header")
        if line in (b"\r\n", b"\n"):
            if pending is not None:
                headers.add(*pending)
            return headers
        text = line.decode("iso-8859-1").rstrip("\r\n")
        if text[:1] in (" ", "\t"):  # an obsolete folded line continues the field before it
            if pending is not None:
                pending = (pending[0], f"{pending[1]} {text.strip()}".strip())
            continue
        if pending is not None:
            headers.add(*pending)
        name, colon, value = text.partition(":")
        pending = (name.strip(), value.strip()) if colon and name.strip() else None
    raise RemoteProtocolError(f"more than {MAX_FIELDS} header fields")


def _content_length(fields: list[str]) -> int | None:
    if not fields:
        return None
    # Repeats of one value are allowed (RFC 9110 8.6); different values are not.
    values = {part.strip() for field in fields for part in field.split(",")}
    value = values.pop()
    if values or not (value.isascii() and value.isdigit()):
        raise RemoteProtocolError("invalid Content-Length")
    return int(value)


def _chunk_size(stream: Reader) -> int:
    line = _line(stream)
    if not line:
        raise RemoteProtocolError("the answer was cut short")
    size = line.split(b";", 1)[0].strip().decode("iso-8859-1")
    if not _HEX.fullmatch(size):
        raise RemoteProtocolError("invalid chunk size")
    return int(size, 16)


def _expect_line_end(stream: Reader) -> None:
    if _line(stream) not in (b"\r\n", b"\n"):
        raise RemoteProtocolError("a chunk is longer than its size")
