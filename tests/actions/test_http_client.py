"""The hook client on httpx: its CLIENT spans and metrics, pooling, proxies, and the credential
guard on the request as it is sent. Real loopback servers for behaviour; respx for a request's
exact shape."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator

import httpx
import pytest
import respx
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from otel_lifecycle_hooks.actions.http import HttpClient, Origin, make_client, send
from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.render import RenderedRequest
from otel_lifecycle_hooks.template.loader import load_template_text
from tests.support.target_server import Reply, TargetServer

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}"
TOKEN = "tok-3f9a1c"


class RawServer:
    """A loopback server that hands each accepted connection to `serve` on its own thread and
    keeps the request bytes it read, so that a test sees connections and requests as sent."""

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
            thread.start()  # before it is listed: close() joins only started threads
            self._threads.append(thread)

    def _serve_one(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            self.serve(self, conn)

    def read_request(self, conn: socket.socket) -> bytes:
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
        for conn in self._connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=5)


def keep_alive(server: RawServer, conn: socket.socket) -> None:
    while server.read_request(conn):
        conn.sendall(OK)


@pytest.fixture
def client() -> Iterator[HttpClient]:
    client = make_client(tracer_provider=TracerProvider())
    yield client
    client.close()


def post(url: str, headers: dict[str, str] | None = None) -> RenderedRequest:
    return RenderedRequest(
        "POST", url, {"Content-Type": "application/json", **(headers or {})}, b"{}"
    )


def traced() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def client_spans(exporter: InMemorySpanExporter) -> list:
    return [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]


# -- spans and metrics through the engine ------------------------------------------------------


def test_the_client_span_is_the_httpx_instrumentations_child_of_the_hook_span_with_stable_names(
    target_server: TargetServer,
):
    provider, exporter = traced()
    reader = InMemoryMetricReader()
    target_server.on("/hook", Reply(204))
    template = load_template_text(
        textwrap.dedent(
            f"""
            lifecycle_hooks:
              - name: notify
                on: [post-start]
                action: {{type: http, method: POST, url: "{target_server.url("/hook")}?s=1"}}
                blocking: true
            """
        )
    )
    engine = HookEngine(
        template,
        tracer_provider=provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
        journal=False,
        hook_log=False,
    )
    session = AgentSession(engine, agent_name="agent-1", tracer_provider=provider)
    session.record("post-start")
    session.end()
    engine.shutdown(5)

    (hook,) = [
        s for s in exporter.get_finished_spans() if s.name.startswith("agent.lifecycle_hook ")
    ]
    (span,) = client_spans(exporter)
    assert span.instrumentation_scope.name == "opentelemetry.instrumentation.httpx"
    assert span.parent is not None and span.parent.span_id == hook.context.span_id
    assert span.attributes["http.request.method"] == "POST"
    assert span.attributes["url.full"] == f"{target_server.url('/hook')}?s=1"
    assert span.attributes["server.address"] == "127.0.0.1"
    assert span.attributes["server.port"] == target_server.port
    assert span.attributes["http.response.status_code"] == 204
    assert "http.method" not in span.attributes and "http.url" not in span.attributes
    (request,) = target_server.requests
    assert request.headers["traceparent"].split("-")[2] == format(span.context.span_id, "016x")
    names = [
        m.name
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    ]
    assert "http.client.request.duration" in names


# Each order runs in a fresh interpreter: instrumenting httpx globally, and the semantic
# conventions the first instrumentation of a process settles, are process-wide.
GLOBAL_INSTRUMENTATION = """
import json, sys
import httpx
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from otel_lifecycle_hooks.actions.http import make_client, send
from otel_lifecycle_hooks.render import RenderedRequest

def traced():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter

url, host_first = sys.argv[1], sys.argv[2] == "host-first"
package_provider, package_spans = traced()
host_provider, host_spans = traced()
if host_first:
    HTTPXClientInstrumentor().instrument(tracer_provider=host_provider)
client = make_client(tracer_provider=package_provider)
if not host_first:
    HTTPXClientInstrumentor().instrument(tracer_provider=host_provider)
with package_provider.get_tracer("t").start_as_current_span("agent.lifecycle_hook"):
    assert send(client, RenderedRequest("POST", url, {}, b"{}"), 5.0).ok
with httpx.Client() as own:  # the host application's own request
    assert own.get(url).status_code == 204
client.close()

def described(exporter):
    return [
        {"method": s.attributes.get("http.request.method", s.attributes.get("http.method")),
         "stable": "http.request.method" in s.attributes}
        for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT
    ]

