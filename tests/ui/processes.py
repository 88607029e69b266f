"""The real processes the page's tests drive: `otel-lifecycle-hooks run` writing a journal,
and `otel-lifecycle-hooks ui` serving it; each started as a subprocess, stopped by its pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

CHROMIUM = Path("/usr/bin/chromium")
INSTALLER = Path(__file__).resolve().parents[1] / "support" / "install_debian_package.sh"


def ensure_chromium() -> Path:
    """Debian's chromium (installed once per machine by the installer); Playwright drives it."""
    subprocess.run(["sh", str(INSTALLER), "chromium", str(CHROMIUM)], check=True, timeout=900)
    return CHROMIUM


def environment(home: Path, journal: Path, **extra: str) -> dict[str, str]:
    """A clean environment for the package's commands: no OTEL_/SCION_ settings of the
    caller's, state under `home`, telemetry to a local trace file."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "SCION_", "LIFECYCLE_HOOKS_"))
    }
    env.update(
        HOME=str(home),
        OTEL_LIFECYCLE_HOOKS_JOURNAL=str(journal),
        OTEL_LIFECYCLE_HOOKS_LOG=str(home / "agent.log"),
        OTEL_LIFECYCLE_HOOKS_TRACE_DIR=str(home / "traces"),
        **extra,
    )
    return env


def run_session(
    template: Path, env: dict[str, str], script: str, *, wait: bool = True
) -> subprocess.Popen[str]:
    """`otel-lifecycle-hooks run --template T -- sh -c SCRIPT`; waits for it unless told not."""
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_lifecycle_hooks", "run", "--template", str(template),
         "--agent-name", "page-agent", "--", "sh", "-c", script],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    if wait:
        # A hang guard only, far from a loaded machine's delays: a SIGKILL here would leave
        # the session's deliveries "interrupted" and fail the test for another reason.
        stop(process, signal_first=None, timeout=300)
    return process


def stop(
    process: subprocess.Popen[str],
    *,
    signal_first: int | None = signal.SIGTERM,
    timeout: float = 10,
) -> tuple[str, str]:
    """End `process` by its pid (the signal, then SIGKILL when it does not go in time); what
    it printed on stdout and stderr."""
    if process.poll() is None and signal_first is not None:
        os.kill(process.pid, signal_first)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        out, err = process.communicate(timeout=120)
    return out or "", err or ""


@dataclass
class UiProcess:
    """`otel-lifecycle-hooks ui` as a subprocess: the URL it printed first, its port and token."""

    process: subprocess.Popen[str]
    url: str
    stderr_lines: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(urlsplit(self.url).port or 0)

    @property
    def token(self) -> str:
        # The printed URL holds it in its fragment: `http://127.0.0.1:PORT/#token=...`.
        return parse_qs(urlsplit(self.url).fragment)["token"][0]

    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> int:
        """SIGTERM by pid; its exit code."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=120)
        return int(self.process.returncode)


def start_ui(env: dict[str, str], *args: str, timeout: float = 120) -> UiProcess:
    """Start `ui` and read the first line it prints (its URL); AssertionError if it exits or
    prints nothing within `timeout`."""
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_lifecycle_hooks", "ui", *args],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    if not first or not first[0].strip():
        _, err = stop(process)
        raise AssertionError(f"ui printed no URL: exit {process.returncode}: {err}")
    ui = UiProcess(process, first[0].strip())
    # Drained all along, so that a chatty log never fills the pipe and stalls the server.
    stderr = process.stderr
    threading.Thread(target=lambda: ui.stderr_lines.extend(stderr), daemon=True).start()
    return ui
