"""Gate cost: how long a harness waits on a gate, per route, with a loopback policy service
that answers `{"decision": "allow"}` at once, against the same event with no gate.

- command route: `otel-lifecycle-hooks hook --dialect claude` with a PreToolUse payload, run
  as the harness runs it, from the supervised agent (a child of `run`, so that `hook` trusts
  its supervisor's answer): with a gate it waits for the supervisor's decision, which runs the
  gate's HTTP request; without one the supervisor answers at once;
- http route (Claude Code's `http` hooks): not measured, since it answers each event before
  the hooks run and so applies no gate (docs/gates.md).

Each route's events are timed inside the agent, from the start of the `hook` process to its
exit, alternating round by round between two supervisors (one template with the gate, one
without). Every gate request must reach the policy service, or the script exits 2. Target:
at most 1.5x the event with no gate.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from _common import (
    Figure,
    Samples,
    bench_arguments,
    clean_env,
    compile_package,
    paired_ratio,
    report,
)

SCRIPT = "bench_gate.py"
# A gate answering at once may add at most half of what the event costs without it: the wait
# is one HTTP request on the supervisor's pooled client and one answer on the socket.
GATE_TARGET = 1.5  # x the same event with no gate
RUN_TIMEOUT = 600.0  # seconds: a hang guard for one supervised agent
PAYLOAD = {
    "session_id": "5d1e7c2a-0b3f-4c6d-8e9f-1a2b3c4d5e6f",
    "transcript_path": "/home/agent/.claude/projects/app/5d1e7c2a.jsonl",
    "cwd": "/workspace/app",
    "permission_mode": "default",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "pytest -q tests/"},
    "tool_use_id": "toolu_01",
}
# The agent: runs `hook` N times as a harness would and writes each wall time (ms) to OUT.
AGENT = textwrap.dedent(
    """
    import json, subprocess, sys, time
    hook, payload, out, runs = sys.argv[1], sys.argv[2].encode(), sys.argv[3], int(sys.argv[4])
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run([hook, "hook", "--dialect", "claude"], input=payload,
                              capture_output=True)
        times.append((time.perf_counter() - started) * 1000.0)
        if done.returncode != 0 or done.stdout:
            sys.exit(f"hook answered {done.returncode} {done.stdout!r} {done.stderr!r}")
    open(out, "w").write(json.dumps(times))
    """
)


class _Allow(BaseHTTPRequestHandler):
    """Answers every POST with an allow, at once."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"decision": "allow"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.count += 1  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@contextmanager
def policy_service() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Allow)
    server.daemon_threads = True
    server.lock = threading.Lock()  # type: ignore[attr-defined]
    server.count = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def template(directory: Path, url: str | None) -> Path:
    """A gate on tool-start at `url`, or (None) a template with no hook on it."""
    path = directory / ("gated.yaml" if url else "plain.yaml")
    hook = (
        f"""
          - name: policy
            on: [tool-start]
            action: {{type: http, method: POST, url: "{url}/decide",
                      body: '{{"tool": "${{TOOL_NAME}}"}}'}}
            blocking: true
            timeout: 5s
        """
        if url
        else """
          - name: unrelated
            on: [session-end]
            action: {type: webhook, url: "http://127.0.0.1:9/end"}
        """
    )
    path.write_text("lifecycle_hooks:" + textwrap.dedent(hook))
    return path


def supervised_runs(home: Path, template_path: Path, runs: int, name: str) -> list[float]:
    """`run --template T -- python agent.py ...`: the agent's timed `hook` calls."""
    cli = str(Path(sys.executable).with_name("otel-lifecycle-hooks"))
    agent = home / "agent.py"
    agent.write_text(AGENT)
    out = home / f"{name}.json"
    argv = [cli, "run", "--template", str(template_path), "--", sys.executable, str(agent),
            cli, json.dumps(PAYLOAD), str(out), str(runs)]  # fmt: skip
    done = subprocess.run(
        argv, env=clean_env(home), capture_output=True, text=True, timeout=RUN_TIMEOUT,
        check=False,
    )  # fmt: skip
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"{name}: run failed ({done.returncode}): {done.stderr[-2000:]}")
    times: list[float] = json.loads(out.read_text())
    return times


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    runs, rounds = (3, 1) if args.quick else (20, 3)
    compile_package()
    gated, plain = Samples(), Samples()
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp, policy_service() as service:
        home = Path(tmp)
        url = f"http://127.0.0.1:{service.server_address[1]}"
        with_gate, without = template(home, url), template(home, None)
        # Warm the page cache, then alternate the two supervisors round by round.
        supervised_runs(home, without, 1, "warm")
        for round_number in range(rounds):
            first, second = (with_gate, without) if round_number % 2 == 0 else (without, with_gate)
            for chosen in (first, second):
                times = supervised_runs(home, chosen, runs, f"round{round_number}")
                (gated if chosen is with_gate else plain).values.extend(times)
        asked = service.count  # type: ignore[attr-defined]
    if asked != runs * rounds:
        print(f"{runs * rounds} gated events, {asked} reached the policy service", file=sys.stderr)
        return 2
    figures = [
        Figure(
            benchmark="gate",
            name="Claude Code PreToolUse, command route, a gate answering allow at once, median",
            value=gated.median,
            unit="ms",
            baseline=plain.median,
            baseline_name="the same event with no gate, median",
            target=GATE_TARGET,
            paired_ratio=paired_ratio(gated, plain),
            detail=(
                f"{asked} gate requests answered; the whole `hook` process, timed in the "
                f"supervised agent; {gated.summary()}; baseline {plain.summary()}"
            ),
        ),
    ]
    print("  (http route: answers before the hooks run, so no gate applies there; not measured)")
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
