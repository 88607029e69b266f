"""Load: a real supervisor fed 10,000 activity changes per second through its event socket,
from several connections, with one debounced and one plain HTTP hook on a loopback target.

Shown here (3 s of offered load, in the `slow` tier that `.ci/run` also runs; `make bench`
runs 30 s through benchmarks/load_activity.py): resident memory stays flat after warm-up; the
debounced hook delivers the last state; the plain hook's queue is bounded and its overflow is
dropped oldest first, counted in `agent.lifecycle_hook.dropped` (read from the Prometheus
endpoint) and logged a bounded number of times; the lifecycle events it also listens to are
never dropped.
The same policies, with exact counts on a fake clock, are in test_reliability_queue.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.reliability.load import LoadedSupervisor
from tests.support.target_server import TargetServer

RATE = 10_000
WARM_UP_S = 1.0
LOAD_S = 3.0
MAX_GROWTH_KIB = 10 * 1024


def bodies(server: TargetServer, path: str) -> list[dict[str, str]]:
    found = [r for r in list(server.requests) if r.path == path]
    assert all(r.body for r in found), [r for r in found if not r.body]
    return [json.loads(r.body) for r in found]


@pytest.mark.slow  # a load run: the supervisor catching up with 3 s of overload
def test_10k_activity_changes_per_second_keep_memory_flat_and_drop_only_what_may_be_dropped(
    tmp_path: Path, target_server: TargetServer
) -> None:
    supervisor = LoadedSupervisor(tmp_path, target_server.url("").rstrip("/"))
    supervisor.start()
    try:
        supervisor.offer(RATE, WARM_UP_S)
        warm_kib = supervisor.rss_kib()
        supervisor.offer(RATE, LOAD_S)
        supervisor.send_last("the-last-tool")

        # The debounced hook delivers the last state once the supervisor has caught up.
        delivered = wait_for(
            lambda: any(b["tool"] == "the-last-tool" for b in bodies(target_server, "/debounced")),
            120.0,
        )
        assert delivered, "the last activity change never reached the debounced hook"
        grown_kib = supervisor.rss_kib() - warm_kib
        assert grown_kib < MAX_GROWTH_KIB, f"resident memory grew {grown_kib} KiB under load"
        debounced = bodies(target_server, "/debounced")
        assert debounced[-1] == {"activity": "executing", "tool": "the-last-tool"}
        assert len(debounced) < supervisor.sent / 10  # coalesced, far fewer than the changes
        dropped = supervisor.dropped("every-change")
        assert dropped > 0
        assert supervisor.dropped("debounced") == 0

    finally:
        supervisor.stop()
    every = bodies(target_server, "/every")
    # Lifecycle events queued behind thousands of runtime events are still delivered.
    assert [b["event"] for b in every if b["event"] != "activity-change"] == [
        "pre-stop",
        "session-end",
    ]
    # Bounded: what ran plus what was dropped cannot exceed what was offered, and most was dropped.
    assert len(every) + dropped <= 2 * supervisor.sent + 10
    drop_lines = [line for line in supervisor.stderr.splitlines() if "dropped the oldest" in line]
    assert 1 <= len(drop_lines) <= dropped / 1000 + 1


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False
