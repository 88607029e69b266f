"""One HTTP attempt against a real loopback server: how each kind of answer is classified."""

from __future__ import annotations

import email.utils
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from otel_lifecycle_hooks.actions.http import HttpClient, make_client, parse_retry_after, send
from otel_lifecycle_hooks.render import RenderedRequest
from tests.support.target_server import Reply, TargetServer, self_signed_certificate

# A hang guard, not a timing claim: far above a loaded machine's scheduling delay, far below
# the 30 s a dripping reply below would take to finish.
SLACK = 10.0


@pytest.fixture
def client() -> Iterator[HttpClient]:
    client = make_client(tracer_provider=TracerProvider())
    yield client
    client.close()


def post(url: str, body: bytes = b'{"event":"post-start"}') -> RenderedRequest:
    return RenderedRequest("POST", url, {"Content-Type": "application/json"}, body)


def test_a_2xx_is_ok_and_keeps_a_json_body(client: HttpClient, target_server: TargetServer):
    target_server.on("/register", Reply.json(201, '{"id": "a-1"}'))

    result = send(
        client,
        post(target_server.url("/register")),
        5.0,
        extra_headers={"X-Extra": "1", "content-type": "application/vnd.hub+json"},
    )

    assert result.kind == "ok"
    assert result.status_code == 201
    assert result.response_body == b'{"id": "a-1"}'
    assert result.response_content_type == "application/json"
    (request,) = target_server.requests
    assert request.method == "POST"
    assert request.body == b'{"event":"post-start"}'
    assert request.headers["x-extra"] == "1"
    content_types = [v for k, v in request.header_list if k.lower() == "content-type"]
    assert content_types == ["application/vnd.hub+json"]  # replaced, not doubled
    assert request.headers["user-agent"].startswith("otel-lifecycle-hooks/")


def test_a_binary_body_is_not_kept(client: HttpClient, target_server: TargetServer):
    target_server.on("/bin", Reply(200, {"Content-Type": "application/octet-stream"}, b"\x00\x01"))

    result = send(client, post(target_server.url("/bin")), 5.0)

    assert result.kind == "ok"
    assert result.response_body is None and result.response_content_type is None


def test_a_4xx_is_a_permanent_failure(client: HttpClient, target_server: TargetServer):
    target_server.on("/hook", Reply.json(404, '{"error": "no such agent"}'))

    result = send(client, post(target_server.url("/hook")), 5.0)

    assert result.kind == "permanent"
    assert result.status_code == 404
    assert result.error_type == "http.404"
    assert "404 Not Found" in result.message
    assert result.response_body == b'{"error": "no such agent"}'


def test_a_503_is_transient(client: HttpClient, target_server: TargetServer):
    target_server.on("/hook", Reply(503))

    result = send(client, post(target_server.url("/hook")), 5.0)

    assert (result.kind, result.error_type, result.retry_after) == ("transient", "http.503", None)


def test_a_429_is_transient_and_carries_retry_after_seconds(
    client: HttpClient, target_server: TargetServer
):
    target_server.on("/hook", Reply(429, {"Retry-After": "3"}))

    result = send(client, post(target_server.url("/hook")), 5.0)

    assert (result.kind, result.error_type, result.retry_after) == ("transient", "http.429", 3.0)


def test_retry_after_as_an_http_date_becomes_seconds_from_now(
    client: HttpClient, target_server: TargetServer
):
    in_two_minutes = email.utils.formatdate(time.time() + 120, usegmt=True)
    target_server.on("/hook", Reply(503, {"Retry-After": in_two_minutes}))

    result = send(client, post(target_server.url("/hook")), 5.0)

    assert result.retry_after is not None and 115 <= result.retry_after <= 120


def test_retry_after_parsing_is_pure():
    now = 1_800_000_000.0
    assert parse_retry_after("0", now) == 0.0
    assert parse_retry_after(" 7 ", now) == 7.0
    assert parse_retry_after("-5", now) == 0.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == 30.0
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after("nan", now) is None
    assert parse_retry_after(None, now) is None


