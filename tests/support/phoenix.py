"""A real trace store behind a real collector hop, for end-to-end tests.

- `ensure_phoenix()` installs Arize Phoenix into its own virtual environment (through
  `tests/tools/ensure_phoenix.sh`; minutes the first time, instant afterwards).
- `PhoenixServer` runs `phoenix serve` on loopback ports and reads spans back from its REST API.
- `RotelForwarder` runs rotel's collector binary, receiving OTLP (gRPC and HTTP) on loopback
  and exporting it over OTLP/gRPC to Phoenix.

Every process is started in its own session and stopped by its process id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self, TypeVar

import pytest

from tests.support.cache import cache_root
from tests.support.rotel import RotelReceiver, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
ENSURE_SCRIPT = REPO_ROOT / "tests" / "tools" / "ensure_phoenix.sh"
PHOENIX_VENV = cache_root() / "phoenix-venv"
INSTALL_TIMEOUT_S = 900.0
STARTUP_TIMEOUT_S = 120.0

T = TypeVar("T")


class PhoenixUnavailable(RuntimeError):
    """Phoenix could not be installed or started, for a reason outside this project."""


def ensure_phoenix(venv: Path = PHOENIX_VENV) -> Path:
    """The `phoenix` executable, installing it first when needed."""
    try:
        result = subprocess.run(
            ["sh", str(ENSURE_SCRIPT), str(venv)],
            env={**os.environ, "PYTHON": sys.executable},
            check=False,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise PhoenixUnavailable(f"installing Phoenix took over {INSTALL_TIMEOUT_S:.0f}s") from exc
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-15:])
        raise PhoenixUnavailable(f"installing Phoenix failed (exit {result.returncode}):\n{tail}")
    return venv / "bin" / "phoenix"


def _stop_process(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """TERM the process by its id, KILL it if it lingers."""
    if process is None or process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout)


def _read_log(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def poll(read: Callable[[], T | None], timeout: float, interval: float = 0.25) -> T | None:
    """`read()` again and again until it returns something, or None after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if value is not None or time.monotonic() > deadline:
            return value
        time.sleep(interval)


class PhoenixServer:
    """`phoenix serve` with a fresh working directory, on loopback (its gRPC port binds all
    interfaces, a Phoenix limitation)."""

    def __init__(self, phoenix: Path, workdir: Path) -> None:
        self.phoenix = phoenix
        self.workdir = workdir
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.log_path = workdir / "phoenix.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    def start(self) -> Self:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))},
            "PHOENIX_WORKING_DIR": str(self.workdir / "data"),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.http_port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        }
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                [str(self.phoenix), "serve"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if poll(self._healthy, STARTUP_TIMEOUT_S, interval=0.5) is None:
            self.stop()
            raise PhoenixUnavailable(f"Phoenix did not become ready:\n{_read_log(self.log_path)}")
        return self

    def _healthy(self) -> bool | None:
        if self._process is None or self._process.poll() is not None:
            raise PhoenixUnavailable(f"Phoenix exited:\n{_read_log(self.log_path)}")
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2) as response:
                return True if response.status == 200 else None
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def spans(self, project: str, **query: str) -> list[dict[str, Any]]:
        """Every OTLP-shaped span of `project` matching `query` (trace_id=, name=, ...);
        [] while the project does not exist yet."""
        path = f"/v1/projects/{urllib.parse.quote(project, safe='')}/spans/otlpv1"
        spans: list[dict[str, Any]] = []
        params: dict[str, str] = {**query, "limit": "1000"}
        while True:
            url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    page = json.load(response)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return []
                raise
            spans.extend(page.get("data") or [])
            cursor = page.get("next_cursor")
            if not cursor:
                return spans
            params["cursor"] = cursor

    def stop(self) -> None:
        process, self._process = self._process, None
        _stop_process(process)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class RotelForwarder(RotelReceiver):
    """rotel receiving OTLP on loopback and exporting it over OTLP/gRPC to `target`."""

    def __init__(self, workdir: Path, target: str) -> None:
        super().__init__(
            workdir,
            exporter=(
                "--exporter", "otlp",
                "--otlp-exporter-endpoint", target,
                "--otlp-exporter-compression", "none",
            ),
        )  # fmt: skip
        self.target = target


def _unavailable(reason: str) -> None:
    """Fail in CI, where the trace store must be reachable; skip elsewhere."""
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"Phoenix is unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"Phoenix is unavailable: {reason}")


@pytest.fixture(scope="session")
def phoenix_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """One Phoenix for the whole test session (it takes ~20 s to start)."""
    workdir = tmp_path_factory.mktemp("phoenix")
    try:
        executable = ensure_phoenix()
        server = PhoenixServer(executable, workdir).start()
    except PhoenixUnavailable as exc:
        _unavailable(str(exc))
        raise  # unreachable: _unavailable always raises
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def rotel_to_phoenix(tmp_path: Path, phoenix_server: PhoenixServer) -> Iterator[RotelForwarder]:
    """rotel on loopback, forwarding everything it receives to `phoenix_server` over gRPC."""
    with RotelForwarder(tmp_path, phoenix_server.grpc_endpoint) as forwarder:
        yield forwarder
