"""Disk stays bounded under a flood: the hook log rotates at its size bound (hooklog.py) and the
journal's row bound is applied as rows are written, not only at the hourly pass
(journal/retention.py). The log sits in a directory the agent's user owns, as `$HOME/agent.log`
does in the root + user deployment: rotation never follows a link planted there."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from otel_lifecycle_hooks.hooklog import HookLog, rotated_log_path
from otel_lifecycle_hooks.journal import ExecutionRow, Journal, open_journal
from otel_lifecycle_hooks.journal.retention import RetentionKeeper, parse_retention
from tests.security.conftest import HostileWorkspace, tool_start_flood, wire_line
from tests.supervisor.supervised import wait_until
from tests.support.postgres import PostgresServer, ensure_installed
from tests.support.target_server import TargetServer

NOBODY = 65534
FLOOD = 20_000
LOG_MAX_BYTES = 64 * 1024
LOG_KEEP = 2
MAX_ROWS = 500
EVERY_ROWS = 200


@pytest.fixture
def agent_dir() -> Iterator[Path]:
    """A directory the agent's user owns, outside pytest's root-only tmp_path."""
    root = Path(tempfile.mkdtemp(prefix="olh-disk-"))
    root.chmod(0o711)
    home = root / "home"
    home.mkdir(mode=0o755)
    if os.geteuid() == 0:
        os.chown(home, NOBODY, NOBODY)
    try:
        yield home
    finally:
        shutil.rmtree(root, ignore_errors=True)


def log_files(log: Path) -> list[Path]:
    return sorted(p for p in log.parent.iterdir() if p.name.startswith(log.name))


def test_a_flood_keeps_the_hook_log_and_the_journal_under_their_bounds(
    workspace: HostileWorkspace, target: TargetServer, agent_dir: Path
) -> None:
    log = agent_dir / "agent.log"
    template = workspace.template(
        # Every event is an execution (skipped: its condition never holds): a journal row and
        # a hook log line each; blocking, so that none is shed at its queue's bound.
        "  - name: each\n"
        "    on: [tool-start]\n"
        "    blocking: true\n"
        "    condition: TOOL_NAME == never\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{target.url("/each")}"\n'
        "  - name: done\n"
        "    on: [task-completed]\n"
        "    action:\n"
        "      type: http\n"
        f'      url: "{target.url("/done")}"\n'
    )
    flood = tool_start_flood(FLOOD)
    done = wire_line({"v": 1, "kind": "status", "status": "task_completed", "message": "end"})
    run = workspace.start(
        template,
        workspace.hostile_command(sends=[flood, done]),
        env={
            "LIFECYCLE_HOOKS_LOG": str(log),
            "OTEL_LIFECYCLE_HOOKS_LOG": str(log),
            "LIFECYCLE_HOOKS_LOG_MAX_BYTES": str(LOG_MAX_BYTES),
            "LIFECYCLE_HOOKS_LOG_KEEP": str(LOG_KEEP),
            "LIFECYCLE_HOOKS_JOURNAL_RETENTION": f"{MAX_ROWS}rows",
            "LIFECYCLE_HOOKS_JOURNAL_RETENTION_EVERY": str(EVERY_ROWS),
        },
    )
    wait_until(
        lambda: any(r.path == "/done" for r in list(target.requests)),
        timeout=300,
        what="the flood to be handled",
    )
    run.signal(signal.SIGTERM)
    run.wait(timeout=60)

    files = log_files(log)
    assert [f.name for f in files] == ["agent.log", "agent.log.1", "agent.log.2"], files
    sizes = [f.stat().st_size for f in files]
    # Each file at most the bound (a line is written whole, into a file with room for it).
    assert max(sizes) <= LOG_MAX_BYTES, sizes
    assert sum(sizes) <= (LOG_KEEP + 1) * LOG_MAX_BYTES
    with closing(sqlite3.connect(workspace.journal)) as db:
        rows = db.execute("SELECT count(*) FROM executions").fetchone()[0]
        skipped = db.execute("SELECT max(id) FROM executions").fetchone()[0]
    assert skipped >= FLOOD  # the flood was journaled, row by row...
    # ...and never kept past the bound by more than the rows between two passes, plus what
    # was written while the last pass ran (session-end's rows come after the last pass).
    assert rows <= MAX_ROWS + 2 * EVERY_ROWS, rows


AS_ROOT = pytest.mark.skipif(
    os.geteuid() != 0, reason="the agent's directory is another user's only when run as root"
)


@AS_ROOT
def test_rotation_never_follows_a_link_the_agent_planted(agent_dir: Path) -> None:
    log_path = agent_dir / "agent.log"
    victim = agent_dir.parent / "victim"
    victim.write_text("kept\n")
    # The agent's user plants links at every rotated name.
    for number in range(1, 4):
        rotated_log_path(log_path, number).symlink_to(victim)
    hook_log = HookLog(log_path, max_bytes=4096, keep=3)
    try:
        for n in range(400):
            hook_log.write(f"line {n} " + "x" * 40)
    finally:
        hook_log.close()
    assert victim.read_text() == "kept\n"
    for path in log_files(log_path):
        assert not path.is_symlink()
        assert path.stat().st_size <= 4096
    assert len(log_files(log_path)) == 4


@AS_ROOT
def test_a_link_or_a_hard_link_at_the_log_name_is_never_written(agent_dir: Path) -> None:
    victim = agent_dir.parent / "victim"
    victim.write_text("kept\n")
    (agent_dir / "agent.log").symlink_to(victim)
    os.link(victim, agent_dir / "second.log")
    for name in ("agent.log", "second.log"):
        hook_log = HookLog(agent_dir / name)
        hook_log.write("a line")
        hook_log.close()
        assert not hook_log.healthy
    assert victim.read_text() == "kept\n"


def test_a_log_in_a_directory_only_root_writes_may_be_a_device() -> None:
    """/dev is root's: an operator's `--hook-log /dev/stderr` (a link) or /dev/null is
    written as given, and never rotated."""
    for name in ("/dev/null", "/dev/stderr"):
        hook_log = HookLog(name, max_bytes=1)
        hook_log.write("a line")
        hook_log.write("another line")
        hook_log.close()
        assert hook_log.healthy, name


def test_a_log_whose_name_another_process_rotated_is_reopened_not_rotated_again(
    tmp_path: Path,
) -> None:
    """Two writers (the supervisor and a `hook` command) share the log: when one rotated, the
    other's next rotation opens the new file instead of shifting it away."""
    path = tmp_path / "agent.log"
    first, second = HookLog(path, max_bytes=4096, keep=5), HookLog(path, max_bytes=4096, keep=5)
    try:
        for n in range(300):
            (first if n % 2 else second).write(f"line {n:04d} " + "y" * 40)
    finally:
        first.close()
        second.close()
    files = log_files(path)
    assert all(f.stat().st_size <= 4096 for f in files)
    text = "".join(f.read_text() for f in reversed(files))  # .5 (oldest) ... agent.log
    assert text.count("\n") == 300  # nothing lost below the bound: 300 lines fit in 6 files


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_row_bound_holds_while_rows_are_written(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        journal = Journal(tmp_path / "j.sqlite3")
    else:
        server = request.getfixturevalue("disk_postgres_server")
        journal = open_journal(server.new_database())
    keeper = RetentionKeeper(journal, parse_retention("100rows"), every_rows=50)
    seen: list[int] = []
    try:
        now = time.time()
        for batch in range(40):
            for n in range(50):
                journal.record_execution(ExecutionRow("h", "tool-start", "success", now + n))
            assert getattr(journal, "flush", lambda _: True)(30)  # PostgreSQL writes behind
            keeper.written(50)
            # The pass this batch made due has run once `passes` moved on (hang guard only).
            wait_until(lambda b=batch: keeper.passes >= b + 2, what="the retention pass")
            seen.append(len(journal.executions()))
    finally:
        keeper.stop()
        keeper.join(10)
        journal.close()
    assert max(seen) <= 100, seen  # 2,000 written in all, never more than the bound kept


@pytest.fixture(scope="module")
def disk_postgres_server() -> Iterator[PostgresServer]:
    ensure_installed()
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.remove()
