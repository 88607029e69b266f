"""Load benchmark: 10,000 activity changes per second for 30 s through a real supervisor's
event socket, with one debounced and one plain HTTP hook on a loopback target.

    python benchmarks/load_activity.py [--rate 10000] [--seconds 30] [--warm-up 2]

Prints the rate the supervisor took in, its resident memory after warm-up and at the end, the
requests each hook made and the events dropped, and exits 1 when memory grew by 10 MB or more,
the debounced hook missed the last state, or a lifecycle event was lost. The short version of
this run is tests/reliability/test_reliability_load.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.reliability.load import LoadedSupervisor
from tests.support.target_server import TargetServer

MAX_GROWTH_KIB = 10 * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rate", type=float, default=10_000, help="activity changes offered per second"
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the load lasts")
    parser.add_argument(
        "--warm-up", type=float, default=2.0, help="seconds of load before memory is measured"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, TargetServer() as target:
        supervisor = LoadedSupervisor(Path(workdir), target.url("").rstrip("/"))
        supervisor.start()
        try:
            supervisor.offer(args.rate, args.warm_up)
            warm_kib = supervisor.rss_kib()
            started = time.monotonic()
            achieved = supervisor.offer(args.rate, args.seconds)
            supervisor.send_last("the-last-tool")
            caught_up = _wait(lambda: _last_delivered(target), 300.0)
            took = time.monotonic() - started
            end_kib = supervisor.rss_kib()
            dropped = supervisor.dropped("every-change")
            supervisor.stop()
        finally:
            supervisor.stop()
        every = [json.loads(r.body) for r in target.requests if r.path == "/every"]
        debounced = [r for r in target.requests if r.path == "/debounced"]
        lifecycle = [b["event"] for b in every if b["event"] != "activity-change"]
        print(
            f"offered      {args.rate:,.0f}/s for {args.seconds:g}s; "
            f"handed to the socket at {achieved:,.0f}/s"
        )
        print(
            f"processed    {supervisor.sent:,} changes in {took:.1f}s "
            f"({supervisor.sent / took:,.0f}/s)"
        )
        print(
            f"memory       {warm_kib / 1024:.1f} MiB after warm-up, "
            f"{end_kib / 1024:.1f} MiB at the end"
        )
        print(f"debounced    {len(debounced):,} requests; last state delivered: {caught_up}")
        print(f"every-change {len(every):,} requests; {dropped:,.0f} dropped (queue_full)")
        print(f"lifecycle    {lifecycle}")
        ok = (
            end_kib - warm_kib < MAX_GROWTH_KIB
            and caught_up
            and lifecycle == ["pre-stop", "session-end"]
        )
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1


def _last_delivered(target: TargetServer) -> bool:
    return any(
        r.path == "/debounced" and json.loads(r.body).get("tool") == "the-last-tool"
        for r in list(target.requests)
    )


def _wait(condition, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


if __name__ == "__main__":
    sys.exit(main())
