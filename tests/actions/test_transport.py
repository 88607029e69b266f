"""The HTTP client's connections: keep-alive, stale connections, proxies from the environment."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_lifecycle_hooks.actions import transport
from otel_lifecycle_hooks.actions.base import AttemptResult
from otel_lifecycle_hooks.actions.http import HttpClient, send
from otel_lifecycle_hooks.actions.transport import ConnectionPool, Target, proxy_for
from otel_lifecycle_hooks.render import RenderedRequest

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}"


class RawServer:
    """A loopback server that hands each accepted connection to `serve` on its own thread and
    keeps what it read, so that a test sees connections and request bytes as sent."""

    def __init__(self, serve: Callable[[RawServer, socket.socket], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.serve = serve
        self.accepted = 0
        self.received: list[bytes] = []
        self._connections: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            self._connections.append(conn)
            thread = threading.Thread(target=self._serve_one, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve_one(self, conn: socket.socket) -> None:
        with conn:
            try:
                self.serve(self, conn)
            except OSError:
                pass

    def read_request(self, conn: socket.socket) -> bytes:
        """The request head and its body (Content-Length bodies only)."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            body += conn.recv(65536)
        self.received.append(head + b"\r\n\r\n" + body)
        return data

    def close(self) -> None:
        self.listener.close()
        for conn in self._connections:  # wakes the threads still waiting for a request
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=5)


@pytest.fixture
def client() -> Iterator[HttpClient]:
    client = HttpClient(tracer_provider=TracerProvider())
    yield client
    client.close()


def post(url: str) -> RenderedRequest:
    return RenderedRequest("POST", url, {"Content-Type": "application/json"}, b"{}")


def exchange(
    client: HttpClient, server: RawServer, count: int = 1
) -> tuple[list[AttemptResult], RawServer]:
    """`count` requests from `client` to `server`, which is closed afterwards."""
    try:
        url = f"http://127.0.0.1:{server.port}/hook"
        return [send(client, post(url), 5.0) for _ in range(count)], server
    finally:
        server.close()


def keep_alive(server: RawServer, conn: socket.socket) -> None:
    while server.read_request(conn):
        conn.sendall(OK)


def answer_once_then_close_quietly(server: RawServer, conn: socket.socket) -> None:
    # Answers as if the connection stayed open, then closes it: an idle timeout on the server.
    if server.read_request(conn):
        conn.sendall(OK)


def test_requests_to_one_origin_reuse_one_connection(client: HttpClient) -> None:
    server = RawServer(keep_alive)
    try:
        results = [
            send(client, post(f"http://127.0.0.1:{server.port}/hook"), 5.0) for _ in range(5)
        ]
    finally:
        client.close()
        server.close()

    assert [r.kind for r in results] == ["ok"] * 5
    assert len(server.received) == 5
    assert server.accepted == 1


def test_a_connection_the_server_closed_while_idle_is_not_used(client: HttpClient) -> None:
    server = RawServer(answer_once_then_close_quietly)
    try:
        first = send(client, post(f"http://127.0.0.1:{server.port}/a"), 5.0)
        # Wait until the server has closed its side, as it does after an idle timeout.
        while len(server._threads) < 1 or server._threads[0].is_alive():
            server._threads[0].join(timeout=5)
        second = send(client, post(f"http://127.0.0.1:{server.port}/b"), 5.0)
    finally:
        server.close()

    assert (first.kind, second.kind) == ("ok", "ok")
    assert server.accepted == 2
    assert [r.split(b" ")[1] for r in server.received] == [b"/a", b"/b"]


def test_a_connection_close_answer_is_not_pooled(client: HttpClient) -> None:
    def close_each(server: RawServer, conn: socket.socket) -> None:
        if server.read_request(conn):
            conn.sendall(OK.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))

    results, server = exchange(client, RawServer(close_each), 3)

    assert [r.kind for r in results] == ["ok"] * 3
    assert server.accepted == 3


def test_a_chunked_answer_is_read_and_the_connection_reused(client: HttpClient) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
        b'7\r\n{"id": \r\n4\r\n"a1"\r\n1\r\n}\r\n0\r\n\r\n'
    )

    def serve(server: RawServer, conn: socket.socket) -> None:
        while server.read_request(conn):
            conn.sendall(chunked)

    results, server = exchange(client, RawServer(serve), 2)

    assert [r.response_body for r in results] == [b'{"id": "a1"}'] * 2
    assert server.accepted == 1


