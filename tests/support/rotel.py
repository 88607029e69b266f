"""A real OTLP receiver for tests: rotel's collector binary, on loopback, printing what it gets.

Use as a context manager or through the `rotel_receiver` fixture::

    with RotelReceiver(tmp_path) as rotel:
        export_to(rotel.http_endpoint)   # or rotel.grpc_endpoint
        rotel.wait_for("agent.lifecycle_hook")
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Self

import pytest


def rotel_binary() -> Path | None:
    """`rotel-agent` inside the installed `rotel` package, or None when rotel is missing."""
    try:
        import rotel
    except ImportError:
        return None
    binary = Path(rotel.__file__).parent / "rotel-agent"
    return binary if binary.is_file() else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class RotelReceiver:
    """`rotel-agent start` with the blackhole exporter and detailed trace debug logging."""

    # Received spans are printed, then dropped.
    BLACKHOLE = (
        "--exporter", "blackhole", "--debug-log", "traces", "--debug-log-verbosity", "detailed",
    )  # fmt: skip

    def __init__(
        self,
        workdir: Path,
        startup_timeout: float = 10.0,
        exporter: Sequence[str] = BLACKHOLE,
    ) -> None:
        binary = rotel_binary()
        if binary is None:
            raise RuntimeError("rotel is not installed")
        self.binary = binary
        self.workdir = workdir
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.stdout_path = workdir / "rotel.stdout"
        self.startup_timeout = startup_timeout
        self.exporter = tuple(exporter)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    def start(self) -> Self:
        command = [
            str(self.binary),
            "start",
            "--otlp-grpc-endpoint",
            f"127.0.0.1:{self.grpc_port}",
            "--otlp-http-endpoint",
            f"127.0.0.1:{self.http_port}",
            *self.exporter,
            "--pid-file",
            str(self.workdir / "rotel.pid"),
            "--log-file",
            str(self.workdir / "rotel.log"),
        ]
        with self.stdout_path.open("wb") as out:
            self._process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + self.startup_timeout
        while not (_listening(self.grpc_port) and _listening(self.http_port)):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"rotel did not start:\n{self.output()}")
            time.sleep(0.05)
        return self

    def output(self) -> str:
        """Everything rotel printed so far."""
        try:
            return self.stdout_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for(self, text: str, timeout: float = 10.0) -> str:
        """Rotel's output once it contains `text`; AssertionError after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            output = self.output()
            if text in output:
                return output
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not received by rotel within {timeout}s:\n{self.output()}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@pytest.fixture
def rotel_receiver(tmp_path: Path) -> Iterator[RotelReceiver]:
    """A running rotel receiver on loopback ports; skipped when rotel is not installed."""
    if rotel_binary() is None:
        pytest.skip("rotel (PyPI `rotel`) is not installed")
    with RotelReceiver(tmp_path) as receiver:
        yield receiver
