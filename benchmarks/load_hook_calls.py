"""Real `hook` calls while the supervisor's socket is flooded: what arrives, what is lost, and
where each loss is counted.

    python benchmarks/load_hook_calls.py [--rate 10000] [--seconds 6] [--hooks 20]

Floods a real supervisor with activity changes (as benchmarks/load_activity.py does) and, during
the flood, runs `--hooks` real `otel-lifecycle-hooks hook --dialect claude` processes at once.
Prints how many lines the socket took in, how many of the hook calls delivered their event, how
many reported a busy supervisor in the hook log (a loss counted by the sender), and what the
supervisor refused (`agent_lifecycle_ingress_refused_total`, by reason).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.reliability.load import LoadedSupervisor
from tests.support.target_server import TargetServer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=10_000)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--hooks", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, TargetServer() as target:
        root = Path(workdir)
        supervisor = LoadedSupervisor(root, target.url("").rstrip("/"))
        supervisor.start()
        try:
            flood = threading.Thread(target=supervisor.offer, args=(args.rate, args.seconds))
            flood.start()
            env = {
                "PATH": "/usr/bin:/bin",
                "HOME": workdir,
                "OTEL_LIFECYCLE_HOOKS_SOCKET": supervisor.socket_path,
                "OTEL_LIFECYCLE_HOOKS_LOG": str(root / "hook-calls.log"),
            }
            payload = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "hook-call"})
            calls = [
                subprocess.Popen(
                    [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "claude"],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    env=env,
                )
                for _ in range(args.hooks)
            ]  # fmt: skip
            for call in calls:
                call.communicate(payload.encode(), timeout=60)
            flood.join()
            metrics = (
                urllib.request.urlopen(
                    f"http://127.0.0.1:{supervisor.metrics_port}/metrics", timeout=5
                )
                .read()
                .decode()
            )
        finally:
            supervisor.stop()
        log = root / "hook-calls.log"
        failed = log.read_text().splitlines() if log.exists() else []
        refused = [
            line for line in metrics.splitlines()
            if line.startswith("agent_lifecycle_ingress_refused_total{")
        ]  # fmt: skip
        print(f"flood        {supervisor.sent:,} lines offered in {args.seconds:g}s")
        print(f"hook calls   {args.hooks - len(failed)} of {args.hooks} delivered")
        print(f"hook log     {len(failed)} lines (each a call that could not deliver)")
        for line in failed[:3]:
            print(f"             {line}")
        print(f"refused      {refused or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
