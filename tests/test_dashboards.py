"""The dashboards: every PromQL expression parses (promtool), names the metrics the package
really exports, and returns data from a real Prometheus scraping a process that records them."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
GRAFANA = ROOT / "dashboards" / "grafana" / "otel-lifecycle-hooks.json"
CLOUD = ROOT / "dashboards" / "cloud-monitoring" / "otel-lifecycle-hooks.json"
ENSURE_PROMETHEUS = ROOT / "tests" / "tools" / "ensure_prometheus.sh"

# Grafana macros, replaced by plain durations so promtool and Prometheus can read the query.
GRAFANA_MACROS = {"$__rate_interval": "30s", "$__range": "1h", "$__interval": "15s"}


def _walk(node: Any, key: str) -> Iterator[str]:
    if isinstance(node, dict):
        for name, value in node.items():
            if name == key and isinstance(value, str):
                yield value
            else:
                yield from _walk(value, key)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item, key)


def grafana_expressions() -> list[str]:
    return list(_walk(json.loads(GRAFANA.read_text()), "expr"))


def cloud_expressions() -> list[str]:
    return list(_walk(json.loads(CLOUD.read_text()), "prometheusQuery"))


def plain(expression: str) -> str:
    for macro, value in GRAFANA_MACROS.items():
        expression = expression.replace(macro, value)
    return expression


def all_expressions() -> list[str]:
    return [plain(e) for e in grafana_expressions() + cloud_expressions()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def prometheus_tools() -> tuple[str, str]:
    """`promtool` and `prometheus`, installed once per session when missing (as root)."""
    result = subprocess.run(
        ["sh", str(ENSURE_PROMETHEUS)], check=False, capture_output=True, text=True, timeout=600
    )
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    if result.returncode == 2:
        pytest.skip(f"prometheus tools unavailable: {result.stderr.strip()}")
    assert result.returncode == 0 and promtool and prometheus, result.stderr
    return promtool, prometheus


# --- the dashboards' shape ---------------------------------------------------------------------


def test_both_dashboards_cover_the_same_queries() -> None:
    def normalised(expressions: list[str]) -> set[str]:
        return {re.sub(r"\[[^\]]+\]", "[R]", e) for e in expressions}

    grafana = normalised(grafana_expressions())
    assert len(grafana) >= 10
    assert normalised(cloud_expressions()) == grafana


def test_the_grafana_dashboard_links_failures_to_jaeger() -> None:
    dashboard = json.loads(GRAFANA.read_text())
    exemplar_targets = [t for p in dashboard["panels"] for t in p["targets"] if t.get("exemplar")]
    assert exemplar_targets and all(
        "traces_span_metrics_calls_total" in t["expr"] for t in exemplar_targets
    )
    jaeger_panels = [p for p in dashboard["panels"] if p["datasource"]["type"] == "jaeger"]
    # Hook spans are named `agent.lifecycle_hook {hook name}`: Jaeger's operation is an exact
    # name, so the panel finds them by the tag every hook span carries.
    [target] = jaeger_panels[0]["targets"]
    assert "operation" not in target
    assert set(target["tags"].split()) == {"error=true", "agent.lifecycle_hook.internal=true"}


def test_dashboards_name_exactly_what_the_prometheus_exporter_produces() -> None:
    """Record every instrument through the SDK's Prometheus exporter and compare the names."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry, generate_latest

    from otel_lifecycle_hooks.telemetry.metrics import HookMetrics

    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    _record_everything(HookMetrics(provider))
    exposition = generate_latest(registry).decode()
    provider.shutdown()
    exported = set(re.findall(r"^(agent_lifecycle\w+?)(?:\{| )", exposition, re.MULTILINE))
    labels = set(re.findall(r"(\w+)=\"", exposition))

    for expression in all_expressions():
        names = set(re.findall(r"\bagent_lifecycle\w+", expression))
        if not names:
            continue
        assert names <= exported | labels, (expression, names - exported - labels)
        if "traces_span_metrics" not in expression:
            assert names & exported, f"queries none of the package's metrics: {expression}"
    assert {
        "agent_lifecycle_hook_name",
        "agent_lifecycle_hook_outcome",
        "agent_lifecycle_event",
    } <= labels


