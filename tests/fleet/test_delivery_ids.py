"""Delivery ids: `X-Scion-Hook-ID: ${AGENT_ID}:${HOOK_NAME}:${EVENT}:${TIMESTAMP}` is unique to
the event (no two events of a session share a moment) and the same on every retry, replay and
recovery of that delivery, a supervisor that resumes after being taken for dead included.

A receiver deduplicates on it (docs/fleet.md, "Delivery ids"): two events sharing an id would
drop a real event; one delivery under two ids would deregister twice."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.journal.rows import unjournaled_moments
from otel_lifecycle_hooks.variables import format_unix_timestamp
from tests.fleet.fleet import deliveries, fleet_template, hook_ids, query, tool_agent
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.target_server import Reply, TargetServer

BURST = 400
# `${TIMESTAMP}`: RFC 3339 in UTC, always to the microsecond.
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    space = Workspace(tmp_path)
    yield space
    space.cleanup()


def timestamps(ids: list[str]) -> list[str]:
    return [hook_id.split(":", 3)[3] for hook_id in ids]


def test_four_hundred_events_in_a_burst_carry_four_hundred_distinct_ids(
    workspace: Workspace,
) -> None:
    """400 tool-start events sent over the supervisor's socket as fast as the agent can: each
    delivery of the (non-blocking) tool hook has an id of its own."""
    with TargetServer() as receiver:
        template = fleet_template(workspace, receiver, tools=True)
        plan = [{"count": BURST, "rate": 100_000}]
        done = workspace.root / "done"
        run = workspace.start(template, tool_agent(workspace, 0, phases=plan, linger=str(done)))
        # Each event's delivery, before the agent ends (its end leaves the queue a grace period).
        wait_until(lambda: len(deliveries(receiver, "/tool")) >= BURST, 120, "the deliveries")
        done.touch()
        assert run.wait(timeout=60) == 0, run.stderr
        (register,) = deliveries(receiver, "/register")
        session = json.loads(register.body)["session"]
        ids = hook_ids(receiver, "/tool", session)
    assert len(ids) == BURST, run.stderr  # every event delivered ...
    assert len(set(ids)) == BURST  # ... each under an id of its own
    assert all(TIMESTAMP.fullmatch(stamp) for stamp in timestamps(ids))
    # The journal keeps each delivery's id, as replay and history read it.
    keys = [
        row["idempotency_key"]
        for row in _journal_rows(workspace.journal, "SELECT idempotency_key FROM executions")
        if row["idempotency_key"].split(":")[1] == "tool"
    ]
    assert sorted(keys) == sorted(ids)


def test_events_sent_through_hook_processes_at_ten_a_second_carry_distinct_ids(
    workspace: Workspace,
) -> None:
    """Claude Code's PreToolUse and PostToolUse through real `otel-lifecycle-hooks hook`
    processes, one every 100 ms, as a harness calls it: each event of a hook, the activity
    changes they make included, has an id of its own."""
    count = 40
    hook = (
        "  - name: watch\n    on: [tool-start, tool-end, activity-change]\n"
        '    blocking: false\n    action:\n      type: http\n      url: "{url}"\n'
        '      body: \'{{"event": "${{EVENT}}"}}\'\n'
        # A gate that answers slowly: the events sent meanwhile wait in the socket, and are
        # taken one right after the other when it answers.
        "  - name: gate\n    on: [tool-start]\n    blocking: true\n    timeout: 30s\n"
        '    action:\n      type: http\n      url: "{gate}"\n'
    )
    with TargetServer() as receiver:
        receiver.on("/gate", *[Reply(delay=0.5)] * count)
        template = workspace.template(
            hook.format(url=receiver.url("/watch"), gate=receiver.url("/gate"))
        )
        agent = workspace.root / "hooks_agent.py"
        agent.write_text(HOOKS_AGENT)
        done = workspace.root / "done"
        run = workspace.start(template, [sys.executable, str(agent), str(count), str(done)])
        wait_until(done.exists, 120, "the agent's hook calls")
        # Every tool event is delivered; the activity changes they made with them.
        wait_until(
            lambda: sum(json.loads(r.body)["event"] != "activity-change"
                        for r in deliveries(receiver, "/watch")) >= count,
            60, "the deliveries",
        )  # fmt: skip
        run.signal(signal.SIGTERM)
        run.wait(timeout=60)
        ids = [r.headers["x-scion-hook-id"] for r in deliveries(receiver, "/watch")]
    assert len(ids) > count  # the activity changes too
    assert len(set(ids)) == len(ids), sorted(ids)


# Sends `count` Claude Code payloads through `hook`, alternately PreToolUse and PostToolUse,
# one every 100 ms; then creates `done` and waits to be stopped.
HOOKS_AGENT = r"""
import json, os, signal, subprocess, sys, time
count, done = int(sys.argv[1]), sys.argv[2]
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
due = time.monotonic()
for index in range(count):
    name = "PreToolUse" if index % 2 == 0 else "PostToolUse"
    payload = {"session_id": "s", "transcript_path": "", "cwd": os.getcwd(),
               "hook_event_name": name, "tool_name": "Bash", "tool_input": {},
               "tool_use_id": f"call-{index // 2}", "tool_response": {}}
    subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "claude"],
        input=json.dumps(payload).encode(), check=True,
    )
    due += 0.1
    time.sleep(max(0.0, due - time.monotonic()))
