"""The bundled collector configs, checked structurally (no collector binary runs here).

Every file parses; every component a pipeline names is defined; every component type exists
in the pinned contrib version (tests/data/collector-components-<version>.txt); connectors
join a pipeline that feeds them to one they feed; the compose file pins its images and mounts
files that exist.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COLLECTOR = ROOT / "collector"
VERSION = (COLLECTOR / "VERSION").read_text().strip()
CONFIGS = sorted(p for p in COLLECTOR.glob("*.yaml") if p.name != "compose.yaml")
KINDS = {
    "receivers": "receiver",
    "processors": "processor",
    "exporters": "exporter",
    "connectors": "connector",
    "extensions": "extension",
}


def known_components() -> dict[str, set[str]]:
    path = ROOT / "tests" / "data" / f"collector-components-{VERSION}.txt"
    known: dict[str, set[str]] = {kind: set() for kind in KINDS.values()}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            kind, component_type, _module = line.split()
            known[kind].add(component_type)
    return known


def load(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text())
    assert isinstance(document, dict), f"{path.name} is not a mapping"
    return document


def component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def test_the_pinned_version_is_recent_enough_for_the_renamed_components() -> None:
    major, minor, _patch = (int(part) for part in VERSION.split("."))
    assert (major, minor) >= (0, 144)


def test_there_are_configs_for_jaeger_and_google_cloud() -> None:
    assert {p.name for p in CONFIGS} >= {
        "jaeger.yaml", "cloud-trace.yaml", "googlecloud.yaml", "trace-file.yaml"
    }  # fmt: skip


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_header_names_the_pinned_version(path: Path) -> None:
    header = path.read_text().splitlines()[0]
    assert f"v{VERSION}" in header


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_component_type_exists_in_the_pinned_version(path: Path) -> None:
    config = load(path)
    known = known_components()
    unknown = [
        f"{section}.{component_id}"
        for section, kind in KINDS.items()
        for component_id in (config.get(section) or {})
        if component_type(component_id) not in known[kind]
    ]
    assert unknown == [], f"not components of contrib v{VERSION}: {unknown}"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_pipelines_name_only_defined_components(path: Path) -> None:
    config = load(path)
    service = config["service"]
    problems = [
        f"service.extensions: {name}"
        for name in service.get("extensions", [])
        if name not in (config.get("extensions") or {})
    ]
    assert service["pipelines"], "no pipelines"
    for pipeline_id, pipeline in service["pipelines"].items():
        assert pipeline.get("receivers") and pipeline.get("exporters"), pipeline_id
        for role in ("receivers", "processors", "exporters"):
            for name in pipeline.get(role, []):
                defined = set(config.get(role) or {}) | set(config.get("connectors") or {})
                if role == "processors":
                    defined = set(config.get("processors") or {})
                if name not in defined:
                    problems.append(f"{pipeline_id}.{role}: {name}")
    assert problems == []


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_defined_component_is_used_and_connectors_join_two_pipelines(path: Path) -> None:
    config = load(path)
    pipelines = config["service"]["pipelines"].values()
    used = {name for p in pipelines for role in p.values() for name in role}
    used |= set(config["service"].get("extensions", []))
    for section in KINDS:
        for name in config.get(section) or {}:
            assert name in used, f"{section}.{name} is defined but never used"
    for connector in config.get("connectors") or {}:
        assert any(connector in p.get("exporters", []) for p in pipelines), connector
        assert any(connector in p.get("receivers", []) for p in pipelines), connector


def test_span_metrics_carry_the_hook_dimensions() -> None:
    expected = {
        "agent.lifecycle_hook.name",
        "agent.lifecycle_hook.event",
        "agent.lifecycle_hook.outcome",
        "agent.lifecycle.event",
    }
    for path in CONFIGS:
        connector = (load(path).get("connectors") or {}).get("span_metrics")
        if connector is not None:
            assert {d["name"] for d in connector["dimensions"]} == expected, path.name


def test_jaeger_config_exports_traces_over_otlp_and_metrics_to_prometheus() -> None:
    config = load(COLLECTOR / "jaeger.yaml")
    pipelines = config["service"]["pipelines"]
    assert "otlp_grpc/jaeger" in pipelines["traces"]["exporters"]
    assert "prometheus" in pipelines["metrics"]["exporters"]
    assert set(config["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}


def test_cloud_trace_config_uses_the_telemetry_api_with_google_auth() -> None:
    config = load(COLLECTOR / "cloud-trace.yaml")
    exporter = config["exporters"]["otlp_http/google"]
    assert exporter["endpoint"] == "https://telemetry.googleapis.com"
    assert exporter["auth"]["authenticator"] == "googleclientauth"
    assert "googleclientauth" in config["service"]["extensions"]


def test_the_trace_file_config_ships_every_kept_trace_file_from_its_beginning() -> None:
    """`run`'s trace files (OTLP JSON), the current ones and the rotated ones, read whole."""
    import fnmatch

    config = load(COLLECTOR / "trace-file.yaml")
    receiver = config["receivers"]["otlp_json_file"]
    assert receiver["start_at"] == "beginning"  # the receiver's default is the end of a file
    for name in ("reviewer.jsonl", "reviewer.jsonl.1", "reviewer.jsonl.3"):
        assert any(fnmatch.fnmatch(f"/traces/{name}", glob) for glob in receiver["include"])
    traces = config["service"]["pipelines"]["traces"]
    assert traces["receivers"] == ["otlp_json_file"]
    assert "otlp_grpc/jaeger" in traces["exporters"]


