"""`hook` reads what the harness (the agent's side) hands it with bounds: stdin within a
deadline and a size bound, a transcript path only when it is a regular file, and invalid
Unicode replaced, so that the event is never lost and the harness never waits on us."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.cli import hook as hook_command
from otel_lifecycle_hooks.supervisor.admission import Admission, Admitted
from otel_lifecycle_hooks.supervisor.server import EventServer
from tests.supervisor.supervised import wait_until


class Inbox:
    def __init__(self) -> None:
        self.admission = Admission()
        self.admitted: list[Admitted] = []

    def deliver(self, message: dict[str, Any]) -> None:
        admitted = self.admission.admit(message)
        if admitted is not None:
            self.admitted.append(admitted)

    def events(self) -> list[tuple[str, dict[str, str]]]:
        return [(a.event.event, dict(a.event.fields)) for a in self.admitted if a.event]


@pytest.fixture
def inbox(tmp_path: Path) -> Iterator[tuple[Inbox, dict[str, str]]]:
    collected = Inbox()
    server = EventServer(collected.deliver, directory=str(tmp_path)).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        OTEL_LIFECYCLE_HOOKS_SOCKET=server.path,
        OTEL_LIFECYCLE_HOOKS_LOG=str(tmp_path / "agent.log"),
        HOME=str(tmp_path),
    )
    try:
        yield collected, env
    finally:
        server.close()


def hook(env: dict[str, str], stdin: Any, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "claude", *args],
        stdin=stdin,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_a_stdin_left_open_after_the_payload_does_not_hold_up_the_hook(
    inbox: tuple[Inbox, dict[str, str]],
) -> None:
    collected, env = inbox
    read_end, write_end = os.pipe()
    try:
        process = hook(env, read_end)
        os.write(
            write_end, json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash"}).encode()
        )
        assert process.wait(timeout=120) == 0  # returned while stdin is still open
        # The socket has no reply: the hook may end before the server has read its line.
        wait_until(collected.events, what="the delivered event")
        assert collected.events() == [("tool-start", {"TOOL_NAME": "Bash"})]
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_whole_payload_ends_the_read_long_before_the_stdin_deadline(
    inbox: tuple[Inbox, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same in-process with the deadline at an hour: only a read that stops at the end of
    the JSON object returns within the hang guard, however slow the machine."""
    collected, env = inbox
    monkeypatch.setattr(hook_command, "STDIN_DEADLINE", 3600.0)
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb", buffering=0) as stdin:
        try:
            os.write(
                write_end,
                json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash"}).encode(),
            )
            runner = threading.Thread(
                target=hook_command.main,
                args=(["--dialect", "claude"],),
                kwargs={"stdin": stdin, "environ": env},
                daemon=True,
            )
            runner.start()
            runner.join(timeout=120)  # a hang guard: the deadline is an hour
            assert not runner.is_alive(), "the hook waited for the end of stdin"
            wait_until(collected.events, what="the delivered event")
            assert collected.events() == [("tool-start", {"TOOL_NAME": "Bash"})]
        finally:
            os.close(write_end)


def test_a_stdin_that_stays_open_and_silent_ends_at_the_deadline_with_one_log_line(
    inbox: tuple[Inbox, dict[str, str]],
    tmp_path: Path,
) -> None:
    collected, env = inbox
    read_end, write_end = os.pipe()
    try:
        process = hook(env, read_end)
        os.write(write_end, b'{"hook_event_name": ')  # and never the rest
        assert process.wait(timeout=120) == 0
        assert collected.events() == []
        assert "not valid JSON" in (tmp_path / "agent.log").read_text()
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_stdin_that_never_ends_is_cut_at_the_size_bound(
    inbox: tuple[Inbox, dict[str, str]],
    tmp_path: Path,
) -> None:
    _, env = inbox
    with open("/dev/zero", "rb") as zeros:
        process = hook(env, zeros)
        assert process.wait(timeout=120) == 0
    assert "payload larger than" in (tmp_path / "agent.log").read_text()


def test_a_fifo_given_as_the_transcript_is_not_read(
    inbox: tuple[Inbox, dict[str, str]],
    tmp_path: Path,
) -> None:
    collected, env = inbox
    fifo = tmp_path / "transcript.fifo"
    os.mkfifo(fifo)
    payload = {"hook_event_name": "Stop", "transcript_path": str(fifo)}
    process = hook(env, subprocess.PIPE)
    process.communicate(json.dumps(payload).encode(), timeout=30)
    assert process.returncode == 0
    wait_until(collected.events, what="the agent-end event")
    assert collected.events() == [("agent-end", {"TRANSCRIPT_PATH": str(fifo)})]


def test_a_lone_surrogate_or_a_bad_byte_in_the_payload_does_not_lose_the_event(
    inbox: tuple[Inbox, dict[str, str]],
) -> None:
    collected, env = inbox
    for stdin in (
        b'{"hook_event_name": "PreToolUse", "tool_name": "lone\\ud800"}',
        b'{"hook_event_name": "PreToolUse", "tool_name": "bad\xff"}',
    ):
        process = hook(env, subprocess.PIPE)
        process.communicate(stdin, timeout=120)
        assert process.returncode == 0
    wait_until(lambda: len(collected.events()) == 2, what="both events")
    assert collected.events() == [
        ("tool-start", {"TOOL_NAME": "lone\ufffd"}),
        ("tool-start", {"TOOL_NAME": "bad\ufffd"}),
    ]


def test_fields_an_event_may_not_set_are_not_sent_and_are_logged(
    inbox: tuple[Inbox, dict[str, str]], tmp_path: Path
) -> None:
    collected, env = inbox
    payload = {"hook_event_name": "tool-start", "tool_name": "Bash", "prompt": "x"}
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "core-agent"],
        stdin=subprocess.PIPE,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    process.communicate(json.dumps(payload).encode(), timeout=30)
    wait_until(collected.events, what="the event")
    assert collected.events() == [("tool-start", {"TOOL_NAME": "Bash"})]
    assert "tool-start may not set PROMPT: not kept" in (tmp_path / "agent.log").read_text()


def test_a_status_message_that_is_not_valid_unicode_still_arrives(
    inbox: tuple[Inbox, dict[str, str]],
) -> None:
    collected, env = inbox
    process = subprocess.run(
        [
            sys.executable.encode(),
            b"-m",
            b"otel_lifecycle_hooks",
            b"status",
            b"blocked",
            b"waiting on \xff",
        ],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert process.returncode == 0, process.stderr
    wait_until(lambda: collected.admitted, what="the status signal")
    [signal] = collected.admitted
    assert (signal.status, signal.message) == ("blocked", "waiting on \ufffd")