def test_plain_http_goes_through_the_proxy_the_environment_names(tmp_path: object) -> None:
    proxy = RawServer(keep_alive)
    environ = {
        "http_proxy": f"http://hook-user:proxy-pass@127.0.0.1:{proxy.port}",
        "NO_PROXY": "internal.example",
    }
    client = HttpClient(tracer_provider=TracerProvider(), environ=environ)
    try:
        result = send(client, post("http://registry.example:8080/v1/services?x=1"), 5.0)
        direct = send(client, post("http://svc.internal.example:9/hook"), 0.5)
    finally:
        client.close()
        proxy.close()

    assert result.kind == "ok"
    (request,) = proxy.received
    request_line, *header_lines = request.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert request_line == b"POST http://registry.example:8080/v1/services?x=1 HTTP/1.1"
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(b":") for h in header_lines)}
    assert headers[b"host"] == b"registry.example:8080"
    assert headers[b"proxy-authorization"] == b"Basic aG9vay11c2VyOnByb3h5LXBhc3M="
    # no_proxy covers the subdomain: that request went direct (and found no such host).
    assert direct.error_type in {"DNSError", "ConnectError", "timeout"}


def test_a_tunnel_the_proxy_refuses_is_a_proxy_error() -> None:
    def refuse(server: RawServer, conn: socket.socket) -> None:
        if server.read_request(conn):
            conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")

    proxy = RawServer(refuse)
    client = HttpClient(
        tracer_provider=TracerProvider(), environ={"HTTPS_PROXY": f"127.0.0.1:{proxy.port}"}
    )
    try:
        result = send(client, post("https://registry.example/v1/services?token=s3cret"), 5.0)
    finally:
        client.close()
        proxy.close()

    assert (result.kind, result.error_type) == ("transient", "ProxyError")
    assert "407" in result.message
    assert "s3cret" not in result.message
    assert proxy.received[0].startswith(b"CONNECT registry.example:443 HTTP/1.1\r\n")


@pytest.mark.parametrize(
    ("host", "no_proxy", "bypassed"),
    [
        ("api.example.com", "example.com", True),
        ("api.example.com", ".example.com", True),
        ("example.com", ".example.com", True),
        ("notexample.com", "example.com", False),
        ("api.example.com", "other.org, example.com", True),
        ("api.example.com", "*", True),
        ("10.1.2.3", "10.0.0.0/8", True),
        ("11.1.2.3", "10.0.0.0/8", False),
        ("api.example.com", "example.com:8443", False),
        ("api.example.com", "example.com:443", True),
        ("api.example.com", "", False),
    ],
)
def test_no_proxy_entries(host: str, no_proxy: str, bypassed: bool) -> None:
    environ = {"https_proxy": "http://proxy.internal:3128", "no_proxy": no_proxy}

    proxy = proxy_for(Target(f"https://{host}/"), environ)

    assert (proxy is None) == bypassed


def test_loopback_never_goes_through_a_proxy() -> None:
    environ = {
        "http_proxy": "http://proxy.internal:3128",
        "https_proxy": "http://proxy.internal:3128",
    }

    for url in ("http://127.0.0.1:8080/", "http://localhost/", "https://[::1]:8443/"):
        assert proxy_for(Target(url), environ) is None
    assert proxy_for(Target("http://registry.example/"), environ) is not None


def test_the_lower_case_variable_wins() -> None:
    environ = {"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2"}

    proxy = proxy_for(Target("https://registry.example/"), environ)

    assert proxy is not None and proxy.key == ("lower", 1)


def test_a_proxy_variable_of_another_scheme_is_a_clear_error(client: HttpClient) -> None:
    client = HttpClient(
        tracer_provider=TracerProvider(), environ={"https_proxy": "socks5://127.0.0.1:1080"}
    )
    try:
        result = send(client, post("https://registry.example/"), 5.0)
    finally:
        client.close()

    assert result.error_type == "ProxyError"
    assert "only http:// proxies" in result.message


