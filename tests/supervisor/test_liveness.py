"""Liveness decisions: a heartbeat counts from the journal's return at the earliest, and a
supervisor's lock file proves it gone only when nobody holds it and nobody else could have
put it there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from otel_lifecycle_hooks.journal.liveness import LivenessClock
from otel_lifecycle_hooks.journal.rows import SessionRow
from otel_lifecycle_hooks.supervisor.recovery import (
    SessionLock,
    earlier_run_gone,
    supervisor_lock_released,
)

HOLDER = """
import sys, time
from pathlib import Path
from otel_lifecycle_hooks.supervisor.recovery import SessionLock
lock = SessionLock(Path(sys.argv[1]), sys.argv[2])
print("held", flush=True)
time.sleep(600)
"""


def elsewhere(heartbeat_at: float) -> SessionRow:
    return SessionRow(
        session_id="s1", agent_id="a1", agent_name="a", template_files=(), pid=1,
        started_at=heartbeat_at, host="another-machine", heartbeat_at=heartbeat_at,
        post_start_at=heartbeat_at,
    )  # fmt: skip


def test_a_heartbeat_missed_while_the_journal_was_away_does_not_count() -> None:
    assert LivenessClock(now=1100.0, alive_since=1098.0).age(1000.0) == 2.0
    assert LivenessClock(now=1100.0, alive_since=0.0).age(1000.0) == 100.0
    gone, why = earlier_run_gone(
        elsewhere(1000.0), here="here", now=1100.0, stale_after=60.0,
        require_stale_heartbeat=True, alive_since=1098.0,
    )  # fmt: skip
    assert not gone and "journal's return" in why
    gone, _ = earlier_run_gone(
        elsewhere(1000.0), here="here", now=1160.0, stale_after=60.0,
        require_stale_heartbeat=True, alive_since=1098.0,
    )  # fmt: skip
    assert gone  # 62 s since the journal was back, and no heartbeat: its supervisor is gone


def test_a_released_lock_proves_a_session_of_another_namespace_gone_without_its_heartbeat() -> None:
    row = elsewhere(1000.0)
    assert earlier_run_gone(
        row, here="here", now=1001.0, stale_after=60.0, require_stale_heartbeat=False,
    )[0] is False  # fmt: skip
    assert earlier_run_gone(
        row, here="here", now=1001.0, stale_after=60.0, require_stale_heartbeat=False,
        lock_released=True,
    )[0] is True  # fmt: skip
    # reconcile asks for a stale heartbeat whatever else it knows
    assert earlier_run_gone(
        row, here="here", now=1001.0, stale_after=60.0, require_stale_heartbeat=True,
        lock_released=True,
    )[0] is False  # fmt: skip


def test_a_lock_is_released_only_when_its_holder_is_dead(tmp_path: Path) -> None:
    folder = tmp_path / "live"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), "s1"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert supervisor_lock_released(folder, "s1") is False  # it lives
        assert supervisor_lock_released(folder, "s2") is False  # no file: nothing proven
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=120)
        assert supervisor_lock_released(folder, "s1") is True
        assert supervisor_lock_released(folder, "s1") is False  # proven once, then gone
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=120)


def test_a_lock_file_someone_else_could_plant_proves_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "live"
    lock = SessionLock(folder, "s1")
    lock.release_name()  # as at a session's end: the file goes, the lock stays held
    assert not lock.path.exists()
    # An unheld file of the right name, in a folder others may write: not ours to trust.
    lock.path.write_text("")
    folder.chmod(0o777)
    assert supervisor_lock_released(folder, "s1") is False
    folder.chmod(0o700)
    # A symbolic link in its place is never followed.
    target = tmp_path / "elsewhere.lock"
    target.write_text("")
    lock.path.unlink()
    os.symlink(target, lock.path)
    assert supervisor_lock_released(folder, "s1") is False
    lock.path.unlink()
    lock.path.write_text("")  # this user's own file in its private folder, unheld: proof
    assert supervisor_lock_released(folder, "s1") is True