def _record_everything(metrics: Any) -> None:
    metrics.record_execution("register", "post-start", "http", "success", 0.05)
    metrics.record_execution("register", "post-start", "http", "failed", 2.0)
    metrics.record_retry("register", "post-start")
    metrics.record_debounced("status", "activity-change", 2)
    metrics.record_dropped("status", "activity-change", "queue_full")
    metrics.observe_queues(lambda: [("status", 1)])
    metrics.record_event("post-start")


# --- promtool -------------------------------------------------------------------------------------


def _check_rules(
    promtool: str, expressions: list[str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    rules = {
        "groups": [
            {
                "name": "dashboards",
                "rules": [
                    {"record": f"dashboard:expr_{i}", "expr": e} for i, e in enumerate(expressions)
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    return subprocess.run(
        [promtool, "check", "rules", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_every_dashboard_expression_parses_with_promtool(
    prometheus_tools: tuple[str, str], tmp_path: Path
) -> None:
    expressions = all_expressions()
    result = _check_rules(prometheus_tools[0], expressions, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(expressions)} rules found" in result.stdout


def test_promtool_rejects_a_broken_expression(
    prometheus_tools: tuple[str, str], tmp_path: Path
) -> None:
    result = _check_rules(prometheus_tools[0], ["sum by (le (rate(x[5m]))"], tmp_path)
    assert result.returncode != 0


# --- a real Prometheus scraping a process that records hook metrics ------------------------------

RECORDER = textwrap.dedent(
    """
    import sys, time
    from otel_lifecycle_hooks.telemetry.metrics import HookMetrics
    from otel_lifecycle_hooks.telemetry.setup import configure_telemetry

    telemetry = configure_telemetry({}, {
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": sys.argv[1],
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "dashboard-check",
    })
    metrics = HookMetrics(telemetry.meter_provider)
    metrics.observe_queues(lambda: [("status", 0)])
    print("ready", flush=True)
    while True:
        metrics.record_execution("register", "post-start", "http", "success", 0.04)
        metrics.record_execution("register", "post-start", "http", "failed", 1.5)
        metrics.record_execution("cleanup", "pre-stop", "script", "timeout", 30.0)
        metrics.record_retry("register", "post-start")
        metrics.record_debounced("status", "activity-change", 2)
        metrics.record_dropped("status", "activity-change", "queue_full")
        metrics.record_event("post-start")
        metrics.record_event("activity-change")
        time.sleep(0.2)
    """
)


def _stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=120)


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


@pytest.fixture
def recorder_port(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", RECORDER, str(port)],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "recorder.log").open("w"),
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield port
    finally:
        _stop(process)


@pytest.fixture
def prometheus_url(
    prometheus_tools: tuple[str, str], recorder_port: int, tmp_path: Path
) -> Iterator[str]:
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "hooks",
                        "static_configs": [{"targets": [f"127.0.0.1:{recorder_port}"]}],
                    }
                ],
            }
        )
    )
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            prometheus_tools[1],
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # a hang guard for the start
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, (
                tmp_path / "prometheus.log"
            ).read_text()
            time.sleep(0.2)
        yield url
    finally:
        _stop(process)
        log.close()


def test_every_own_metric_expression_returns_data_from_a_real_prometheus(
    prometheus_url: str,
) -> None:
    expressions = sorted(
        {e for e in all_expressions() if "agent_lifecycle" in e and "traces_span_metrics" not in e}
    )
    assert len(expressions) >= 9
    pending = set(expressions)
    deadline = time.monotonic() + 120  # a hang guard: a few 1s scrapes; rates need two samples
    while pending and time.monotonic() < deadline:
        for expression in sorted(pending):
            query = urllib.parse.urlencode({"query": expression})
            answer = _get_json(f"{prometheus_url}/api/v1/query?{query}")
            assert answer["status"] == "success", (expression, answer)
            if answer["data"]["result"]:
                pending.discard(expression)
        time.sleep(0.5)
    assert not pending, f"no data for: {sorted(pending)}"
