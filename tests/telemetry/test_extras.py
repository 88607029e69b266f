"""gRPC export and Prometheus are extras: asking for one that is missing says which to install."""

from __future__ import annotations

import logging
import sys

import pytest

from otel_lifecycle_hooks.telemetry import setup
from otel_lifecycle_hooks.telemetry.setup import configure_telemetry


@pytest.fixture
def nothing_told_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(setup, "_missing_extras_told", set())


def test_otlp_over_grpc_without_the_grpc_extra_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, nothing_told_yet: None
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc", None)
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
    }
    with caplog.at_level(logging.WARNING, logger="otel_lifecycle_hooks"):
        telemetry = configure_telemetry({}, env)
    telemetry.shutdown(timeout=1)

    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, lines
    assert "pip install 'otel-lifecycle-hooks[grpc]'" in lines[0]
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=grpc" in lines[0]


def test_prometheus_without_its_extra_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, nothing_told_yet: None
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.prometheus", None)
    with caplog.at_level(logging.WARNING, logger="otel_lifecycle_hooks"):
        telemetry = configure_telemetry({}, {"OTEL_METRICS_EXPORTER": "prometheus"})
    telemetry.shutdown(timeout=1)

    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    expected = (
        "telemetry not exported: OTEL_METRICS_EXPORTER=prometheus needs the 'prometheus' extra, "
        "which is not installed: pip install 'otel-lifecycle-hooks[prometheus]'"
    )
    assert lines == [expected]
