"""The package as users install it: the built wheel in a clean venv installs without a warning,
passes `pip check`, brings no grpcio, and its `run` exports over OTLP/http to a real
collector: rotel (PyPI `rotel`) on loopback, which prints what it received (its debug log) and
drops it; the assertions read that print-out.

The wheel is built once per test session. Its dependencies are downloaded once into a
wheelhouse under `cache_root()` (keyed by the wheel's requirements, built under a lock), and
the clean venv installs from there with `--no-index`, so a warm run needs no network.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cache import cache_root
from tests.support.rotel import RotelReceiver, debug_metrics, debug_spans
from tests.support.target_server import Reply, TargetServer
from tests.telemetry.test_run_exports import HTTPX_SCOPE, run_exporting, write_template

ROOT = Path(__file__).resolve().parents[1]


def pip_env(*, machine_config: bool) -> dict[str, str]:
    """The environment pip runs in: without the machine's pip configuration, pip reads only
    the flags given, as on a user's machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if not machine_config:
        env["PIP_CONFIG_FILE"] = os.devnull
    else:
        env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    return env


def pip(python: Path | str, *args: str, machine_config: bool = False) -> str:
    done = subprocess.run(
        [str(python), "-m", "pip", *args],
        capture_output=True,
        text=True,
        env=pip_env(machine_config=machine_config),
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def requirements_of(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    return [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]


def wheelhouse_for(wheel: Path) -> Path:
    """A folder holding every wheel `wheel` needs, downloaded once for these requirements."""
    key = hashlib.sha256("\n".join(requirements_of(wheel)).encode()).hexdigest()[:16]
    house = cache_root() / f"wheelhouse-{key}"
    with open(cache_root() / f"wheelhouse-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (house / ".complete").exists():
            pip(sys.executable, "download", "--quiet", "--dest", str(house), str(wheel),
                machine_config=True)  # fmt: skip
            (house / ".complete").touch()
        # pip download copies the wheel itself too: only the one just built may be installed.
        for stale in house.glob("otel_lifecycle_hooks-*.whl"):
            stale.unlink()
    return house


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(python of a clean venv with the wheel installed, pip's install output)."""
    built = tmp_path_factory.mktemp("wheel")
    pip(sys.executable, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(built), str(ROOT),
        machine_config=True)  # fmt: skip
    (wheel,) = built.glob("otel_lifecycle_hooks-*.whl")
    house = wheelhouse_for(wheel)
    venv = tmp_path_factory.mktemp("clean") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    output = pip(
        python, "install", "--no-index", "--find-links", str(house), "--find-links", str(built),
        "otel-lifecycle-hooks",
    )  # fmt: skip
    yield python, output


def test_the_wheel_installs_cleanly_without_grpcio(installed: tuple[Path, str]) -> None:
    python, output = installed

    assert [line for line in output.splitlines() if "warn" in line.lower()] == [], output
    assert "Successfully installed" in output
    assert "No broken requirements found" in pip(python, "check")
    names = {p["name"].lower() for p in json.loads(pip(python, "list", "--format=json"))}
    assert "otel-lifecycle-hooks" in names and "httpx" in names
    assert "grpcio" not in names
    assert "opentelemetry-exporter-prometheus" not in names


def test_the_installed_run_exports_spans_and_the_client_histogram_over_otlp_http_to_rotel(
    installed: tuple[Path, str], tmp_path: Path
) -> None:
    # rotel is in the test extras: without it this fails (RotelReceiver says so), never skips.
    python, _ = installed
    exporter = RotelReceiver.BLACKHOLE_TRACES_AND_METRICS
    with TargetServer() as target, RotelReceiver(tmp_path, exporter=exporter) as rotel:
        target.always("/register", Reply(201))
        template = write_template(tmp_path / "agent.yaml", target.url("/register"))
        done = run_exporting(str(python), template, rotel.http_endpoint, tmp_path)
        # `run` flushes its exporters before it exits; stopping rotel then makes it print
        # everything it accepted, so its output is read once, with no polling.
        received = rotel.stop_and_read()

        assert done.returncode == 0, done.stderr
        assert len(target.requests) == 1

    spans = debug_spans(received)
    sessions = [s for s in spans if s.name.startswith("invoke_agent ")]
    hooks = [s for s in spans if s.name.startswith("agent.lifecycle_hook ")]
    clients = [s for s in spans if s.scope == HTTPX_SCOPE]
    assert (len(sessions), len(hooks), len(clients)) == (1, 1, 1), received
    (session,), (hook,), (client,) = sessions, hooks, clients
    assert session.parent_id == "", received
    assert hook.parent_id == session.span_id, received
    assert client.kind == "SPAN_KIND_CLIENT", received
    assert client.parent_id == hook.span_id, received
    assert {"http.request.method", "url.full"} <= set(client.attributes), received
    histograms = [
        m for m in debug_metrics(received)
        if m.name == "http.client.request.duration" and m.scope == HTTPX_SCOPE
    ]  # fmt: skip
    assert histograms, received
    assert all(m.data_type == "Histogram" for m in histograms), received
    assert max(count for m in histograms for count in m.counts) == 1, received


def test_the_installed_run_asked_for_grpc_says_which_extra_in_one_line(
    installed: tuple[Path, str], tmp_path: Path
) -> None:
    python, _ = installed
    template = tmp_path / "agent.yaml"
    template.write_text("lifecycle_hooks: []\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))},
        "HOME": str(tmp_path),
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
    }
    done = subprocess.run(
        [str(python), "-m", "otel_lifecycle_hooks", "run", "-t", str(template), "--", "true"],
        capture_output=True, text=True, env=env, check=False, timeout=60,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    told = [line for line in done.stderr.splitlines() if "otel-lifecycle-hooks[grpc]" in line]
    assert len(told) == 1, done.stderr
