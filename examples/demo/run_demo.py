"""`make demo`: a sample agent run under the supervisor, its hooks hitting a local receiver.

Starts a receiver on 127.0.0.1, runs `otel-lifecycle-hooks run` on a stand-in agent that
reports Claude Code events, stops it with SIGTERM as a container runtime would, then shows
what the receiver got, the hook log, the journal and the session's trace. One hook fails on
purpose (the receiver answers 503 to /status-page), to show how `run` reports a failure.

Everything the demo writes lives in a temporary folder that is removed at the end, except its
journal: each demo keeps its own in `~/.local/state/otel-lifecycle-hooks/demos/` (beside the
default journal; the newest five are kept), so that the `ui` command the demo prints last
opens this run's sessions, deliveries and attempts in a browser. That command names the demo's
template (`--template`): Redeliver renders only from a template the operator names, never from
the one the journal names, and sets DEMO_RECEIVER, which the template reads, to the receiver's
address (stopped by then: a Redeliver answers Connection refused).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
received: list[tuple[str, str, str]] = []


class Receiver(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        received.append((self.command, self.path, body))
        failing = self.path == "/status-page"
        answer = (
            {"error": "status page unavailable"} if failing else {"name": "services/demo-agent"}
        )
        payload = json.dumps(answer).encode()
        self.send_response(503 if failing else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_POST = do_PATCH = do_DELETE = do_PUT = do_GET = _answer

    def log_message(self, *args: object) -> None:
        pass


def _echo(stream: Any, indent: str) -> list[str]:
    """Print `run`'s report lines as they come (the supervisor's stderr), and keep them."""
    lines = []
    for line in stream:
        lines.append(line.rstrip())
        print(f"{indent}{line.rstrip()}", flush=True)
    return lines


def cli(*args: str, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "otel_lifecycle_hooks", *args], env=env, check=False)


KEEP_DEMO_JOURNALS = 5  # the newest demos' journals are kept; older ones are removed


def demo_journal(environ: dict[str, str]) -> Path:
    """A journal of this demo's own, in a folder beside the default journal: two demos of one
    user, even at once, never share or remove each other's. The oldest beyond the newest
    KEEP_DEMO_JOURNALS are removed (with their -wal/-shm files)."""
    home = Path(environ.get("HOME") or Path.home())
    folder = home / ".local" / "state" / "otel-lifecycle-hooks" / "demos"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    handle, name = tempfile.mkstemp(prefix=f"demo-{stamp}-", suffix=".sqlite3", dir=folder)
    os.close(handle)
    journals = sorted(folder.glob("demo-*.sqlite3"), key=lambda path: path.stat().st_mtime)
    for old in journals[:-KEEP_DEMO_JOURNALS]:
        for part in folder.glob(old.name + "*"):
            part.unlink(missing_ok=True)
    return Path(name)


def ui_command(journal: Path, receiver: str) -> str:
    """The command that opens the journal's page with this environment's package, runnable as
    printed: its console script by name when PATH finds that one, else by its path; with the
    demo's template, for Redeliver, and the receiver's address it reads."""
    beside = Path(sys.executable).parent / "otel-lifecycle-hooks"
    found = shutil.which("otel-lifecycle-hooks")
    if found is not None and Path(found).resolve() == beside.resolve():
        program = "otel-lifecycle-hooks"
    elif beside.is_file():
        program = shlex.quote(str(beside))
    else:
        program = f"{shlex.quote(sys.executable)} -m otel_lifecycle_hooks"
    template = shlex.quote(str(HERE / "scion-agent.yaml"))
    return (
        f"env DEMO_RECEIVER={shlex.quote(receiver)} {program} ui "
        f"--journal {shlex.quote(str(journal))} --template {template}"
    )


def main() -> int:
    journal = demo_journal(dict(os.environ))
    with tempfile.TemporaryDirectory(prefix="otel-lifecycle-hooks-demo-") as folder:
        server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        receiver = f"http://127.0.0.1:{server.server_port}"
        code = demo(Path(folder), journal, server, receiver)
    print("== the delivery history in a browser (sessions, deliveries, each attempt, Redeliver;")
    print("   the demo's receiver has stopped, so a Redeliver from it answers Connection refused):")
    print(f"   {ui_command(journal, receiver)}")
    return code


def demo(state: Path, journal: Path, server: ThreadingHTTPServer, receiver: str) -> int:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = dict(os.environ)
    env.update(
        DEMO_RECEIVER=receiver,
        LIFECYCLE_HOOKS_JOURNAL=str(journal),
        LIFECYCLE_HOOKS_LOG=str(state / "agent.log"),
        LIFECYCLE_HOOKS_TRACE_DIR=str(state / "traces"),
        OTEL_SERVICE_NAME="demo-agent",
    )
    for key in [
        k
        for k in env
        if k.startswith("OTEL_EXPORTER_") or k in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER")
    ]:
        del env[key]  # the demo shows the embedded default: a local trace file
    template = str(HERE / "scion-agent.yaml")
    print(f"== demo state in {state} (removed when the demo ends); its journal: {journal}")
    print(
        "== otel-lifecycle-hooks run --template examples/demo/scion-agent.yaml -- python agent.py"
    )
    print("   (its report of failing hooks, and the summary at the end, go to stderr)")
    supervisor = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otel_lifecycle_hooks",
            "run",
            "--template",
            template,
            "--agent-name",
            "demo-agent",
            "--grace-period",
            "5s",
            "--",
            sys.executable,
            str(HERE / "agent.py"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert supervisor.stderr is not None
    report: list[str] = []
    reader = threading.Thread(
        target=lambda: report.extend(_echo(supervisor.stderr, "   ")), daemon=True
    )
    reader.start()
    assert supervisor.stdout is not None
    for line in supervisor.stdout:
        print(f"   {line.rstrip()}")
        if "waiting to be stopped" in line:
            break
    time.sleep(1.0)  # let the debounced activity update's window close
    print("== SIGTERM to the supervisor, as a container runtime stops it")
    supervisor.send_signal(signal.SIGTERM)
    try:
        code = supervisor.wait(timeout=30)
    except subprocess.TimeoutExpired:
        supervisor.kill()
        print("demo: the supervisor did not stop in time", file=sys.stderr)
        return 1
    reader.join(timeout=10)
    server.shutdown()
    server.server_close()  # a Redeliver from the page finds nothing listening: refused
    print(
        f"== supervisor exited with {code} (the agent's own exit code: it was stopped by SIGTERM)"
    )
    print(f"== the receiver got {len(received)} requests:")
    for method, path, body in received:
        print(f"   {method:6} {path}  {body.strip()[:100]}")
    print("== hook log")
    print("   " + (state / "agent.log").read_text().strip().replace("\n", "\n   "))
    print("== otel-lifecycle-hooks list (hooks and their recent executions)")
    cli("list", template, "--journal", str(journal), env=env)
    print("== otel-lifecycle-hooks trace (the session's spans from the local trace file)")
    cli("trace", "--width", "110", env=env)
    print("== otel-lifecycle-hooks history --failed (what `replay` can resend)")
    cli("history", "--failed", "--journal", str(journal), env=env)
    if not any("hook post-status-page (task-completed) failed" in line for line in report):
        print("demo: run did not report the failing hook", file=sys.stderr)
        return 1
    if not any("1 failed: post-status-page 503" in line for line in report):
        print("demo: run's summary does not name the failing hook", file=sys.stderr)
        return 1
    expected = {("POST", "/registry/services"), ("DELETE", "/registry/services/demo-agent")}
    missing = expected - {(m, p) for m, p, _ in received}
    if missing:
        print(f"demo: expected requests never arrived: {sorted(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
