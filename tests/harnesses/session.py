"""One real harness session under `otel-lifecycle-hooks run`, observed from outside.

The template has a webhook on every one of the nine template events (each to its own path on
a loopback receiver) and a script hook on the runtime events, which appends the event it got
(stdin JSON) to a file. So a test reads back which hooks fired, in order, with their variables,
and the `traceparent` each request carried.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_lifecycle_hooks.events import RUNTIME_EVENTS, TEMPLATE_EVENTS
from tests.support.target_server import RecordedRequest, TargetServer

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_CLI = Path(sys.executable).with_name("otel-lifecycle-hooks")

VARIABLES = (
    "EVENT",
    "PHASE",
    "PREVIOUS_PHASE",
    "ACTIVITY",
    "PREVIOUS_ACTIVITY",
    "TOOL_NAME",
    "EXIT_CODE",
    "ERROR_MESSAGE",
    "TASK_SUMMARY",
    "ASSISTANT_TEXT",
    "AGENT_NAME",
    "SESSION_ID",
    "HARNESS_NAME",
)
RECORDER = (
    "import json, os, sys; line = json.dumps(json.load(sys.stdin)); "
    "f = open(sys.argv[1], 'a'); f.write(line + '\\n'); f.close()"
)


def write_template(
    path: Path, receiver: TargetServer, runtime_log: Path, harness: str, extra: str = ""
) -> Path:
    """A template with a webhook per template event and one script hook on runtime events;
    `extra`: more of the template, written after them (entries of `lifecycle_hooks:`, then
    other sections)."""
    body = "{" + ", ".join(f'"{name}": "${{{name}}}"' for name in VARIABLES) + "}"
    lines = [f"harness: {harness}", "lifecycle_hooks:"]
    for event in TEMPLATE_EVENTS:
        lines += [
            f"  - name: on-{event}",
            f"    on: [{event}]",
            "    action:",
            "      type: webhook",
            f'      url: "{receiver.url("/" + event)}"',
            f"      body: {json.dumps(body)}",
            "    timeout: 5s",
        ]
    lines += [
        "  - name: runtime-recorder",
        f"    on: [{', '.join(RUNTIME_EVENTS)}]",
        "    action:",
        "      type: script",
        "      command: " + json.dumps([sys.executable, "-c", RECORDER, str(runtime_log)]),
        "    timeout: 10s",
    ]
    extra = extra.replace("{receiver}", receiver.url("").rstrip("/"))
    path.write_text("\n".join(lines) + "\n" + extra, encoding="utf-8")
    return path


@dataclass
class SessionResult:
    returncode: int
    stdout: str
    stderr: str
    receiver: TargetServer
    runtime_log: Path
    home: Path
    supervisor_pid: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def fired(self, event: str) -> list[dict[str, str]]:
        """The variables of each `event` hook's request, in the order they arrived."""
        return [json.loads(r.body) for r in self.requests() if r.path == "/" + event]

    def requests(self) -> list[RecordedRequest]:
        return list(self.receiver.requests)

    def fired_events(self) -> list[str]:
        return sorted({r.path.lstrip("/") for r in self.requests()})

    def activities(self) -> list[str]:
        return [vars_["ACTIVITY"] for vars_ in self.fired("activity-change")]

    def runtime_events(self) -> list[dict[str, Any]]:
        if not self.runtime_log.exists():
            return []
        return [json.loads(line) for line in self.runtime_log.read_text().splitlines() if line]

    def trace_ids(self) -> set[str]:
        return {
            r.headers["traceparent"].split("-")[1]
            for r in self.requests()
            if "traceparent" in r.headers
        }

    def hook_log(self) -> str:
        path = self.home / "agent.log"
        return path.read_text(errors="replace") if path.exists() else ""


def base_env(home: Path) -> dict[str, str]:
    """A clean environment for a harness: a fresh HOME, PATH with node and this package."""
    path = os.pathsep.join([str(PACKAGE_CLI.parent), os.environ.get("PATH", "/usr/bin:/bin")])
    return {
        "HOME": str(home),
        "PATH": path,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "true",
        "OTEL_LIFECYCLE_HOOKS_TRACE_DIR": str(home / "traces"),
        # A checkout run without installing it (PYTHONPATH) stays the one under test.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}),
    }


def start_run(
    command: Sequence[str],
    env: Mapping[str, str],
    template: Path,
    cwd: Path,
    grace_period: str = "5s",
) -> subprocess.Popen[str]:
    """`otel-lifecycle-hooks run --template T -- command`, in its own session."""
    argv = [
        str(PACKAGE_CLI),
        "run",
        "--template",
        str(template),
        "--grace-period",
        grace_period,
        "--",
        *command,
    ]
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(process: subprocess.Popen[str], timeout: float) -> tuple[int, str, str]:
    """Wait for `run`; on timeout TERM, then KILL, its whole group by id, and fail loudly."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
        raise AssertionError(
            f"run did not finish in {timeout}s:\n{out[-2000:]}\n{err[-4000:]}"
        ) from None
    return process.returncode, out, err


def wait_for_file(path: Path, timeout: float, contains: str = "") -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            text = path.read_text(errors="replace")
            if contains in text:
                return text
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear (with {contains!r}) within {timeout}s")


def alive(pid: int) -> bool:
    """True while process `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"
