"""Edge cases of the HTTP/1.1 client (wire.py, transport.py, http.py): framing, keep-alive,
deadlines, proxies, URLs and secrets, each against a real loopback server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from otel_lifecycle_hooks.actions.http import HttpClient, send
from otel_lifecycle_hooks.actions.transport import Target, proxy_for
from otel_lifecycle_hooks.render import RenderedRequest
from tests.actions.test_transport import OK, RawServer
from tests.support.target_server import self_signed_certificate

SLACK = 1.5  # seconds allowed past a timeout for a hang check


@pytest.fixture
def client() -> Iterator[HttpClient]:
    client = HttpClient(tracer_provider=TracerProvider(), environ={})
    yield client
    client.close()


def post(url: str) -> RenderedRequest:
    return RenderedRequest("POST", url, {"Content-Type": "application/json"}, b"{}")


def answering(*answers: bytes) -> RawServer:
    """Answers the n-th request on a connection with answers[n], then waits for the client."""

    def serve(server: RawServer, conn: socket.socket) -> None:
        for answer in answers:
            if not server.read_request(conn):
                return
            conn.sendall(answer)
        conn.recv(1)  # keep the connection open until the client or close() ends it

    return RawServer(serve)


# -- framing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "answer"),
    [
        ("HEAD", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
        ("POST", b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n"),
    ],
)
def test_a_bodiless_answer_that_names_chunked_is_complete(
    client: HttpClient, method: str, answer: bytes
) -> None:
    # RFC 9112 6.3: HEAD, 1xx, 204 and 304 answers end at the header block, whatever
    # Transfer-Encoding says (a HEAD answer carries the GET answer's fields).
    server = answering(answer)
    try:
        url = f"http://127.0.0.1:{server.port}/hook"
        result = send(client, RenderedRequest(method, url, {}, None), 1.0)
    finally:
        server.close()

    assert (result.kind, result.error_type) == ("ok", None)


def test_bytes_after_a_complete_answer_do_not_become_the_next_answer(client: HttpClient) -> None:
    # The server writes one answer too many (or a stray CRLF) after a complete body. Those
    # bytes sit in the client's read buffer, where dropped() does not look.
    stale = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"
    fresh = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}"
    server = answering(OK + stale, fresh)
    try:
        url = f"http://127.0.0.1:{server.port}/hook"
        first = send(client, post(url), 2.0)
        second = send(client, post(url), 2.0)
    finally:
        server.close()

    assert first.kind == "ok"
    assert (second.kind, second.status_code) == ("ok", 200), second


def test_conflicting_content_length_fields_are_a_protocol_error(client: HttpClient) -> None:
    answer = b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 7\r\n\r\n{}"abcd"'
    server = answering(answer)
    try:
        result = send(client, post(f"http://127.0.0.1:{server.port}/hook"), 2.0)
    finally:
        server.close()

    assert result.error_type == "RemoteProtocolError", result


def test_a_content_length_of_latin_1_digits_is_a_protocol_error(client: HttpClient) -> None:
    # "\xb2" (superscript two) passes str.isdigit() but not int().
    server = answering(b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n{}")
    try:
        result = send(client, post(f"http://127.0.0.1:{server.port}/hook"), 2.0)
    finally:
        server.close()

    assert (result.kind, result.error_type) == ("transient", "RemoteProtocolError"), result


# -- keep-alive retry --------------------------------------------------------------------------


def test_a_post_the_server_received_is_not_sent_again_and_again(client: HttpClient) -> None:
    # Three connections are kept alive; then the server takes every later request and drops
    # the connection without answering (a crash after processing, a proxy's idle cut).
    pooled = 3
    all_connected = threading.Barrier(pooled, timeout=5)
    connections = 0
    lock = threading.Lock()

    def serve(server: RawServer, conn: socket.socket) -> None:
        nonlocal connections
        with lock:
            connections += 1
            index = connections
        if not server.read_request(conn):
            return
        if index > pooled:
            return  # received (and processed), then the connection drops
        all_connected.wait()  # the first requests overlap: one connection each
        conn.sendall(OK)
        server.read_request(conn)  # received (and processed), then the connection drops

    server = RawServer(serve)
    url = f"http://127.0.0.1:{server.port}/hook"
    try:
        warm_up = [threading.Thread(target=send, args=(client, post(url), 5.0)) for _ in range(3)]
        for thread in warm_up:
            thread.start()
        for thread in warm_up:
            thread.join(timeout=10)
        before = len(server.received)
        result = send(client, post(url), 5.0)
        deliveries = len(server.received) - before
    finally:
        server.close()

    assert before == pooled
    assert result.error_type == "RemoteProtocolError"
    # One POST from the hook's point of view; the server got it this many times:
    assert deliveries <= 2, f"one attempt delivered the POST {deliveries} times"


def test_a_large_upload_to_a_slow_tls_reader_cannot_stretch_the_attempt(tmp_path: Path) -> None:
    # ssl.SSLSocket.sendall grants each record's send() the whole socket timeout afresh
    # (a plain socket's sendall is bounded in total).
    import ssl

    certificate, key = self_signed_certificate(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(str(certificate), str(key))
    stop = threading.Event()

    def read_slowly(server: RawServer, conn: socket.socket) -> None:
        with server_context.wrap_socket(conn, server_side=True) as tls:
            while not stop.wait(0.02) and tls.recv(16384):
                pass

    server = RawServer(read_slowly)
    client = HttpClient(
        tracer_provider=TracerProvider(), environ={"SSL_CERT_FILE": str(certificate)}
    )
    body = b"x" * (16 * 1024 * 1024)
    request = RenderedRequest("POST", f"https://127.0.0.1:{server.port}/hook", {}, body)
    attempt = threading.Thread(target=send, args=(client, request, 1.0), daemon=True)
    try:
        attempt.start()
        attempt.join(timeout=1.0 + SLACK)
        still_running = attempt.is_alive()
    finally:
        stop.set()
        server.close()
        attempt.join(timeout=5)
        client.close()

    assert not still_running, "the attempt outlived its 1 s timeout"


# -- deadlines ---------------------------------------------------------------------------------


def test_a_tls_handshake_that_drips_cannot_stretch_the_attempt(client: HttpClient) -> None:
    # The "server" starts a 16 KiB TLS record and then sends one byte every 0.2 s: each read
    # of the handshake is granted the whole timeout afresh.
    stop = threading.Event()

    def drip(server: RawServer, conn: socket.socket) -> None:
        conn.recv(65536)  # ClientHello
        conn.sendall(b"\x16\x03\x03\x40\x00")
        while not stop.wait(0.2):
            conn.sendall(b"\x00")

    server = RawServer(drip)
    results = []
    attempt = threading.Thread(
        target=lambda: results.append(
            send(client, post(f"https://127.0.0.1:{server.port}/hook"), 1.0)
        ),
        daemon=True,
    )
    try:
        attempt.start()
        attempt.join(timeout=1.0 + SLACK)
        still_running = attempt.is_alive()
    finally:
        stop.set()
        server.close()
        attempt.join(timeout=5)

    assert not still_running, "the attempt outlived its 1 s timeout"


def test_a_name_with_several_addresses_is_connected_within_one_timeout(
    client: HttpClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two addresses that both drop SYNs (a listener whose one-slot backlog is full): as a name
    # with several A records whose hosts are down. create_connection grants each address the
    # whole timeout.
    listeners, fillers, addresses = [], [], []
    for _ in range(2):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        filler = socket.create_connection(listener.getsockname(), timeout=2)
        listeners.append(listener)
        fillers.append(filler)
        addresses.append(listener.getsockname())
    resolved = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", address) for address in addresses]
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host in (b"hooks.example.test", "hooks.example.test"):
            return resolved
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    try:
        started = time.monotonic()
        result = send(client, post("http://hooks.example.test/hook"), 1.0)
        took = time.monotonic() - started
    finally:
        for sock in (*fillers, *listeners):
            sock.close()

    assert result.error_type == "timeout"
    assert took < 1.0 + 0.5, f"a 1 s attempt took {took:.1f} s"


# -- proxies and secrets -----------------------------------------------------------------------


def test_a_proxy_password_never_reaches_the_message() -> None:
    # An unencoded "/" in the password makes urlsplit read "s3cr3t" as the port.
    client = HttpClient(
        tracer_provider=TracerProvider(),
        environ={"http_proxy": "http://hook:s3cr3t/x@proxy.example.test:3128"},
    )
    try:
        result = send(client, post("http://hooks.example.test/hook"), 1.0)
    finally:
        client.close()

    assert result.error_type == "ProxyError"
    assert "s3cr3t" not in result.message, result.message


def test_a_url_password_never_reaches_the_message(client: HttpClient) -> None:
    result = send(client, post("http://hook:s3cr3t#x@hooks.example.test/hook"), 1.0)

    assert result.error_type == "InvalidURL"
    assert "s3cr3t" not in result.message, result.message


def test_a_name_that_starts_with_127_still_goes_through_the_proxy() -> None:
    environ = {"http_proxy": "http://proxy.example.test:3128"}

    proxy = proxy_for(Target("http://127.hooks.example.com/hook"), environ)

    assert proxy is not None and proxy.host == "proxy.example.test"


# -- URLs --------------------------------------------------------------------------------------


def test_port_zero_is_an_invalid_url(client: HttpClient) -> None:
    result = send(client, post("http://127.0.0.1:0/hook"), 1.0)

    assert result.error_type == "InvalidURL", result


def test_a_non_ascii_path_is_sent_percent_encoded_as_utf_8(client: HttpClient) -> None:
    server = answering(OK)
    try:
        result = send(client, post(f"http://127.0.0.1:{server.port}/caf\u00e9"), 2.0)
    finally:
        server.close()

    assert result.kind == "ok"
    assert server.received[0].startswith(b"POST /caf%C3%A9 HTTP/1.1\r\n"), server.received[0][:40]


def test_an_at_sign_in_the_query_does_not_change_the_recorded_host() -> None:
    from otel_lifecycle_hooks.actions.http import _without_userinfo

    url = "https://hooks.example.com?next=a@b.example"

    assert _without_userinfo(url) == url


def test_a_101_answer_leaves_a_connection_that_cannot_be_reused() -> None:
    import io

    from otel_lifecycle_hooks.actions.wire import Response

    raw = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x00"
    response = Response(io.BufferedReader(io.BytesIO(raw)), "GET")

    assert not response.complete or response.will_close
