"""Harness event cost: what Claude Code pays per hook event on each route into a running
supervisor, against `python -c pass` of the same install.

- command path: `otel-lifecycle-hooks hook --dialect claude` as a whole process, the payload
  on stdin (what a `command` hook costs; every harness can use it);
- http path: one `POST /claude` to the supervisor's loopback HTTP route with its token, on a
  new connection each time (what a Claude Code `http` hook costs at most: no process).

Every event must reach the supervisor: its message count is read before and after. Targets:
the command path at most 2x `python -c pass` (as bench_hook_path.py), the http path under one
Python start-up (ratio below 1).
"""

from __future__ import annotations

import http.client
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    Figure,
    bench_arguments,
    clean_env,
    compile_package,
    console_script,
    interleave,
    paired_ratio,
    registry_server,
    report,
    seed_template,
    time_process,
)

SCRIPT = "bench_harness_event.py"
COMMAND_TARGET = 2.0
HTTP_TARGET = 1.0
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


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    runs = 2 if args.quick else 30
    compile_package()
    with tempfile.TemporaryDirectory(prefix="bench-event-") as tmp, registry_server() as registry:
        home = Path(tmp)
        template = seed_template(home, registry.url)
        process, channel = start_supervisor(template, home)
        try:
            hook_log = home / "hook-command.log"
            env = clean_env(home, LIFECYCLE_HOOKS_SOCKET=channel["socket"],
                            LIFECYCLE_HOOKS_LOG=str(hook_log))
            bodies = [json.dumps(p).encode() for p in PAYLOADS]
            turns = {"command": 0, "http": 0}

            def command_event() -> float:
                body = bodies[turns["command"] % 2]
                turns["command"] += 1
                return time_process([console_script(), "hook", "--dialect", "claude"],
                                    stdin=body, env=env)

            def http_event() -> float:
                body = bodies[turns["http"] % 2]
                turns["http"] += 1
                return post_event(channel["http_url"], channel["token"], body)

            subjects = {
                "venv python -c pass": lambda: time_process([sys.executable, "-c", "pass"],
                                                            env=env),
                "command path": command_event,
                "http path": http_event,
            }
            before = received(channel)
            interleave(1, subjects)  # warm the page cache
            samples = interleave(runs, subjects)
            sent = turns["command"] + turns["http"]
            arrived = wait_for_count(channel, before + sent) - before
            failures = hook_log.read_text() if hook_log.exists() else ""
        finally:
            stop(process)
    if failures:
        raise SystemExit(f"the hook command reported failures:\n{failures}")
    if arrived != sent:
        raise SystemExit(f"{sent} events sent, {arrived} reached the supervisor")

    baseline = samples["venv python -c pass"]
    figures = []
    for name, target in (("command path", COMMAND_TARGET), ("http path", HTTP_TARGET)):
        measured = samples[name]
        figures.append(
            Figure(
                benchmark="harness event",
                name=f"Claude Code event, {name}, median",
                value=measured.median,
                unit="ms",
                baseline=baseline.median,
                baseline_name="venv python -c pass, median",
                target=target,
                paired_ratio=paired_ratio(measured, baseline),
                detail=(
                    f"{arrived} of {sent} events reached the supervisor; ratio: median of "
                    f"{len(measured.values)} interleaved pairs; {measured.summary()}; "
                    f"baseline {baseline.summary()}"
                ),
            )
        )
    return report(SCRIPT, figures, args)


def start_supervisor(template: Path, home: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """`run` with its HTTP route open; the child writes where the routes are, then sleeps."""
    found = home / "channel.json"
    child = (
        'printf \'{"socket": "%s", "http_url": "%s", "token": "%s"}\' '
        '"$LIFECYCLE_HOOKS_SOCKET" "$LIFECYCLE_HOOKS_HTTP_URL" "$LIFECYCLE_HOOKS_HTTP_TOKEN" '
        f"> {shlex.quote(str(found))}.tmp && mv {shlex.quote(str(found))}.tmp "
        f"{shlex.quote(str(found))}; exec sleep 600"
    )
    argv = [sys.executable, "-m", "otel_lifecycle_hooks", "run", "--template", str(template),
            "--", "sh", "-c", child]
    process = subprocess.Popen(argv, env=clean_env(home, LIFECYCLE_HOOKS_HTTP="1"),
                               stdout=subprocess.DEVNULL,
                               stderr=open(home / "supervisor.err", "wb"),  # noqa: SIM115
                               cwd=home)
    deadline = time.monotonic() + 30
    while not found.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            err = (home / "supervisor.err").read_text(errors="replace")[-2000:]
            raise SystemExit(f"the supervisor did not start: {err}")
        time.sleep(0.02)
    channel: dict[str, str] = json.loads(found.read_text())
    if not channel["http_url"]:
        stop(process)
        raise SystemExit("the supervisor opened no HTTP route")
    return process, channel


def post_event(url: str, token: str, body: bytes) -> float:
    """Wall time of one POST on a new connection, milliseconds; it must answer 200."""
    host, port = url.removeprefix("http://").split(":")
    started = time.perf_counter()
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("POST", "/claude", body=body, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    elapsed = (time.perf_counter() - started) * 1000.0
    if response.status != 200:
        raise RuntimeError(f"POST /claude answered {response.status}")
    return elapsed


def received(channel: dict[str, str]) -> int:
    host, port = channel["http_url"].removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", "/v1/status",
                           headers={"Authorization": f"Bearer {channel['token']}"})
        count = json.loads(connection.getresponse().read())["received"]
    finally:
        connection.close()
    return int(count)


def wait_for_count(channel: dict[str, str], wanted: int, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    count = received(channel)
    while count < wanted and time.monotonic() < deadline:
        time.sleep(0.05)
        count = received(channel)
    return count


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    sys.exit(main())
