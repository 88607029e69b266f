"""Helpers for the supervisor tests: a stand-in agent program, template files, and
`otel-lifecycle-hooks run` as a real subprocess that the tests signal and always clean up."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.support.journal_key import JOURNAL_KEY

# A stand-in agent. Its plan (JSON, first argument) says what to do, in order:
#   pid_file        write our pid (so the test can clean up an orphan)
#   env_file        write TRACEPARENT, the event socket path, HOME and uid as JSON
#   touch           create this file (proof that the agent was started)
#   claude          Claude Code hook payloads to feed through `hook --dialect claude`
#   status          [signal, message] pairs for `status`
#   ready_file      created once the steps above are done
#   on_term         "ignore", or an exit code to use on SIGTERM (default: die of it)
#   hup_file        on SIGHUP, append "HUP" to this file
#   exit            exit with this code instead of waiting to be stopped
#   kill_self       die of this signal instead of waiting to be stopped (a crash)
#   detach          [pid_file, ignore_term, seconds=30]: start a sleeper in a session of its
#                   own (as Gemini's setsid shell tool), through a launcher that exits at
#                   once, so it is orphaned; it writes its pid to pid_file, ignoring SIGTERM
#                   if asked
#   notify          [pid_file, done_file, seconds]: start a program in the agent's own process
#                   group without waiting for it (as Codex starts the user's `notify`), that
#                   writes its pid, sleeps, then writes done_file
AGENT_PROGRAM = r"""
import json, os, signal, subprocess, sys, time

plan = json.loads(sys.argv[1])
cli = [sys.executable, "-m", "otel_lifecycle_hooks"]


def write(path, text):
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(path + ".tmp", path)


if plan.get("on_term") == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif plan.get("on_term") is not None:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(int(plan["on_term"])))
if plan.get("hup_file"):
    def on_hup(*_):
        with open(plan["hup_file"], "a") as handle:
            handle.write("HUP\n")
    signal.signal(signal.SIGHUP, on_hup)
if plan.get("pid_file"):
    write(plan["pid_file"], str(os.getpid()))
if plan.get("env_file"):
    write(plan["env_file"], json.dumps({
        "TRACEPARENT": os.environ.get("TRACEPARENT", ""),
        "SOCKET": os.environ.get("OTEL_LIFECYCLE_HOOKS_SOCKET", ""),
        "HOME": os.environ.get("HOME", ""),
        "uid": os.getuid(),
    }))
if plan.get("detach"):
    detached_pid_file, ignore_term, *seconds = plan["detach"]
    sleeper = (
        "import os, signal, time\n"
        + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
        + f"open({detached_pid_file!r} + '.tmp', 'w').write(str(os.getpid()))\n"
        + f"os.replace({detached_pid_file!r} + '.tmp', {detached_pid_file!r})\n"
        + f"time.sleep({seconds[0] if seconds else 30})\n"
    )
    launcher = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {sleeper!r}], start_new_session=True)\n"
    )
    subprocess.run([sys.executable, "-c", launcher], check=True)  # exits at once: an orphan
    while not os.path.exists(detached_pid_file):
        time.sleep(0.01)
if plan.get("notify"):
    notify_pid_file, done_file, notify_seconds = plan["notify"]
    notify = (
        "import os, time\n"
        + f"open({notify_pid_file!r} + '.tmp', 'w').write(str(os.getpid()))\n"
        + f"os.replace({notify_pid_file!r} + '.tmp', {notify_pid_file!r})\n"
        + f"time.sleep({notify_seconds})\n"
        + f"open({done_file!r}, 'w').write('done')\n"
    )
    subprocess.Popen([sys.executable, "-c", notify])
    while not os.path.exists(notify_pid_file):
        time.sleep(0.01)
if plan.get("touch"):
    write(plan["touch"], "started")
for payload in plan.get("claude", []):
    payload = {
        "session_id": "claude-session-1",
        "transcript_path": "",
        "cwd": os.getcwd(),
        **payload,
    }
    subprocess.run(
        cli + ["hook", "--dialect", "claude"], input=json.dumps(payload).encode(), check=False
    )
for status, message in plan.get("status", []):
    subprocess.run(cli + ["status", status, message], check=False)
if plan.get("ready_file"):
    write(plan["ready_file"], "ready")
if "exit" in plan:
    sys.exit(int(plan["exit"]))