def test_a_redirect_is_not_followed(client: HttpClient, target_server: TargetServer):
    target_server.on("/old", Reply.redirect(target_server.url("/new?token=s3cret")))

    result = send(client, post(target_server.url("/old")), 5.0)

    assert (result.kind, result.status_code, result.error_type) == (
        "permanent",
        302,
        "http.redirect",
    )
    assert target_server.url("/new") in result.message
    assert "s3cret" not in result.message  # a query string may hold a credential
    time.sleep(0.1)
    assert [r.path for r in target_server.requests] == ["/old"]


def test_a_server_that_hangs_times_out_within_the_timeout(
    client: HttpClient, target_server: TargetServer
):
    target_server.on("/slow", Reply.hang())

    started = time.monotonic()
    result = send(client, post(target_server.url("/slow")), 0.5)
    elapsed = time.monotonic() - started

    assert (result.kind, result.error_type) == ("timeout", "timeout")
    assert elapsed < 0.5 + SLACK


def test_a_dripping_body_cannot_stretch_the_attempt_past_its_timeout(
    client: HttpClient, target_server: TargetServer
):
    # Each byte arrives well within any per-read timeout; only a total deadline stops it.
    target_server.on("/drip", Reply.drip(b"x" * 600, interval=0.05))

    started = time.monotonic()
    result = send(client, post(target_server.url("/drip")), 0.6)
    elapsed = time.monotonic() - started

    assert result.kind == "timeout"
    assert result.status_code == 200  # the headers had arrived
    assert elapsed < 0.6 + SLACK


def test_dripping_headers_cannot_stretch_the_attempt_past_its_timeout(
    client: HttpClient, target_server: TargetServer
):
    target_server.on("/drip", Reply.drip_all(b"x" * 600, interval=0.05))

    started = time.monotonic()
    result = send(client, post(target_server.url("/drip")), 0.6)
    elapsed = time.monotonic() - started

    assert (result.kind, result.status_code) == ("timeout", None)
    assert elapsed < 0.6 + SLACK


def test_a_refused_connection_is_transient(client: HttpClient):
    with socket.socket() as placeholder:  # bind a port, then free it: nothing listens there
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]

    result = send(client, post(f"http://127.0.0.1:{port}/hook"), 5.0)

    assert (result.kind, result.error_type) == ("transient", "ConnectError")
    assert "refused" in result.message.lower()


def test_a_reset_mid_response_is_transient(client: HttpClient, target_server: TargetServer):
    target_server.on("/hook", Reply.reset())

    result = send(client, post(target_server.url("/hook")), 5.0)

    assert result.kind == "transient"
    assert result.error_type in {"ReadError", "RemoteProtocolError"}


def test_a_connection_closed_mid_body_is_transient(client: HttpClient, target_server: TargetServer):
    target_server.on("/hook", Reply.close_mid_body())

    result = send(client, post(target_server.url("/hook")), 5.0)

    assert (result.kind, result.error_type) == ("transient", "RemoteProtocolError")


def test_a_100_mb_body_is_read_only_up_to_max_body(client: HttpClient, target_server: TargetServer):
    target_server.on("/big", Reply.huge(100 * 1024 * 1024))
    peak_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    result = send(client, post(target_server.url("/big")), 10.0, max_body=4096)

    assert result.kind == "ok"
    assert result.response_body is not None and len(result.response_body) == 4096
    peak_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before_kib
    assert peak_growth_kib < 32 * 1024  # far below the 100 MB a buffered read would take
    # The connection was dropped after max_body: the next request still gets a fresh answer.
    target_server.on("/after", Reply.json(200, "{}"))
    assert send(client, post(target_server.url("/after")), 5.0).kind == "ok"


def test_a_plain_http_server_addressed_with_https_is_a_permanent_tls_failure(
    client: HttpClient, target_server: TargetServer
):
    url = target_server.url("/hook").replace("http://", "https://")

    result = send(client, post(url), 5.0)

    assert (result.kind, result.error_type) == ("permanent", "TLSError")


def test_an_untrusted_certificate_is_a_permanent_tls_failure(client: HttpClient, tmp_path: Path):
    with TargetServer(tls=self_signed_certificate(tmp_path)) as server:
        result = send(client, post(server.url("/hook")), 5.0)

    assert (result.kind, result.error_type) == ("permanent", "TLSError")
    assert "certificate verify failed" in result.message
    assert server.requests == []


