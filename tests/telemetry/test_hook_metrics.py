"""HookMetrics: the instrument names, units, attributes and buckets the dashboards rely on."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from otel_lifecycle_hooks.telemetry.metrics import DURATION_BUCKETS_S, HookMetrics


def _collect(reader: InMemoryMetricReader) -> dict[str, Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: metric
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
    }


def test_every_method_records_on_its_contract_instrument() -> None:
    reader = InMemoryMetricReader()
    metrics = HookMetrics(MeterProvider(metric_readers=[reader]))
    metrics.record_execution("register", "post-start", "http", "success", 0.2)
    metrics.record_execution("register", "post-start", "http", "failed", 3.0)
    metrics.record_retry("register", "post-start")
    metrics.record_debounced("status", "activity-change", n=3)
    metrics.record_dropped("status", "activity-change", "queue_full")
    metrics.observe_queues(lambda: [("status", 1)])
    metrics.record_event("pre-stop")

    collected = _collect(reader)
    executions = collected["agent.lifecycle_hook.executions"]
    by_outcome = {
        point.attributes["agent.lifecycle_hook.outcome"]: point
        for point in executions.data.data_points
    }
    assert set(by_outcome) == {"success", "failed"}
    assert dict(by_outcome["failed"].attributes) == {
        "agent.lifecycle_hook.name": "register",
        "agent.lifecycle_hook.event": "post-start",
        "agent.lifecycle_hook.outcome": "failed",
        "agent.lifecycle_hook.action": "http",
    }

    duration = collected["agent.lifecycle_hook.duration"]
    assert duration.unit == "s"
    point = next(p for p in duration.data.data_points if isinstance(p, HistogramDataPoint))
    assert tuple(point.explicit_bounds) == tuple(DURATION_BUCKETS_S)
    assert point.explicit_bounds[0] == 0.001 and point.explicit_bounds[-1] == 120.0

    def single(name: str) -> Any:
        (only,) = collected[name].data.data_points
        return only

    assert single("agent.lifecycle_hook.retries").value == 1
    assert single("agent.lifecycle_hook.debounced").value == 3
    dropped = single("agent.lifecycle_hook.dropped")
    assert dropped.attributes["agent.lifecycle_hook.drop_reason"] == "queue_full"
    assert single("agent.lifecycle_hook.queue.depth").value == 1
    assert dict(single("agent.lifecycle.events").attributes) == {
        "agent.lifecycle.event": "pre-stop"
    }


class _BrokenInstrument:
    def add(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("exporter exploded")

    record = add


class _BrokenMeter:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: _BrokenInstrument()


class _BrokenProvider:
    def get_meter(self, *args: object, **kwargs: object) -> _BrokenMeter:
        return _BrokenMeter()


def test_recording_never_raises_into_the_hook_path() -> None:
    metrics = HookMetrics(_BrokenProvider())  # type: ignore[arg-type]
    metrics.record_execution("h", "e", "http", "success", 0.1)
    metrics.record_retry("h", "e")
    metrics.record_debounced("h", "e")
    metrics.record_dropped("h", "e", "shutdown")
    metrics.observe_queues(lambda: [("h", 1)])
    metrics.record_event("e")


def test_an_engine_reports_each_hooks_queue_depth_when_metrics_are_collected() -> None:
    from otel_lifecycle_hooks.engine import HookEngine
    from otel_lifecycle_hooks.template.loader import load_template_text

    template = load_template_text(
        "lifecycle_hooks:\n"
        "  - name: announce\n"
        "    on: [post-start]\n"
        "    action: {type: http, url: 'http://127.0.0.1:9/a'}\n"
        "  - name: status\n"
        "    on: [activity-change]\n"
        "    action: {type: http, url: 'http://127.0.0.1:9/s'}\n"
    )
    reader = InMemoryMetricReader()
    engine = HookEngine(
        template,
        meter_provider=MeterProvider(metric_readers=[reader]),
        journal=False,
        hook_log=False,
    )
    try:
        depth = _collect(reader)["agent.lifecycle_hook.queue.depth"]
    finally:
        engine.shutdown(1.0)

    by_hook = {p.attributes["agent.lifecycle_hook.name"]: p.value for p in depth.data.data_points}
    assert by_hook == {"announce": 0, "status": 0}


def test_counts_are_running_totals_across_collections() -> None:
    reader = InMemoryMetricReader()
    metrics = HookMetrics(MeterProvider(metric_readers=[reader]))
    metrics.record_execution("register", "post-start", "http", "success", 0.2)
    metrics.record_event("tool-start")
    first = _collect(reader)
    for _ in range(3):
        metrics.record_execution("register", "post-start", "http", "success", 0.2)
        metrics.record_event("tool-start")
    second = _collect(reader)

    def value(collected: dict[str, Any], name: str) -> int:
        (point,) = collected[name].data.data_points
        return int(point.value)

    assert value(first, "agent.lifecycle_hook.executions") == 1
    assert value(second, "agent.lifecycle_hook.executions") == 4
    assert value(first, "agent.lifecycle.events") == 1
    assert value(second, "agent.lifecycle.events") == 4
    assert second["agent.lifecycle_hook.executions"].data.is_monotonic
    assert second["agent.lifecycle_hook.duration"].data.data_points[0].count == 4


def test_two_recorders_on_one_provider_both_count() -> None:
    # The SDK hands a second creation of an instrument the first one, callbacks and all.
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    first, second = HookMetrics(provider), HookMetrics(provider)
    first.record_execution("a", "tool-start", "http", "success", 0.1)
    second.record_execution("b", "tool-start", "http", "success", 0.1)
    second.record_execution("b", "tool-start", "http", "success", 0.1)
    first.observe_queues(lambda: [("a", 2)])
    second.observe_queues(lambda: [("b", 5)])
    second.record_event("tool-start")

    collected = _collect(reader)
    executions = {
        p.attributes["agent.lifecycle_hook.name"]: p.value
        for p in collected["agent.lifecycle_hook.executions"].data.data_points
    }
    depths = {
        p.attributes["agent.lifecycle_hook.name"]: p.value
        for p in collected["agent.lifecycle_hook.queue.depth"].data.data_points
    }
    assert executions == {"a": 1, "b": 2}
    assert depths == {"a": 2, "b": 5}
    (event,) = collected["agent.lifecycle.events"].data.data_points
    assert event.value == 1
