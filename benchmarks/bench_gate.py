"""Gate cost: how long a harness waits on a gate, per route, with a loopback policy service
that answers `{"decision": "allow"}` at once, against the same event with no gate.

- command route: `otel-lifecycle-hooks hook --dialect claude` with a PreToolUse payload, run
  as the harness runs it, from the supervised agent (a child of `run`, so that `hook` trusts
  its supervisor's answer): with a gate it waits for the supervisor's decision, which runs the
  gate's HTTP request; without one the supervisor answers at once;
- http route (Claude Code's `http` hooks): a PreToolUse POST to the session's route on a new
  loopback connection, as Claude Code posts it; with a gate the route answers once the gate
  decided, without one once the supervisor admitted the event.

Each route's events are timed inside the agent (the `hook` process from its start to its
exit; the POST from its connection to its answer), alternating round by round between two
supervisors (one template with the gate, one without). Every gate request must reach the
policy service, or the script exits 2. Targets: the command route at most 1.5x the event
with no gate; the http route under the command route's event with no gate.
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


# The agent for the http route: N POSTs, each on a new connection, timed to the whole answer.
AGENT_HTTP = textwrap.dedent(
    """
    import http.client, json, os, sys, time
    payload, out, runs = sys.argv[1].encode(), sys.argv[2], int(sys.argv[3])
    url = os.environ["LIFECYCLE_HOOKS_HTTP_URL"].removeprefix("http://")
    headers = {"Authorization": "Bearer " + os.environ["LIFECYCLE_HOOKS_HTTP_TOKEN"],
               "Content-Type": "application/json"}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        connection = http.client.HTTPConnection(url, timeout=60)
        connection.request("POST", "/claude", payload, headers)
        response = connection.getresponse()
        body = response.read()
        connection.close()
        times.append((time.perf_counter() - started) * 1000.0)
        if response.status != 200 or body:
            sys.exit(f"route answered {response.status} {body!r}")
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


def supervised_runs(
    home: Path, template_path: Path, runs: int, name: str, route: str = "command"
) -> list[float]:
    """`run --template T -- python agent.py ...`: the agent's timed `hook` calls (route
    "command") or POSTs to the session's HTTP route (route "http")."""
    cli = str(Path(sys.executable).with_name("otel-lifecycle-hooks"))
    agent = home / f"agent-{route}.py"
    agent.write_text(AGENT if route == "command" else AGENT_HTTP)
    out = home / f"{name}.json"
    argv = [cli, "run", "--template", str(template_path), "--", sys.executable, str(agent)]
    if route == "command":
        argv.append(cli)
    argv += [json.dumps(PAYLOAD), str(out), str(runs)]
    env = clean_env(home, LIFECYCLE_HOOKS_HTTP="1") if route == "http" else clean_env(home)
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"{name}: run failed ({done.returncode}): {done.stderr[-2000:]}")
    times: list[float] = json.loads(out.read_text())
    return times


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    runs, rounds = (3, 1) if args.quick else (20, 3)
    compile_package()
    routes = ("command", "http")
    gated = {route: Samples() for route in routes}
    plain = {route: Samples() for route in routes}
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp, policy_service() as service:
        home = Path(tmp)
        url = f"http://127.0.0.1:{service.server_address[1]}"
        with_gate, without = template(home, url), template(home, None)
        # Warm the page cache, then alternate the two supervisors round by round.
        supervised_runs(home, without, 1, "warm")
        for round_number in range(rounds):
            first, second = (with_gate, without) if round_number % 2 == 0 else (without, with_gate)
            for route in routes:
                for chosen in (first, second):
                    times = supervised_runs(home, chosen, runs, f"round{round_number}", route)
                    (gated if chosen is with_gate else plain)[route].values.extend(times)
        asked = service.count  # type: ignore[attr-defined]
    expected = runs * rounds * len(routes)
    if asked != expected:
        print(f"{expected} gated events, {asked} reached the policy service", file=sys.stderr)
        return 2
    timed = {
        "command": "the whole `hook` process, timed in the supervised agent",
        "http": "one POST on a new loopback connection to its answer, timed in the agent",
    }
    # The http route's own cost is a fraction of a process start, so a ratio to it would
    # measure the gate's HTTP request alone: its target is to stay under the command route's
    # event with no gate (a gate over http costs less than an ungated `hook` process).
    targets = {"command": (GATE_TARGET, "ratio"), "http": (plain["command"].median, "value")}
    figures = [
        Figure(
            benchmark="gate",
            name=f"Claude Code PreToolUse, {route} route, a gate answering allow at once, median",
            value=gated[route].median,
            unit="ms",
            baseline=plain[route].median,
            baseline_name="the same event with no gate, median",
            target=targets[route][0],
            checked=targets[route][1],
            paired_ratio=paired_ratio(gated[route], plain[route]),
            detail=(
                f"{runs * rounds} gate requests answered; {timed[route]}; "
                f"{gated[route].summary()}; baseline {plain[route].summary()}"
                + ("; target: the command route's event with no gate" if route == "http" else "")
            ),
        )
        for route in routes
    ]
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