print(json.dumps({"package": described(package_spans), "host": described(host_spans)}))
"""


@pytest.mark.parametrize("order", ["host-first", "package-first"])
def test_a_host_that_instruments_httpx_globally_gets_one_span_per_request_each_in_its_provider(
    target_server: TargetServer, order: str
):
    target_server.always("/hook", Reply(204))
    env = {k: v for k, v in os.environ.items() if k != "OTEL_SEMCONV_STABILITY_OPT_IN"}
    done = subprocess.run(
        [sys.executable, "-c", GLOBAL_INSTRUMENTATION, target_server.url("/hook"), order],
        capture_output=True, text=True, env=env, check=False, timeout=60,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    spans = json.loads(done.stdout)
    (package,) = spans["package"]
    (host,) = spans["host"]
    assert (package["method"], host["method"]) == ("POST", "GET")
    # The first instrumentation of the process settles the conventions for all
    # (docs/existing-tracer.md): the host's default when it came first, else stable ones.
    assert package["stable"] is host["stable"] is (order == "package-first")


# -- the request's shape (respx) ---------------------------------------------------------------


def test_the_request_carries_its_headers_body_and_trace_context_and_no_cookie():
    provider, _ = traced()
    client = make_client(tracer_provider=provider)
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post("https://hub.example/v1/hooks").mock(
            return_value=httpx.Response(200, json={"id": "a-1"}, headers={"Set-Cookie": "s=1"})
        )
        request = RenderedRequest(
            "POST",
            "https://hub.example/v1/hooks",
            {"content-type": "application/json", "Content-Length": "999"},
            b'{"event":"post-start"}',
        )
        with provider.get_tracer("t").start_as_current_span("agent.lifecycle_hook"):
            first = send(client, request, 5.0, extra_headers={"X-Scion-Hook-ID": "a:b:c:d"})
            second = send(client, request, 5.0, extra_headers={"X-Scion-Hook-ID": "a:b:c:e"})
    client.close()

    assert first.ok and first.response_body == b'{"id":"a-1"}'
    assert second.ok
    sent = route.calls[0].request
    assert sent.content == b'{"event":"post-start"}'
    assert sent.headers["content-length"] == str(len(sent.content))
    assert sent.headers["x-scion-hook-id"] == "a:b:c:d"
    assert sent.headers["user-agent"].startswith("otel-lifecycle-hooks/")
    assert sent.headers["accept-encoding"] == "identity"
    assert len(sent.headers["traceparent"].split("-")) == 4
    assert sent.headers.get_list("content-type") == ["application/json"]
    assert "cookie" not in route.calls[1].request.headers


# -- pooling and proxies -----------------------------------------------------------------------


def test_requests_to_one_origin_reuse_one_connection(client: HttpClient) -> None:
    server = RawServer(keep_alive)
    try:
        results = [
            send(client, post(f"http://127.0.0.1:{server.port}/hook"), 5.0) for _ in range(3)
        ]
    finally:
        server.close()

    assert [r.kind for r in results] == ["ok"] * 3
    assert server.accepted == 1


def test_plain_http_goes_through_the_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = RawServer(keep_alive)
    monkeypatch.setenv("http_proxy", f"http://hook-user:proxy-pass@127.0.0.1:{proxy.port}")
    monkeypatch.setenv("no_proxy", "internal.example")
    client = make_client(tracer_provider=TracerProvider())
    try:
        result = send(client, post("http://registry.example:8080/v1/services?x=1"), 5.0)
    finally:
        client.close()
        proxy.close()

    assert result.kind == "ok"
    (request,) = proxy.received
    request_line, *header_lines = request.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert request_line == b"POST http://registry.example:8080/v1/services?x=1 HTTP/1.1"
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(b":") for h in header_lines)}
    assert headers[b"proxy-authorization"] == b"Basic aG9vay11c2VyOnByb3h5LXBhc3M="


def test_a_credentialed_loopback_request_never_shows_its_token_to_the_proxy(
    monkeypatch: pytest.MonkeyPatch, target_server: TargetServer
) -> None:
    proxy = RawServer(keep_alive)
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    target_server.always("/hook", Reply(204))
    client = make_client(tracer_provider=TracerProvider())
    try:
        results = [
            send(
                client,
                post(url),
                5.0,
                extra_headers={"Authorization": f"Bearer {TOKEN}"},
                credentialed=True,
            )
            for url in (target_server.url("/hook"), target_server.url("/hook", host="localhost"))
        ]
    finally:
        client.close()
        proxy.close()

    assert [r.kind for r in results] == ["ok", "ok"]
    assert proxy.received == []
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in target_server.requests)


@pytest.mark.parametrize(
    ("url", "headers", "credentialed"),
    [
        ("http://registry.example/v1", {}, True),
        ("http://registry.example/v1", {"Authorization": f"Bearer {TOKEN}"}, False),
        (f"http://hook:{TOKEN}@registry.example/v1", {}, False),
        ("http://127.hooks.example/v1", {}, True),  # a name, not a loopback address
    ],
    ids=["auth", "authorization-header", "userinfo", "name-starting-with-127"],
)
def test_credentials_for_plain_http_off_loopback_are_refused_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, url: str, headers: dict[str, str], credentialed: bool
) -> None:
    proxy = RawServer(keep_alive)
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy.port}")
    client = make_client(tracer_provider=TracerProvider())
    try:
        result = send(client, post(url, headers), 5.0, credentialed=credentialed)
    finally:
        client.close()
        proxy.close()

    assert (result.kind, result.error_type) == ("permanent", "auth.transport_refused")
    assert TOKEN not in result.message
    assert proxy.received == []


def test_userinfo_to_loopback_is_sent_as_basic_auth_and_redacted_on_the_span(
    target_server: TargetServer,
) -> None:
    provider, exporter = traced()
    client = make_client(tracer_provider=provider)
    target_server.on("/hook", Reply(204))
    url = target_server.url("/hook").replace("http://", f"http://hook:{TOKEN}@")
    try:
        result = send(client, post(url), 5.0)
    finally:
        client.close()

    assert result.ok
    assert target_server.requests[0].headers["authorization"].startswith("Basic ")
    (span,) = client_spans(exporter)
    assert TOKEN not in json.dumps(dict(span.attributes))


def test_a_request_that_leaves_the_origin_the_template_fixed_is_refused(
    target_server: TargetServer,
) -> None:
    client = make_client(tracer_provider=TracerProvider())
    fixed = Origin("http", "127.0.0.1", target_server.port)
    try:
        elsewhere = send(client, post(target_server.url("/x", host="127.0.0.2")), 5.0, origin=fixed)
        same = send(client, post(target_server.url("/x")), 5.0, origin=fixed)
    finally:
        client.close()

    assert (elsewhere.kind, elsewhere.error_type) == ("permanent", "auth.origin_refused")
    assert same.ok
    assert len(target_server.requests) == 1


# -- the package imports httpx only when it sends ----------------------------------------------


def test_an_engine_with_http_hooks_starts_without_importing_httpx(tmp_path) -> None:
    template = tmp_path / "t.yaml"
    template.write_text(
        "lifecycle_hooks:\n"
        "  - name: notify\n"
        "    on: [post-start]\n"
        "    action: {type: http, url: 'https://hub.example/x'}\n"
    )
    code = (
        "import sys\n"
        "from otel_lifecycle_hooks.engine import AgentSession, HookEngine\n"
        f"engine = HookEngine.from_template({str(template)!r}, journal=False, hook_log=False)\n"
        "session = AgentSession(engine, agent_name='a')\n"
        "print('httpx' in sys.modules)\n"
        "engine.shutdown(1)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# -- URLs and headers that cannot be sent ------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:0/hook",
        "http://127.0.0.1:99999/hook",
        "http:///hook",
        "http://[::1/hook",
        "http://hook:s3cr3t#x@hooks.example.test/hook",
    ],
)
def test_a_url_that_cannot_be_requested_is_permanent_and_never_quoted(
    client: HttpClient, url: str
) -> None:
    result = send(client, post(url), 1.0)

    assert (result.kind, result.error_type) == ("permanent", "InvalidURL")
    assert "s3cr3t" not in result.message


def test_a_header_that_could_split_the_request_is_refused(client: HttpClient) -> None:
    server = RawServer(keep_alive)
    try:
        result = send(
            client,
            post(f"http://127.0.0.1:{server.port}/hook", {"X-Note": "a\r\nX-Injected: 1"}),
            2.0,
        )
    finally:
        server.close()

    assert result.kind == "permanent"
    assert all(b"X-Injected" not in request for request in server.received)


def test_a_non_ascii_path_is_sent_percent_encoded_as_utf_8(client: HttpClient) -> None:
    server = RawServer(keep_alive)
    try:
        result = send(client, post(f"http://127.0.0.1:{server.port}/caf\u00e9"), 2.0)
    finally:
        server.close()

    assert result.kind == "ok"
    assert server.received[0].startswith(b"POST /caf%C3%A9 HTTP/1.1\r\n")


def test_a_header_value_that_is_not_ascii_is_a_clear_permanent_failure(client: HttpClient) -> None:
    result = send(client, post("http://127.0.0.1:1/hook", {"X-Note": "caf\u00e9"}), 1.0)

    assert (result.kind, result.error_type) == ("permanent", "LocalProtocolError")
    assert "caf" not in result.message and "ASCII" in result.message


# -- the attempt's deadline holds in total, not per read --------------------------------------

# A hang guard: far above a loaded machine's scheduling delay, below the 20 s the slow reader
# below needs for the whole upload.
SLACK = 10.0


def test_a_tls_handshake_that_drips_cannot_stretch_the_attempt(client: HttpClient) -> None:
    # The "server" starts a 16 KiB TLS record and then sends one byte every 0.2 s: each read
    # of the handshake would be granted the whole timeout afresh.
    stop = threading.Event()

    def drip(server: RawServer, conn: socket.socket) -> None:
        conn.recv(65536)  # ClientHello
        conn.sendall(b"\x16\x03\x03\x40\x00")
        while not stop.wait(0.2):
            conn.sendall(b"\x00")

    server = RawServer(drip)
    results: list = []
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
        attempt.join(timeout=30)

    assert not still_running, "the attempt outlived its 1 s timeout"
    assert results[0].kind == "timeout"


def test_a_large_upload_to_a_slow_tls_reader_cannot_stretch_the_attempt(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssl

    from tests.support.target_server import self_signed_certificate

    certificate, key = self_signed_certificate(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate))
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(str(certificate), str(key))
    stop = threading.Event()

    def read_slowly(server: RawServer, conn: socket.socket) -> None:
        with server_context.wrap_socket(conn, server_side=True) as tls:
            while not stop.wait(0.02) and tls.recv(16384):
                pass

    server = RawServer(read_slowly)
    client = make_client(tracer_provider=TracerProvider())
    body = b"x" * (16 * 1024 * 1024)
    request = RenderedRequest("POST", f"https://127.0.0.1:{server.port}/hook", {}, body)
    results: list = []
    attempt = threading.Thread(
        target=lambda: results.append(send(client, request, 1.0)), daemon=True
    )
    try:
        attempt.start()
        attempt.join(timeout=1.0 + SLACK)
        still_running = attempt.is_alive()
    finally:
        stop.set()
        server.close()
        attempt.join(timeout=30)
        client.close()

    assert not still_running, "the attempt outlived its 1 s timeout"
    assert results[0].kind == "timeout"


@pytest.mark.parametrize(
    ("template", "origin"),
    [
        ("https://hub.example/v1/${PATH}", ("https", "hub.example", 443)),
        ("http://127.0.0.1:8080/x?q=${Q}", ("http", "127.0.0.1", 8080)),
        ("https://HUB.example:8443", ("https", "hub.example", 8443)),
        ("${REGISTRY_URL}/tools", None),  # the origin comes from a variable
        ("https://${HOST}/x", None),
        ("https://hub.example:${PORT}/x", None),
        ("https://user:${PW}@hub.example/x", None),
    ],
)
def test_the_origin_a_url_template_fixes_is_read_from_its_literal_text(
    template: str, origin: tuple | None
) -> None:
    from otel_lifecycle_hooks.engine.runners.http import literal_origin

    assert literal_origin(template) == origin


def test_a_tunnel_the_proxy_refuses_is_a_proxy_error_naming_its_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(server: RawServer, conn: socket.socket) -> None:
        if server.read_request(conn):
            conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")

    proxy = RawServer(refuse)
    monkeypatch.setenv("HTTPS_PROXY", f"http://hook:pw-s3cr3t@127.0.0.1:{proxy.port}")
    client = make_client(tracer_provider=TracerProvider())
    try:
        result = send(client, post("https://registry.example/v1/services?token=s3cret"), 5.0)
    finally:
        client.close()
        proxy.close()

    assert (result.kind, result.error_type) == ("transient", "ProxyError")
    assert "407 Proxy Authentication Required" in result.message
    assert "s3cret" not in result.message and "pw-s3cr3t" not in result.message
    assert proxy.received[0].startswith(b"CONNECT registry.example:443 HTTP/1.1\r\n")


def test_a_proxy_this_installation_cannot_speak_is_a_permanent_clear_failure(
    monkeypatch: pytest.MonkeyPatch, target_server: TargetServer
) -> None:
    monkeypatch.setenv("https_proxy", "socks5://127.0.0.1:1080")
    target_server.on("/hook", Reply(204))
    client = make_client(tracer_provider=TracerProvider())
    try:
        result = send(client, post("https://registry.example/v1"), 2.0)
        loopback = send(client, post(target_server.url("/hook")), 2.0)
    finally:
        client.close()

    assert (result.kind, result.error_type) == ("permanent", "ProxyError")
    assert "socks" in result.message.lower()
    assert loopback.ok  # loopback never goes through a proxy
