"""The package as users install it: the built wheel in a clean venv installs without a warning,
passes `pip check`, brings no grpcio, and its `run` exports over OTLP/http to a real receiver.

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
from tests.support.otlp_http_receiver import OtlpHttpReceiver
from tests.support.target_server import Reply, TargetServer
from tests.telemetry.test_run_exports import assert_exported, run_exporting, write_template

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


def test_the_installed_run_exports_spans_and_the_client_histogram_over_otlp_http(
    installed: tuple[Path, str], tmp_path: Path
) -> None:
    python, _ = installed
    with TargetServer() as target, OtlpHttpReceiver() as receiver:
        target.always("/register", Reply(201))
        template = write_template(tmp_path / "agent.yaml", target.url("/register"))
        done = run_exporting(str(python), template, receiver.endpoint, tmp_path)

        assert done.returncode == 0, done.stderr
        assert_exported(receiver)
        assert len(target.requests) == 1


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
