"""Crash recovery, the seed's orphan reaper.

A session that reached post-start and never recorded its end in the journal belonged to a
supervisor that was killed (SIGKILL, OOM): its pre-stop and session-end hooks are still owed,
so that no registration is left behind. The next `run` of the same agent fires them, marked as
recovered, once. A session whose supervisor is still running is not an orphan.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..engine.model import LifecycleEvent, SessionInfo

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

RECOVERED_EVENTS = ("pre-stop", "session-end")
# A process that started this long after the session did cannot be its supervisor.
_START_TIME_SLACK = 2.0


def supervisor_alive(pid: int | None, session_started_at: float) -> bool:
    """Whether the process that opened a session still runs. Our own pid is never it: in a
    restarted container the new supervisor gets the old one's pid (often 1)."""
    if not pid or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, under another user
    started = process_start_time(pid)
    # A pid that was reused by a process started after the session is not the supervisor.
    return started is None or started <= session_started_at + _START_TIME_SLACK


def process_start_time(pid: int) -> float | None:
    """When `pid` started (unix seconds), from /proc; None where /proc is not available."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot_line = next(
            line
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, StopIteration):
        return None
    # Field 22 (starttime, in clock ticks since boot) counted after the parenthesised name.
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        ticks = int(fields[19])
        return int(boot_line.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None


def recover_orphaned_sessions(
    journal: Any,
    agent_id: str,
    metadata: Mapping[str, str],
    fire: Callable[[LifecycleEvent, SessionInfo], object],
) -> list[str]:
    """Fire the owed pre-stop and session-end hooks of `agent_id`'s orphaned sessions; returns
    their session ids. Each is marked recovered before its hooks fire, so that two runs
    starting together do not both recover it."""
    recovered: list[str] = []
    if journal is None:
        return recovered
    for row in journal.unfinished_sessions(agent_id):
        if supervisor_alive(row.pid, row.started_at):
            continue
        log.warning("recovering session %s of an earlier run that was killed", row.session_id)
        journal.mark_recovered(row.session_id)
        info = SessionInfo(
            session_id=row.session_id, metadata={**metadata, "SESSION_ID": row.session_id}
        )
        for event in RECOVERED_EVENTS:
            fire(
                LifecycleEvent(
                    name=event,
                    fields={
                        "PHASE": "stopping" if event == "pre-stop" else "stopped",
                        "RECOVERED": "true",
                    },
                    timestamp=time.time(),
                    recovered=True,
                ),
                info,
            )
        recovered.append(row.session_id)
    return recovered
