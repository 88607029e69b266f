"""The hook client keeps no cookies: each hook request stands alone."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider

from otel_lifecycle_hooks.actions.http import make_client, send
from otel_lifecycle_hooks.render import RenderedRequest
from tests.support.target_server import Reply, TargetServer


def test_a_cookie_a_target_sets_is_not_sent_on_later_requests(target_server: TargetServer):
    target_server.on("/login", Reply(200, {"Set-Cookie": "session=s3cr3t-session; Path=/"}))
    client = make_client(tracer_provider=TracerProvider())
    try:
        first = send(client, RenderedRequest("POST", target_server.url("/login"), {}, b"{}"), 5.0)
        second = send(client, RenderedRequest("POST", target_server.url("/notify"), {}, b"{}"), 5.0)
    finally:
        client.close()

    assert first.ok and second.ok
    requests = target_server.wait_for(2)
    assert "cookie" not in requests[1].headers