def test_an_unresolvable_name_is_a_transient_dns_error(client: HttpClient):
    result = send(client, post("http://nonexistent.invalid/hook"), 5.0)

    assert (result.kind, result.error_type) == ("transient", "DNSError")
    assert "nonexistent.invalid" in result.message


def test_an_unsupported_scheme_is_permanent(client: HttpClient):
    result = send(client, post("ftp://127.0.0.1/file"), 5.0)

    assert (result.kind, result.error_type) == ("permanent", "UnsupportedProtocol")


def test_an_instrumented_attempt_is_a_client_span_and_carries_traceparent(
    target_server: TargetServer,
):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = make_client(tracer_provider=provider)
    target_server.on("/hook", Reply(204))
    try:
        with provider.get_tracer("test").start_as_current_span("agent.lifecycle_hook") as parent:
            result = send(client, post(target_server.url("/hook?x=1")), 5.0)
    finally:
        client.close()

    assert result.kind == "ok"
    (request,) = target_server.requests
    trace_id = format(parent.get_span_context().trace_id, "032x")
    assert request.headers["traceparent"].split("-")[1] == trace_id
    (client_span,) = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert client_span.parent is not None
    assert client_span.parent.span_id == parent.get_span_context().span_id
    assert client_span.attributes["http.request.method"] == "POST"
    assert client_span.attributes["url.full"].startswith(target_server.url("/hook"))
    assert client_span.attributes["http.response.status_code"] == 204
    assert "http.method" not in client_span.attributes  # the old conventions are not emitted


def test_each_attempt_is_measured_and_a_failed_one_is_an_error_span(target_server: TargetServer):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.trace import StatusCode

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    client = make_client(tracer_provider=provider, meter_provider=MeterProvider([reader]))
    target_server.on("/ok", Reply(204))
    target_server.on("/down", Reply(503))
    try:
        send(client, post(target_server.url("/ok")), 5.0)
        send(client, post(target_server.url("/down")), 5.0)
    finally:
        client.close()

    ok, down = exporter.get_finished_spans()
    assert (ok.name, ok.status.status_code) == ("POST", StatusCode.UNSET)
    assert (down.status.status_code, down.attributes["error.type"]) == (StatusCode.ERROR, "503")
    assert down.attributes["network.protocol.version"] == "1.1"
    assert down.instrumentation_scope.name == "opentelemetry.instrumentation.httpx"
    data = reader.get_metrics_data()
    (metric,) = [
        m
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "http.client.request.duration"
    ]
    points = {p.attributes["http.response.status_code"]: p for p in metric.data.data_points}
    assert sorted(points) == [204, 503]
    assert points[503].attributes["error.type"] == "503"
    assert points[204].count == 1 and "error.type" not in points[204].attributes


def test_baggage_in_the_context_travels_with_the_global_propagator(target_server: TargetServer):
    from opentelemetry import baggage, context

    client = make_client(tracer_provider=TracerProvider())
    target_server.on("/hook", Reply(204))
    token = context.attach(baggage.set_baggage("tenant", "blue"))
    try:
        result = send(client, post(target_server.url("/hook")), 5.0)
    finally:
        context.detach(token)
        client.close()

    assert result.ok
    (request,) = target_server.requests
    assert request.headers["baggage"] == "tenant=blue"


def test_https_to_a_server_whose_certificate_is_trusted_through_ssl_cert_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    certificate, key = self_signed_certificate(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate))
    client = HttpClient(tracer_provider=TracerProvider())
    with TargetServer(tls=(certificate, key)) as server:
        server.always("/hook", Reply.json(200, '{"ok": true}'))
        try:
            results = [send(client, post(server.url("/hook")), 5.0) for _ in range(2)]
        finally:
            client.close()

    assert [(r.kind, r.status_code, r.response_body) for r in results] == [
        ("ok", 200, b'{"ok": true}')
    ] * 2
    assert [r.method for r in server.requests] == ["POST", "POST"]
