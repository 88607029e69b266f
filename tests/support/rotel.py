"""A real OTLP receiver for tests: rotel's collector binary, on loopback, printing what it gets.

Use as a context manager or through the `rotel_receiver` fixture::

    with RotelReceiver(tmp_path) as rotel:
        export_to(rotel.http_endpoint)   # or rotel.grpc_endpoint
        rotel.wait_for("agent.lifecycle_hook")
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
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
    # Received spans and metrics are printed, then dropped.
    BLACKHOLE_TRACES_AND_METRICS = (
        "--exporter", "blackhole", "--debug-log", "traces", "--debug-log", "metrics",
        "--debug-log-verbosity", "detailed",
    )  # fmt: skip

    def __init__(
        self,
        workdir: Path,
        startup_timeout: float = 60.0,
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

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
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
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=120)

    def stop_and_read(self) -> str:
        """Stop rotel (SIGTERM: it drains its pipelines and prints what it holds) and return
        everything it printed. Reading after the stop needs no polling of its output."""
        self.stop()
        return self.output()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FIELD = re.compile(r"^ {4}(Trace ID|Parent ID|ID|Name|Kind)\s*: ?(.*)$")
_ARROW = re.compile(r"^ {5}-> ([^:]+): ?(.*)$")


@dataclass
class DebugSpan:
    """A span as rotel's detailed debug log prints it."""

    scope: str
    name: str = ""
    kind: str = ""
    span_id: str = ""
    parent_id: str = ""
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass
class DebugMetric:
    """A metric as rotel's detailed debug log prints it."""

    scope: str
    name: str = ""
    data_type: str = ""
    counts: list[int] = field(default_factory=list)


def _scope_of(line: str) -> str | None:
    if line.startswith("InstrumentationScope "):
        return line.removeprefix("InstrumentationScope ").split(" ")[0]
    return None


def debug_spans(output: str) -> list[DebugSpan]:
    """The spans in rotel's `--debug-log traces --debug-log-verbosity detailed` output."""
    spans: list[DebugSpan] = []
    scope, section = "", ""
    for line in _ANSI.sub("", output).splitlines():
        if line.startswith("ResourceMetrics "):
            scope, section = "", "metrics"
        elif line.startswith("ResourceSpans "):
            scope, section = "", ""
        elif section == "metrics":
            continue
        elif (found := _scope_of(line)) is not None:
            scope, section = found, ""
        elif line.startswith("Span #"):
            spans.append(DebugSpan(scope=scope))
            section = "span"
        elif line in ("Attributes:", "Events:", "Links:"):
            section = "attributes" if line == "Attributes:" and spans else "other"
        elif spans and (match := _FIELD.match(line)):
            key, value = match.groups()
            attr = {"Trace ID": None, "Parent ID": "parent_id", "ID": "span_id",
                    "Name": "name", "Kind": "kind"}[key]  # fmt: skip
            if attr is not None:
                setattr(spans[-1], attr, value.strip())
        elif section == "attributes" and (match := _ARROW.match(line)):
            spans[-1].attributes[match.group(1)] = match.group(2)
    return spans


def debug_metrics(output: str) -> list[DebugMetric]:
    """The metrics in rotel's `--debug-log metrics --debug-log-verbosity detailed` output."""
    metrics: list[DebugMetric] = []
    scope, inside = "", False
    for line in _ANSI.sub("", output).splitlines():
        if line.startswith("ResourceMetrics "):
            inside, scope = True, ""
        elif line.startswith("ResourceSpans "):
            inside = False
        elif not inside:
            continue
        elif (found := _scope_of(line)) is not None:
            scope = found
        elif line.startswith("Metric #"):
            metrics.append(DebugMetric(scope=scope))
        elif metrics and (match := _ARROW.match(line)):
            key, value = match.groups()
            if key == "Name" and not metrics[-1].name:
                metrics[-1].name = value.strip()
            elif key == "DataType":
                metrics[-1].data_type = value.strip()
        elif metrics and line.startswith("Count: "):
            metrics[-1].counts.append(int(line.removeprefix("Count: ")))
    return metrics


@pytest.fixture
def rotel_receiver(tmp_path: Path) -> Iterator[RotelReceiver]:
    """A running rotel receiver on loopback ports; skipped when rotel is not installed."""
    if rotel_binary() is None:
        pytest.skip("rotel (PyPI `rotel`) is not installed")
    with RotelReceiver(tmp_path) as receiver:
        yield receiver