def test_targets_keep_their_path_as_written() -> None:
    target = Target("http://user:pa%40ss@hooks.example:8080/a/%2E%2E/b?q=1#frag")

    assert (target.host, target.port, target.path) == ("hooks.example", 8080, "/a/%2E%2E/b?q=1")
    assert target.host_header == "hooks.example:8080"
    assert target.userinfo == ("user", "pa@ss")
    assert Target("https://[::1]/").host_header == "[::1]"
    assert Target("https://hooks.example:443").path == "/"


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://127.0.0.1/file", transport.UnsupportedProtocol),
        ("http:///path", transport.InvalidURL),
        ("http://127.0.0.1:99999/", transport.InvalidURL),
    ],
)
def test_urls_that_cannot_be_requested(url: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        Target(url)


def test_userinfo_in_the_url_becomes_basic_auth_and_stays_off_the_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = HttpClient(tracer_provider=provider, environ={})
    server = RawServer(keep_alive)
    try:
        result = send(client, post(f"http://hook:s3cret@127.0.0.1:{server.port}/hook"), 5.0)
    finally:
        client.close()
        server.close()

    assert result.kind == "ok"
    assert b"Authorization: Basic aG9vazpzM2NyZXQ=\r\n" in server.received[0]
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["url.full"] == f"http://REDACTED:REDACTED@127.0.0.1:{server.port}/hook"


def test_a_closed_pool_keeps_no_connection() -> None:
    pool = ConnectionPool({})
    server = RawServer(keep_alive)
    client = HttpClient(tracer_provider=TracerProvider(), environ={})
    client.pool = pool
    try:
        assert send(client, post(f"http://127.0.0.1:{server.port}/hook"), 5.0).kind == "ok"
        assert sum(len(idle) for idle in pool._idle.values()) == 1
        pool.close()
        assert pool._idle == {}
    finally:
        server.close()


def answering(*answers: bytes) -> RawServer:
    """A server that answers the n-th request on a connection with answers[n], as written."""

    def serve(server: RawServer, conn: socket.socket) -> None:
        for answer in answers:
            if not server.read_request(conn):
                return
            conn.sendall(answer)

    return RawServer(serve)


def test_interim_answers_folded_and_repeated_fields_are_read(client: HttpClient) -> None:
    server = answering(
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 429 Too Many Requests\r\n"
        b"Retry-After:\r\n  7\r\n"
        b"Content-Type: text/plain\r\nX-Seen: 1\r\nx-seen: 2\r\nContent-Length: 4\r\n\r\nslow"
    )
    try:
        result = send(client, post(f"http://127.0.0.1:{server.port}/hook"), 5.0)
    finally:
        server.close()

    assert (result.status_code, result.retry_after) == (429, 7.0)
    assert (result.response_body, result.response_content_type) == (b"slow", "text/plain")


def test_an_http_1_0_answer_without_keep_alive_ends_the_connection(client: HttpClient) -> None:
    results, server = exchange(
        client, answering(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"), 2
    )

    assert [r.kind for r in results] == ["ok", "ok"]
    assert server.accepted == 2


def test_a_body_without_length_runs_to_the_end_of_the_connection(client: HttpClient) -> None:
    def serve(server: RawServer, conn: socket.socket) -> None:
        if server.read_request(conn):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it")
            conn.shutdown(socket.SHUT_WR)

    (result,), _ = exchange(client, RawServer(serve))

    assert (result.kind, result.response_body) == ("ok", b"all of it")


@pytest.mark.parametrize(
    "answer",
    [
        b"ICY 200 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X-Many: 1\r\n" * 101 + b"\r\n",
    ],
)
def test_an_answer_that_is_not_http_1_1_is_a_protocol_error(
    client: HttpClient, answer: bytes
) -> None:
    (result,), _ = exchange(client, answering(answer))

    assert (result.kind, result.error_type) == ("transient", "RemoteProtocolError")


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nContent-Le",
    ],
)
def test_an_answer_cut_short_is_a_protocol_error(client: HttpClient, answer: bytes) -> None:
    def serve(server: RawServer, conn: socket.socket) -> None:
        if server.read_request(conn):
            conn.sendall(answer)
            conn.shutdown(socket.SHUT_WR)

    (result,), _ = exchange(client, RawServer(serve))

    assert (result.kind, result.error_type) == ("transient", "RemoteProtocolError")


def test_a_header_that_could_split_the_request_is_refused(client: HttpClient) -> None:
    server = RawServer(keep_alive)
    request = RenderedRequest("POST", f"http://127.0.0.1:{server.port}/", {"X-A": "1\r\nX-B: 2"})
    try:
        result = send(client, request, 5.0)
    finally:
        server.close()

    assert (result.kind, result.error_type) == ("permanent", "LocalProtocolError")
    assert server.received == []


def test_a_server_that_closes_without_answering_is_a_protocol_error(client: HttpClient) -> None:
    def close_at_once(server: RawServer, conn: socket.socket) -> None:
        server.read_request(conn)

    (result,), _ = exchange(client, RawServer(close_at_once))

    assert (result.kind, result.error_type) == ("transient", "RemoteProtocolError")
    assert "without answering" in result.message


def test_a_proxy_whose_name_does_not_resolve_is_a_proxy_error() -> None:
    client = HttpClient(
        tracer_provider=TracerProvider(), environ={"https_proxy": "http://proxy.invalid:3128"}
    )
    try:
        result = send(client, post("https://registry.example/v1/services"), 5.0)
    finally:
        client.close()

    assert (result.kind, result.error_type) == ("transient", "ProxyError")
    assert "proxy.invalid" in result.message