open(done, "w").close()
time.sleep(120)
"""


def _journal_rows(path: Path, sql: str) -> list[dict[str, str]]:
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute(sql)]


@pytest.fixture
def pg_workspace(tmp_path: Path, postgres_url: str) -> Iterator[Workspace]:
    space = Workspace(tmp_path)
    space.env["OTEL_LIFECYCLE_HOOKS_JOURNAL"] = postgres_url
    space.env["OTEL_LIFECYCLE_HOOKS_HEARTBEAT"] = "200ms"
    yield space
    space.cleanup()


# `reconcile` as a pod elsewhere runs it: in a pid namespace of its own, where the frozen
# supervisor's pid means nothing, so only its heartbeat's age speaks for it.
ELSEWHERE = ["unshare", "--pid", "--fork", "--mount-proc"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a pid namespace of its own needs root")
def test_a_supervisor_resumed_after_being_recovered_sends_its_pre_stop_under_the_claimed_id(
    pg_workspace: Workspace, postgres_url: str
) -> None:
    """A frozen node: the supervisor stops (SIGSTOP) for longer than --stale-after, a
    reconciler elsewhere claims its session and sends the deregistration and session-end at
    the moments its claim fixed; the supervisor resumes (SIGCONT) and stops its agent. Every
    deregistration and session-end the receiver gets carries the one id the claim fixed."""
    workspace = pg_workspace
    with TargetServer() as receiver:
        template = fleet_template(workspace, receiver)
        run = workspace.start(template, workspace.agent_command(on_term=0))
        wait_until(lambda: deliveries(receiver, "/register"), what="the registration")
        session = json.loads(deliveries(receiver, "/register")[0].body)["session"]
        run.signal(signal.SIGSTOP)
        try:
            time.sleep(1.5)  # its heartbeat grows older than --stale-after
            reconcile = subprocess.run(
                [*ELSEWHERE, sys.executable, "-m", "otel_lifecycle_hooks", "reconcile",
                 "--template", str(template), "--stale-after", "1s"],
                env=workspace.env, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert reconcile.returncode == 0, reconcile.stderr
            assert f"recovered: session {session}" in reconcile.stdout, reconcile.stdout
        finally:
            run.signal(signal.SIGCONT)
        run.signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 0, run.stderr
        (row,) = query(postgres_url, "SELECT * FROM sessions WHERE session_id = %s", session)
        agent_id = json.loads(row["metadata"])["AGENT_ID"]
        deregistrations = hook_ids(receiver, "/deregister", session)
        farewells = hook_ids(receiver, "/farewell", session)
    # The claim fixed them from the row, as a supervisor unable to journal its own would.
    fixed = unjournaled_moments(row["post_start_at"], None, 0.0)
    assert (row["pre_stop_at"], row["session_end_at"]) == fixed
    claimed = f"{agent_id}:deregister:pre-stop:{format_unix_timestamp(row['pre_stop_at'])}"
    assert deregistrations and set(deregistrations) == {claimed}, run.stderr
    claimed_end = f"{agent_id}:farewell:session-end:{format_unix_timestamp(row['session_end_at'])}"
    assert farewells and set(farewells) == {claimed_end}, run.stderr


def _fill(directory: Path) -> Path:
    """Fill the filesystem of `directory` to its last byte; the filler file's path."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


@pytest.fixture
def tiny_filesystem() -> Iterator[Path]:
    """A 2 MiB tmpfs of its own, for a journal whose disk fills."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = Path(tempfile.mkdtemp(prefix="tiny-fs-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(where)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        where.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        where.rmdir()


def test_a_deregistration_recovered_after_the_journals_disk_filled_keeps_its_id(
    workspace: Workspace, tiny_filesystem: Path
) -> None:
    """The SQLite journal's disk fills in the middle of a session (its tool deliveries can no
    longer be journaled); the agent is stopped and its supervisor deregisters it. Once space
    is back, `reconcile` finds the session unfinished and sends what it owes: under the ids
    the supervisor used, never new ones."""
    journal = tiny_filesystem / "journal.sqlite3"
    workspace.env["OTEL_LIFECYCLE_HOOKS_JOURNAL"] = str(journal)
    workspace.env["OTEL_LIFECYCLE_HOOKS_HEARTBEAT"] = "200ms"
    full = workspace.root / "full"
    with TargetServer() as receiver:
        template = fleet_template(workspace, receiver, tools=True)
        plan = [{"count": 5, "rate": 50}, {"count": 20, "rate": 50, "wait_for": str(full)}]
        agent = tool_agent(workspace, 0, phases=plan, linger=str(workspace.root / "never"))
        run = workspace.start(template, agent)
        wait_until(lambda: len(deliveries(receiver, "/tool")) == 5, what="phase one")
        filler = _fill(tiny_filesystem)
        full.touch()
        wait_until(lambda: len(deliveries(receiver, "/tool")) == 25, what="phase two")
        run.signal(signal.SIGTERM)
        run.wait(timeout=60)
        session = json.loads(deliveries(receiver, "/register")[0].body)["session"]
        sent = hook_ids(receiver, "/deregister", session)
        assert len(sent) == 1, run.stderr
        filler.unlink()
        time.sleep(1.5)  # the session's last heartbeat grows older than --stale-after
        reconcile = subprocess.run(
            [sys.executable, "-m", "otel_lifecycle_hooks", "reconcile",
             "--template", str(template), "--stale-after", "1s"],
            env=workspace.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert reconcile.returncode == 0, reconcile.stderr
        deregistrations = hook_ids(receiver, "/deregister", session)
        farewells = hook_ids(receiver, "/farewell", session)
    assert set(deregistrations) == set(sent), (run.stderr, reconcile.stdout)
    assert len(set(farewells)) == 1, (run.stderr, reconcile.stdout)
