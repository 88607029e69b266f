"""The hook client keeps no cookies: each hook request stands alone."""

from __future__ import annotations

import pytest
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


def test_the_client_holds_no_cookie_and_takes_none(target_server: TargetServer):
    target_server.on("/login", Reply(200, {"Set-Cookie": "session=s3cr3t-session; Path=/"}))
    client = make_client(tracer_provider=TracerProvider())
    try:
        answered = send(
            client, RenderedRequest("POST", target_server.url("/login"), {}, b"{}"), 5.0
        )
        assert answered.ok
        assert len(client.client.cookies) == 0
        # A cookie given to the client would ride along on every later request.
        with pytest.raises(TypeError, match="keeps no cookies"):
            client.client.cookies = {"session": "s3cr3t-session"}
        assert len(client.client.cookies) == 0
    finally:
        client.close()
