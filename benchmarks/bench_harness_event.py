"""Harness event cost: what Claude Code pays per hook event on each route into a running
supervisor, from the harness starting to send until the supervisor has the event.

- command path: `otel-lifecycle-hooks hook --dialect claude`, the console script of this
  install, as a whole process with the payload on stdin (what a `command` hook costs; every
  harness can use it), against `python -c pass` of the same install;
- http path: one POST to the URL, with the header, of the settings file that `run` hands
  Claude Code (`--settings "$LIFECYCLE_HOOKS_CLAUDE_SETTINGS"`), on a new connection each
  time, as Claude Code's `http` hooks send it: no process;
- curl: `curl` posting the same payload straight to a loopback webhook, the peer users would
  otherwise configure as a command hook.

"Until the supervisor holds it" is what the harness waits for: the command route's process
exits once its write to the supervisor's socket is complete, and the http route answers only
once the event is queued in the supervisor. After each send the supervisor's message count
(`GET /v1/status`, on a kept-alive connection) is polled until it holds the event, before the
next is sent: "until counted" lines include that poll. Every event must reach the supervisor
and every curl request the webhook, or the script exits 2. Targets: the command path at most
2x `python -c pass`; the http path at most 0.1x the command path.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import (
    Figure,
    Samples,
    bench_arguments,
    claude_command_hook,
    claude_http_hook,
    clean_env,
    compile_package,
    interleave,
    launch_supervisor,
    paired_ratio,
    registry_server,
    report,
    run_process,
    seed_template,
    stop_process,
    wait_for_channel,
)

SCRIPT = "bench_harness_event.py"
COMMAND_TARGET = 2.0  # x `python -c pass` of the same install
HTTP_TARGET = 0.1  # x the command path
PAYLOADS = [
    {
        "session_id": "5d1e7c2a-0b3f-4c6d-8e9f-1a2b3c4d5e6f",
        "transcript_path": "/home/agent/.claude/projects/app/5d1e7c2a.jsonl",
        "cwd": "/workspace/app",
        "permission_mode": "default",
        "hook_event_name": event,
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q tests/", "description": "Run the tests"},
    }
    for event in ("PreToolUse", "PostToolUse")
]


class Status:
    """The supervisor's message count (`GET /v1/status`) on one kept-alive connection.

    The route writes an answer's headers and body apart; the body then waits (Nagle) for the
    ACK of the headers, which the client delays by about 40 ms: that delay would be measured
    instead of the event. So the ACK is asked for at once (TCP_QUICKACK, Linux), again before
    every answer since the kernel drops it."""

    def __init__(self, url: str, token: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self._connection = http.client.HTTPConnection(host, int(port), timeout=10)
        self._headers = {"Authorization": f"Bearer {token}"}

    def received(self) -> int:
        self._connection.request("GET", "/v1/status", headers=self._headers)
        if self._connection.sock is not None and hasattr(socket, "TCP_QUICKACK"):
            self._connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        return int(json.loads(self._connection.getresponse().read())["received"])

    def wait_for(self, wanted: int, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        count = self.received()
        while count < wanted and time.monotonic() < deadline:
            count = self.received()
        return count

    def close(self) -> None:
        self._connection.close()


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    runs = 3 if args.quick else 60
    compile_package()
    curl = shutil.which("curl")
    with (
        tempfile.TemporaryDirectory(prefix="bench-event-") as tmp,
        registry_server() as registry,
        registry_server() as webhook,
    ):
        home = Path(tmp)
        process = launch_supervisor(seed_template(home, registry.url), home, http=True)
        channel = wait_for_channel(process, home)
        status = Status(channel["http_url"], channel["token"])
        try:
            hook_log = home / "hook-command.log"
            env = clean_env(
                home,
                LIFECYCLE_HOOKS_SOCKET=channel["socket"],
                LIFECYCLE_HOOKS_LOG=str(hook_log),
                LIFECYCLE_HOOKS_HTTP_TOKEN=channel["token"],
            )
            settings = json.loads(Path(channel["settings"]).read_text())
            command = claude_command_hook(settings)
            post = claude_http_hook(settings, env)
            bodies = [json.dumps(p).encode() for p in PAYLOADS]
            turn = iter(range(10**9))
            waited: dict[str, Samples] = {"command path": Samples(), "http path": Samples()}
            cpu: dict[str, Samples] = {"command path": Samples(), "venv python -c pass": Samples()}
            expected = [status.received()]
            per_event = [0]

            def end_to_end(name: str, send: Callable[[], float]) -> float:
                started = time.perf_counter()
                waited[name].values.append(send())
                expected[0] += per_event[0]
                if status.wait_for(expected[0]) < expected[0]:
                    raise SystemExit(f"{name}: an event did not reach the supervisor in 10 s")
                return (time.perf_counter() - started) * 1000.0

            def command_event() -> float:
                body = bodies[next(turn) % 2]
                wall, used = run_process(command, body, env)
                cpu["command path"].values.append(used)
                return wall

            def http_event() -> float:
                return post(bodies[next(turn) % 2])

            def baseline() -> float:
                wall, used = run_process([sys.executable, "-c", "pass"], b"", env)
                cpu["venv python -c pass"].values.append(used)
                return wall

            # How many messages one payload is (the count is of messages): one, for these.
            before = status.received()
            http_event()
            per_event[0] = status.wait_for(before + 1, 5.0) - before
            if per_event[0] < 1:
                raise SystemExit("the first POST's event never reached the supervisor")
            expected[0] = status.wait_for(before + per_event[0])
            subjects: dict[str, Callable[[], float]] = {
                "venv python -c pass": baseline,
                "command path": lambda: end_to_end("command path", command_event),
                "http path": lambda: end_to_end("http path", http_event),
            }
            if curl:
                curl_argv = [curl, "-sS", "-o", "/dev/null", "-X", "POST",
                             "-H", "Content-Type: application/json", "--data-binary", "@-",
                             f"{webhook.url}/hook"]  # fmt: skip
                subjects["curl"] = lambda: run_process(curl_argv, bodies[0], env)[0]
            interleave(1, subjects)  # warm the page cache
            for kept in (*waited.values(), *cpu.values()):
                kept.values.clear()
            samples = interleave(runs, subjects)
            arrived = status.received() - before
            failures = hook_log.read_text() if hook_log.exists() else ""
        finally:
            status.close()
            stop_process(process)
    if failures:
        raise SystemExit(f"the hook command reported failures:\n{failures}")
    sent = (2 * runs + 3) * per_event[0]
    if arrived != sent:
        print(f"{sent} messages sent, {arrived} reached the supervisor", file=sys.stderr)
        return 2
    if curl and len(webhook.requests) != runs + 1:
        print(
            f"{runs + 1} curl requests, {len(webhook.requests)} reached the webhook",
            file=sys.stderr,
        )
        return 2

    pass_ = samples["venv python -c pass"]
    # Until the supervisor holds the event: the command route's process exits once its write
    # to the supervisor's socket is done; the http route answers once the event is queued in
    # the supervisor (ingest_http: the 200 follows `accept`). Until it counted it: polled.
    command_held, http_held = waited["command path"], waited["http path"]
    command_counted, http_counted = samples["command path"], samples["http path"]
    checked = f"{arrived} of {sent} messages reached the supervisor, each counted before the next"
    figures = [
        Figure(
            benchmark="harness event",
            name="Claude Code event, command path (hook --dialect claude), until the "
            "supervisor holds it, median",
            value=command_held.median,
            unit="ms",
            baseline=pass_.median,
            baseline_name="python -c pass of the same install, median",
            target=COMMAND_TARGET,
            paired_ratio=paired_ratio(command_held, pass_),
            detail=(
                f"{checked}; the whole process; ratio: median of {runs} interleaved pairs; "
                f"{command_held.summary()}; baseline {pass_.summary()}"
            ),
        ),
        Figure(
            benchmark="harness event",
            name="Claude Code event, http path (the settings `run` writes), until the "
            "supervisor holds it, median",
            value=http_held.median,
            unit="ms",
            baseline=command_held.median,
            baseline_name="command path, until the supervisor holds it, median",
            target=HTTP_TARGET,
            paired_ratio=paired_ratio(http_held, command_held),
            detail=f"{checked}; one new connection per event, until the answer; "
            f"{http_held.summary()}",
        ),
        Figure(
            benchmark="harness event",
            name="command path, until the supervisor counted it (polled), median",
            value=command_counted.median,
            unit="ms",
            baseline=pass_.median,
            baseline_name="python -c pass of the same install, median",
            paired_ratio=paired_ratio(command_counted, pass_),
            detail=f"its status polled after each send (adds one poll); "
            f"{command_counted.summary()}",
        ),
        Figure(
            benchmark="harness event",
            name="http path, until the supervisor counted it (polled), median",
            value=http_counted.median,
            unit="ms",
            baseline=command_counted.median,
            baseline_name="command path, until counted, median",
            paired_ratio=paired_ratio(http_counted, command_counted),
            detail=f"its status polled after each send (adds one poll); {http_counted.summary()}",
        ),
        Figure(
            benchmark="harness event",
            name="CPU per event, command path (the hook process)",
            value=cpu["command path"].median,
            unit="ms",
            baseline=cpu["venv python -c pass"].median,
            baseline_name="CPU of python -c pass, median",
            detail=f"user + system time of the process; {cpu['command path'].summary()}",
        ),
    ]
    if curl:
        curled = samples["curl"]
        figures.append(
            Figure(
                benchmark="harness event",
                name="curl straight to a loopback webhook (no supervisor), median",
                value=curled.median,
                unit="ms",
                baseline=command_held.median,
                baseline_name="command path, until the supervisor holds it, median",
                paired_ratio=paired_ratio(curled, command_held),
                detail=f"{len(webhook.requests)} requests reached the webhook; {curled.summary()}",
            )
        )
    else:
        print("  (no curl on this machine: the curl line is left out)")
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
