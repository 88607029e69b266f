"""Helpers for the attacks on Claude Code's HTTP route: a root `run` whose agent runs as
`nobody` (the deployment that matters), an agent that posts what it is told to the route, and
reading the supervisor's /proc entries."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.supervisor.supervised import Run, Workspace, wait_until

NOBODY = 65534
# The agent runs as `nobody`: an interpreter that user may execute (the test's own may sit in
# a private directory).
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="the supervisor must be root to run the agent as nobody"
)
needs_system_python = pytest.mark.skipif(
    SYSTEM_PYTHON is None, reason="no system python3 for the unprivileged agent"
)

# The agent, as `nobody`. Its plan (JSON, argv[1]): `posts`, Claude Code payloads to post in
# order; `probe`, a path it tries to read itself; then it writes `report` (the route's URL and
# token, each post's status, what the probe found) and waits to be stopped.
POSTING_AGENT = r"""
import http.client, json, os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
plan = json.loads(sys.argv[1])
url = os.environ["LIFECYCLE_HOOKS_HTTP_URL"]
token = os.environ["LIFECYCLE_HOOKS_HTTP_TOKEN"]
statuses = []
for payload in plan.get("posts", []):
    connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=30)
    connection.request("POST", "/claude", json.dumps(payload),
                       {"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    answer = connection.getresponse()
    answer.read()
    statuses.append(answer.status)
    connection.close()
probe = ""
if plan.get("probe"):
    try:
        with open(plan["probe"], "rb") as handle:
            probe = "read " + str(len(handle.read()))
    except OSError as exc:
        probe = type(exc).__name__
report = {"url": url, "token": token, "statuses": statuses, "probe": probe, "uid": os.getuid()}
with open(plan["report"] + ".tmp", "w") as handle:
    json.dump(report, handle)
os.replace(plan["report"] + ".tmp", plan["report"])
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    time.sleep(0.05)
"""


class AgentUserWorkspace(Workspace):
    """A workspace below a fresh directory `nobody` may enter (pytest's tmp_path is root's,
    0700), with a directory of its own for the agent's report."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.agent_out = root / "agent-out"
        self.agent_out.mkdir()
        os.chown(self.agent_out, NOBODY, NOBODY)
        self.posting_agent = root / "posting_agent.py"
        self.posting_agent.write_text(POSTING_AGENT)
        self.posting_agent.chmod(0o644)
        self._reports = 0

    def posting_command(
        self, posts: Sequence[Mapping[str, Any]] = (), probe: str = ""
    ) -> tuple[list[str], Path]:
        """The agent's command and the path of the report it writes once it posted."""
        assert SYSTEM_PYTHON is not None
        self._reports += 1
        report = self.agent_out / f"report-{self._reports}.json"
        plan = {"posts": list(posts), "probe": probe, "report": str(report)}
        return [SYSTEM_PYTHON, "-S", str(self.posting_agent), json.dumps(plan)], report

    def start_as_nobody(self, template: Path | None, command: Sequence[str]) -> Run:
        """A root `run --user nobody` with the HTTP route open."""
        return self.start(template, command, "--user", "nobody", env={"LIFECYCLE_HOOKS_HTTP": "1"})


@contextmanager
def agent_user_workspace() -> Iterator[AgentUserWorkspace]:
    """An AgentUserWorkspace; every process it started is killed and its directory removed
    after."""
    root = Path(tempfile.mkdtemp(prefix="olh-http-route-"))
    root.chmod(0o711)
    space = AgentUserWorkspace(root)
    try:
        yield space
    finally:
        space.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def read_report(path: Path) -> dict[str, Any]:
    """The agent's report, once it is written."""
    wait_until(path.exists, timeout=60, what="the agent's report")
    return json.loads(path.read_text())


def post(url: str, token: str, payload: Mapping[str, Any]) -> int:
    """One Claude Code post to the route, as the agent's harness makes it; the status."""
    connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=60)
    try:
        connection.request(
            "POST",
            "/claude",
            json.dumps(payload),
            {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        answer = connection.getresponse()
        answer.read()
        return answer.status
    finally:
        connection.close()


def proc_status(pid: int) -> dict[str, str]:
    """/proc/PID/status as name -> value."""
    fields: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return fields


def kib(value: str) -> int:
    """`123456 kB` -> 123456."""
    return int(value.split()[0])


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))
