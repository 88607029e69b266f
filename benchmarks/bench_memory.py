"""Memory: resident memory of a real supervisor (`run` with the seed's agent-registry template,
its URLs on a loopback stand-in registry) after 100,000 events through the event socket,
against what it was after the first 1,000.

The events are what a harness sends on every tool call, alternating tool-start and tool-end,
so each is also an activity change (debounced by the template, as the seed has it). Target:
the growth stays within 10 MB.
"""

from __future__ import annotations

import json
import socket
import sys
import tempfile
from pathlib import Path

from _common import (
    Figure,
    bench_arguments,
    registry_server,
    report,
    rss_kib,
    running_supervisor,
    seed_template,
    wait_until_idle,
)

SCRIPT = "bench_memory.py"
TARGET_GROWTH_MB = 10.0
BATCH = 100  # events per connection


def wire_event(i: int) -> bytes:
    event = "tool-start" if i % 2 == 0 else "tool-end"
    raw = "PreToolUse" if i % 2 == 0 else "PostToolUse"
    message = {
        "v": 1,
        "kind": "event",
        "event": event,
        "dialect": "claude",
        "raw_event": raw,
        "session_id": "bench-session",
        "fields": {"TOOL_NAME": f"Bash-{i % 50}"},
    }
    return json.dumps(message).encode() + b"\n"


def send(socket_path: str, first: int, count: int) -> None:
    for start in range(first, first + count, BATCH):
        lines = b"".join(wire_event(i) for i in range(start, min(start + BATCH, first + count)))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(socket_path)
            connection.sendall(lines)


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    warm, total = (100, 500) if args.quick else (1_000, 100_000)
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp, registry_server() as registry:
        home = Path(tmp)
        with running_supervisor(seed_template(home, registry.url), home) as supervisor:
            pid = supervisor.process.pid
            send(supervisor.socket_path, 0, warm)
            wait_until_idle(pid)
            after_warm = rss_kib(pid)
            send(supervisor.socket_path, warm, total - warm)
            wait_until_idle(pid, timeout=600)
            after_all = rss_kib(pid)
        patches = [r for r in registry.requests if r[0] == "PATCH"]
        if not patches:
            raise SystemExit("no activity change reached the registry: events were lost")

    growth_mb = (after_all - after_warm) / 1024
    figures = [
        Figure(
            benchmark="memory",
            name=f"supervisor RSS after {total:,} events",
            value=after_all / 1024,
            unit="MB",
            baseline=after_warm / 1024,
            baseline_name=f"after {warm:,} events",
            target=TARGET_GROWTH_MB,
            checked="growth",
            detail=f"growth {growth_mb:+.1f} MB",
        )
    ]
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
