"""Both OTLP protocols against a real receiver (rotel), configured only through OTEL_*."""

from __future__ import annotations

import pytest

from otel_lifecycle_hooks.telemetry.setup import configure_telemetry
from tests.support.rotel import RotelReceiver


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_span_reaches_the_collector(rotel_receiver: RotelReceiver, protocol: str) -> None:
    endpoint = rotel_receiver.grpc_endpoint if protocol == "grpc" else rotel_receiver.http_endpoint
    span_name = f"invoke_agent over {protocol.replace('/', '-')}"
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "rotel-check",
    }
    telemetry = configure_telemetry({}, env)
    with telemetry.tracer_provider.get_tracer("test").start_as_current_span(span_name) as span:
        span.add_event("agent.lifecycle.post_start", {"agent.lifecycle.event": "post-start"})
    telemetry.shutdown(timeout=5)
    output = rotel_receiver.wait_for(span_name)
    assert "rotel-check" in output
    assert "agent.lifecycle.post_start" in output
