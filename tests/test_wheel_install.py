"""The package as users install it: the built wheel in a clean venv installs without a warning,
passes `pip check`, brings no grpcio and no google-auth, and its `run` exports over OTLP/http to
a real collector: rotel (PyPI `rotel`) on loopback, which prints what it received (its debug
log) and drops it; the assertions read that print-out.

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
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout."""
    built = tmp_path_factory.mktemp("wheel")
    pip(sys.executable, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(built), str(ROOT),
        machine_config=True)  # fmt: skip
    (found,) = built.glob("otel_lifecycle_hooks-*.whl")
    return found


@pytest.fixture(scope="session")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(python of a clean venv with the wheel installed, pip's install output)."""
    built = wheel.parent
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
    # google-auth and its cryptography stack are the `[gcp]` extra; shtab (completion) is small.
    assert {"google-auth", "cryptography", "rsa"} & names == set()
    assert "shtab" in names


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


def test_the_installed_gcp_hook_without_the_gcp_extra_says_which_extra_in_one_line(
    installed: tuple[Path, str], tmp_path: Path
) -> None:
    python, _ = installed
    template = tmp_path / "agent.yaml"
    template.write_text(
        "lifecycle_hooks:\n"
        "  - name: register\n"
        "    on: [post-start]\n"
        "    action:\n"
        '      {type: http, url: "http://127.0.0.1:9/agents", auth: {type: gcp-default}}\n'
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))},
        "HOME": str(tmp_path),
        "OTEL_SDK_DISABLED": "true",
    }
    install = "pip install 'otel-lifecycle-hooks[gcp]'"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), "-m", "otel_lifecycle_hooks", *args],
            capture_output=True, text=True, env=env, check=False, timeout=60,
        )  # fmt: skip

    validated = cli("validate", str(template))
    assert validated.returncode == 0, validated.stderr
    (warning,) = [line for line in validated.stderr.splitlines() if install in line]
    assert warning.startswith(f"warning: {template}:5:"), validated.stderr
    ran = cli("run", "-t", str(template), "--", "true")
    assert ran.returncode == 0, ran.stderr
    told = [line for line in ran.stderr.splitlines() if install in line]
    assert len(told) == 1, ran.stderr
    assert "auth: gcp-default needs the 'gcp' extra" in told[0]
    assert "Traceback" not in ran.stderr and "No module named" not in ran.stderr


def test_the_wheels_metadata_has_classifiers_and_google_auth_only_under_the_gcp_extra(
    wheel: Path,
) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    headers = metadata.split("\n\n", 1)[0].splitlines()
    classifiers = {
        line.removeprefix("Classifier: ") for line in headers if line.startswith("Classifier:")
    }
    assert {
        "Typing :: Typed",
        "Topic :: System :: Monitoring",
        "Programming Language :: Python :: 3.11",
    } <= classifiers
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    assert "License-Expression: Apache-2.0" in headers
    google = [line for line in requirements_of(wheel) if "google-auth" in line]
    assert google and all('extra == "gcp"' in line for line in google), google
    assert any(line.startswith("Requires-Dist: shtab") and "extra" not in line
               for line in requirements_of(wheel))  # fmt: skip