# --- compose.yaml and its companions ---------------------------------------------------------


def test_compose_pins_every_image_and_runs_the_pinned_collector() -> None:
    compose = load(COLLECTOR / "compose.yaml")
    services = compose["services"]
    assert set(services) == {"collector", "jaeger", "prometheus", "grafana"}
    for name, service in services.items():
        image = service["image"]
        assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+", image), f"{name}: {image} is not pinned"
    assert services["collector"]["image"].endswith(f":{VERSION}")
    assert services["jaeger"]["image"].startswith("jaegertracing/jaeger:2.")


def test_compose_mounts_files_that_exist() -> None:
    compose = load(COLLECTOR / "compose.yaml")
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert (COLLECTOR / source).exists(), f"{name} mounts missing {source}"
    command = " ".join(compose["services"]["collector"]["command"])
    mounted = {v.split(":")[1] for v in compose["services"]["collector"]["volumes"]}
    assert any(target in command for target in mounted)


def test_prometheus_scrapes_the_collector_exporter_port() -> None:
    prometheus = load(COLLECTOR / "prometheus.yml")
    targets = [
        t
        for job in prometheus["scrape_configs"]
        for c in job["static_configs"]
        for t in c["targets"]
    ]
    port = load(COLLECTOR / "jaeger.yaml")["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    assert f"collector:{port}" in targets


def test_grafana_provisioning_links_exemplars_to_jaeger_and_loads_the_dashboards() -> None:
    datasources = load(COLLECTOR / "grafana/provisioning/datasources/datasources.yaml")
    by_uid = {d["uid"]: d for d in datasources["datasources"]}
    assert by_uid["jaeger"]["type"] == "jaeger"
    destinations = by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert destinations == [{"name": "trace_id", "datasourceUid": "jaeger"}]
    providers = load(COLLECTOR / "grafana/provisioning/dashboards/dashboards.yaml")["providers"]
    compose = load(COLLECTOR / "compose.yaml")
    grafana_mounts = dict(v.rsplit(":", 2)[:2] for v in compose["services"]["grafana"]["volumes"])
    dashboards_source = next(
        s for s, t in grafana_mounts.items() if t == providers[0]["options"]["path"]
    )
    assert list((COLLECTOR / dashboards_source).glob("*.json")), "no dashboards to provision"
