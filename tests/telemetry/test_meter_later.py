"""The meter provider made after the agent's start (telemetry/meter_later.py): what is
measured before it exists is recorded into it at the hand-over, and `run` exports the
metrics of its pre-start hooks, recorded before its agent started, to a real OTLP receiver
(rotel)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_lifecycle_hooks.telemetry import meter_later
from otel_lifecycle_hooks.telemetry.meter_later import MeterProviderLater
from tests.support.rotel import RotelReceiver, debug_metrics
from tests.support.target_server import Reply, TargetServer


def points(reader: InMemoryMetricReader) -> dict[str, list[object]]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, list[object]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def test_measurements_before_the_hand_over_are_recorded_into_the_real_provider() -> None:
    later = MeterProviderLater()
    meter = later.get_meter("test")
    counter = meter.create_counter("made.before")
    histogram = meter.create_histogram("took.before", unit="s")
    counter.add(2, {"phase": "provisioning"})
    histogram.record(0.5, {"phase": "provisioning"})
    totals = {"n": 7}

    def observe(options: CallbackOptions) -> list[Observation]:
        return [Observation(totals["n"])]

    meter.create_observable_counter("observed.before", callbacks=[observe])

    reader = InMemoryMetricReader()
    real = MeterProvider(metric_readers=[reader])
    later.hand_over(real)
    counter.add(3, {"phase": "provisioning"})  # an instrument made before, measured after
    later.get_meter("test").create_counter("made.after").add(1)
    meter.create_counter("kept.meter").add(4)  # a meter asked for before, used after

    found = points(reader)
    real.shutdown()
    assert [p.value for p in found["made.before"]] == [5]  # type: ignore[attr-defined]
    assert [(p.count, p.sum) for p in found["took.before"]] == [(1, 0.5)]  # type: ignore[attr-defined]
    assert [p.value for p in found["observed.before"]] == [7]  # type: ignore[attr-defined]
    assert [p.value for p in found["made.after"]] == [1]  # type: ignore[attr-defined]
    assert [p.value for p in found["kept.meter"]] == [4]  # type: ignore[attr-defined]
    assert (later.held, later.dropped) == (2, 0)


def test_run_exports_what_its_pre_start_hook_measured_before_its_agent_started(
    tmp_path: Path,
) -> None:
    template = tmp_path / "agent.yaml"
    with (
        TargetServer() as target,
        RotelReceiver(tmp_path, exporter=RotelReceiver.BLACKHOLE_TRACES_AND_METRICS) as rotel,
    ):
        target.always("/prepare", Reply(204))
        template.write_text(
            "lifecycle_hooks:\n"
            "  - name: prepare\n"
            "    on: [pre-start]\n"
            "    blocking: true\n"
            "    action:\n"
            "      type: http\n"
            "      method: POST\n"
            f'      url: "{target.url("/prepare")}"\n'
        )
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))},
            "HOME": str(tmp_path),
            "SCION_HOOKS_DIR": str(tmp_path / "no-legacy-hooks"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": rotel.http_endpoint,
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "otlp",
        }
        done = subprocess.run(
            [sys.executable, "-m", "otel_lifecycle_hooks", "run", "-t", str(template), "--",
             "true"],
            env=env, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        received = rotel.stop_and_read()

    assert done.returncode == 0, done.stderr
    assert [r.path for r in target.requests] == ["/prepare"]
    metrics = {m.name: m for m in debug_metrics(received)}
    # The only execution was the pre-start hook's, before the meter provider existed.
    duration = metrics["agent.lifecycle_hook.duration"]
    assert duration.data_type == "Histogram", received
    assert sum(duration.counts) == 1, received
    assert "agent.lifecycle_hook.executions" in metrics, received
    assert "agent.lifecycle.events" in metrics, received


def test_a_gauge_set_before_the_hand_over_is_seen_after_it() -> None:
    later = MeterProviderLater()
    gauge = later.get_meter("test").create_gauge("queue.depth")
    gauge.set(3, {"queue": "hooks"})

    reader = InMemoryMetricReader()
    real = MeterProvider(metric_readers=[reader])
    later.hand_over(real)

    found = points(reader)
    real.shutdown()
    assert [p.value for p in found["queue.depth"]] == [3]  # type: ignore[attr-defined]


def observed(value: float) -> list[Callable[[CallbackOptions], list[Observation]]]:
    return [lambda options: [Observation(value, {"queue": "hooks"})]]


# For each `create_*` method of the API's Meter: make the instrument and measure before the
# hand-over, and the value the real provider reports after it.
BEFORE_THE_HAND_OVER: dict[str, tuple[Callable[[Meter], object], float]] = {
    "create_counter": (lambda m: m.create_counter("i").add(2, {"queue": "hooks"}), 2),
    "create_up_down_counter": (
        lambda m: m.create_up_down_counter("i").add(-3, {"queue": "hooks"}),
        -3,
    ),
    "create_histogram": (
        lambda m: m.create_histogram("i", explicit_bucket_boundaries_advisory=[1.0]).record(
            0.5, {"queue": "hooks"}
        ),
        0.5,
    ),
    "create_gauge": (lambda m: m.create_gauge("i").set(4, {"queue": "hooks"}), 4),
    "create_observable_counter": (
        lambda m: m.create_observable_counter("i", callbacks=observed(5)),
        5,
    ),
    "create_observable_up_down_counter": (
        lambda m: m.create_observable_up_down_counter("i", callbacks=observed(-6)),
        -6,
    ),
    "create_observable_gauge": (lambda m: m.create_observable_gauge("i", callbacks=observed(7)), 7),
}


def test_every_instrument_of_the_metrics_api_is_covered_here() -> None:
    api = {name for name in dir(Meter) if name.startswith("create_")}

    assert set(BEFORE_THE_HAND_OVER) == api
    assert api <= set(vars(meter_later._MeterLater))  # none falls back to the API's default


@pytest.mark.parametrize("method", sorted(BEFORE_THE_HAND_OVER))
def test_an_instrument_measured_before_the_hand_over_reports_after_it(method: str) -> None:
    measure, expected = BEFORE_THE_HAND_OVER[method]
    later = MeterProviderLater()
    measure(later.get_meter("test"))

    reader = InMemoryMetricReader()
    real = MeterProvider(metric_readers=[reader])
    later.hand_over(real)

    found = points(reader)
    real.shutdown()
    [point] = found["i"]
    value = point.sum if method == "create_histogram" else point.value  # type: ignore[attr-defined]
    assert (value, dict(point.attributes)) == (expected, {"queue": "hooks"})  # type: ignore[attr-defined]


def test_past_the_bound_measurements_are_dropped_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(meter_later, "MAX_HELD", 2)
    later = MeterProviderLater()
    counter = later.get_meter("test").create_counter("bounded")
    for _ in range(5):
        counter.add(1)

    reader = InMemoryMetricReader()
    real = MeterProvider(metric_readers=[reader])
    later.hand_over(real)

    found = points(reader)
    real.shutdown()
    assert [p.value for p in found["bounded"]] == [2]  # type: ignore[attr-defined]
    assert (later.held, later.dropped) == (2, 3)