if "kill_self" in plan:
    os.kill(os.getpid(), int(plan["kill_self"]))
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(99)
"""

# Every event the template vocabulary has: the recording hook listens to all of them.
TEMPLATE_EVENTS = (
    "pre-start",
    "post-start",
    "pre-stop",
    "session-end",
    "phase-change",
    "activity-change",
    "task-completed",
    "limits-exceeded",
    "error",
)
RUNTIME_EVENTS = ("session-start", "prompt-submit", "tool-start", "tool-end", "agent-end")
RECORDED_FIELDS = (
    "EVENT",
    "SESSION_ID",
    "HARNESS_SESSION_ID",
    "PHASE",
    "PREVIOUS_PHASE",
    "ACTIVITY",
    "PREVIOUS_ACTIVITY",
    "TOOL_NAME",
    "EXIT_CODE",
    "LIMIT_NAME",
    "LIMIT_COUNT",
    "TASK_SUMMARY",
    "ERROR_MESSAGE",
)


def recorder_hook(url: str, events: Sequence[str] = TEMPLATE_EVENTS + RUNTIME_EVENTS) -> str:
    """YAML for one non-blocking http hook on `events`: one hook's runs never reorder, so the
    server sees the events in the order they fired."""
    body = "{" + ", ".join(f'"{name}": "${{{name}}}"' for name in RECORDED_FIELDS) + "}"
    return (
        "  - name: recorder\n"
        f"    on: [{', '.join(events)}]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{url}"\n'
        f"      body: '{body}'\n"
        "    timeout: 5s\n"
    )


def script_hook(name: str, events: Sequence[str], argv: Sequence[str], **options: str) -> str:
    """YAML for a script hook; `options` are extra keys (blocking, timeout, on_error)."""
    lines = [
        f"  - name: {name}",
        f"    on: [{', '.join(events)}]",
        "    action:",
        "      type: script",
        f"      command: {json.dumps(list(argv))}",
    ]
    lines += [f"    {key}: {value}" for key, value in options.items()]
    return "\n".join(lines) + "\n"


def payload_appender(path: Path) -> list[str]:
    """argv of a script that appends its JSON stdin (plus its uid, HOME and TRACEPARENT) as
    one line to `path`."""
    code = (
        "import json, os, sys; e = json.load(sys.stdin); "
        "e['uid'] = os.getuid(); e['HOME'] = os.environ.get('HOME', ''); "
        "e['TRACEPARENT'] = os.environ.get('TRACEPARENT', ''); "
        f"open({str(path)!r}, 'a').write(json.dumps(e) + '\\n')"
    )
    return [sys.executable, "-c", code]


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines a payload appender wrote (none yet: empty)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Run:
    """One `otel-lifecycle-hooks run` subprocess."""

    process: subprocess.Popen[bytes]
    stderr_path: Path
    stderr_file: IO[bytes]
    started: float = field(default_factory=time.monotonic)

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = 120.0) -> int:
        return self.process.wait(timeout=timeout)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def recorded(server: Any) -> list[dict[str, str]]:
    """The recorder hook's requests so far, as the JSON objects it sent, in order."""
    return [json.loads(request.body) for request in list(server.requests)]


def recorded_events(server: Any) -> list[str]:
    return [item["EVENT"] for item in recorded(server)]


class Workspace:
    """A temp directory with an environment for `run`: HOME, journal, hook log and trace
    directory inside it, no exporter configured (so the local trace file is written)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        self.trace_dir = root / "traces"
        self.journal = root / "journal.sqlite3"
        self.hook_log = root / "agent.log"
        self.agent = root / "agent.py"
        self.agent.write_text(AGENT_PROGRAM)
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OTEL_", "SCION_", "TRACEPARENT"))
        }
        self.env.update(
            HOME=str(self.home),
            OTEL_LIFECYCLE_HOOKS_JOURNAL=str(self.journal),
            OTEL_LIFECYCLE_HOOKS_LOG=str(self.hook_log),
            OTEL_LIFECYCLE_HOOKS_TRACE_DIR=str(self.trace_dir),
            OTEL_METRICS_EXPORTER="none",
            SCION_HOOKS_DIR=str(root / "no-legacy-hooks"),
            # Session rows sealed, so that `reconcile` (given the same) can vouch for them.
            LIFECYCLE_HOOKS_JOURNAL_KEY=JOURNAL_KEY,
        )
        self.runs: list[Run] = []
        self._agents = 0

    def template(self, hooks_yaml: str, extra: str = "", name: str = "scion-agent.yaml") -> Path:
        path = self.root / name
        path.write_text(extra + "lifecycle_hooks:\n" + hooks_yaml)
        return path

    def agent_command(self, **plan: Any) -> list[str]:
        self._agents += 1
        plan.setdefault("pid_file", str(self.root / f"agent-{self._agents}.pid"))
        return [sys.executable, str(self.agent), json.dumps(plan)]

    def start(
        self,
        template: Path | None,
        command: Sequence[str],
        *options: str,
        env: Mapping[str, str] | None = None,
    ) -> Run:
        argv = [sys.executable, "-m", "otel_lifecycle_hooks", "run", "--agent-name", "test-agent"]
        if template is not None:
            argv += ["--template", str(template)]
        argv += [*options, "--", *command]
        stderr_path = self.root / f"supervisor-{len(self.runs)}.stderr"
        stderr_file = stderr_path.open("wb")
        process = subprocess.Popen(
            argv,
            env={**self.env, **(env or {})},
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr_file,
            start_new_session=True,
        )
        run = Run(process, stderr_path, stderr_file)
        self.runs.append(run)
        return run

    def cleanup(self) -> None:
        for run in self.runs:
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait(timeout=120)
            run.stderr_file.close()
        # Agents orphaned by a killed supervisor (their own session: out of its group), and
        # the processes they detached.
        for pid_file in self.root.glob("*.pid"):
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def wait_until(condition: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    """Poll `condition` until it returns something truthy; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
