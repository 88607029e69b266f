"""The human-readable hook log: its lines, its safety, and how it fails."""

from __future__ import annotations

import datetime
import logging
import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from otel_lifecycle_hooks.hooklog import (
    HookLog,
    default_hook_log_path,
    format_execution,
    format_timestamp,
)

LOGGER = "otel_lifecycle_hooks.hooklog"
AT = datetime.datetime(2026, 11, 30, 10, 0, 0, tzinfo=datetime.UTC).timestamp() + 0.123


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_timestamps_are_utc_with_milliseconds():
    assert format_timestamp(AT) == "2026-11-30T10:00:00.123Z"
    assert format_timestamp(AT + 0.8776) == "2026-11-30T10:00:01.001Z"  # rounds, carries


def test_an_execution_line_reads_as_key_value_pairs(tmp_path: Path):
    hook_log = HookLog(tmp_path / "agent.log")

    hook_log.write_execution(
        "register-agent", "post-start", "success", 1, 0.0121, status_code=201, at=AT
    )

    assert lines_of(tmp_path / "agent.log") == [
        (
            "2026-11-30T10:00:00.123Z hook=register-agent event=post-start outcome=success"
            " attempts=1 duration=12ms status=201"
        )
    ]


def test_a_failure_line_quotes_values_with_spaces():
    line = format_execution(
        "cleanup",
        "session-end",
        "failed",
        1,
        0.5,
        exit_code=3,
        error_type="exit.3",
        message='exited with code 3 "oops"',
    )

    assert line == (
        "hook=cleanup event=session-end outcome=failed attempts=1 duration=500ms exit_code=3"
        ' error=exit.3 message="exited with code 3 \\"oops\\""'
    )


def test_script_output_lines_are_prefixed_with_hook_and_stream(tmp_path: Path):
    hook_log = HookLog(tmp_path / "agent.log")

    hook_log.script_output("cleanup-credentials", "stdout", "revoked 2 tokens", at=AT)
    hook_log.script_output("cleanup-credentials", "stderr", "warning: slow", at=AT)

    assert lines_of(tmp_path / "agent.log") == [
        "2026-11-30T10:00:00.123Z [cleanup-credentials stdout] revoked 2 tokens",
        "2026-11-30T10:00:00.123Z [cleanup-credentials stderr] warning: slow",
    ]


def test_no_value_can_forge_a_line_or_reach_the_terminal(tmp_path: Path):
    hook_log = HookLog(tmp_path / "agent.log")

    hook_log.script_output(
        "h", "stdout", "ok\n2026-01-01T00:00:00.000Z hook=fake outcome=success\x1b[2J", at=AT
    )

    (line,) = lines_of(tmp_path / "agent.log")
    assert "\\n2026-01-01" in line and "\\x1b[2J" in line


def test_every_control_character_alone_in_a_line_is_escaped(tmp_path: Path):
    controls = [chr(code) for code in (*range(0x20), 0x7F) if code != 0x09]
    hook_log = HookLog(tmp_path / "agent.log")

    for char in controls:
        hook_log.script_output("h", "stdout", f"a{char}b", at=AT)

    lines = lines_of(tmp_path / "agent.log")
    assert len(lines) == len(controls)
    for char, line in zip(controls, lines, strict=True):
        assert char not in line and line.endswith("b") and "\\" in line, repr(char)


def test_tabs_and_other_languages_are_written_as_they_are(tmp_path: Path):
    hook_log = HookLog(tmp_path / "agent.log")

    hook_log.script_output("h", "stdout", "état\tüber 完了", at=AT)

    assert lines_of(tmp_path / "agent.log") == [
        "2026-11-30T10:00:00.123Z [h stdout] état\tüber 完了"
    ]


def test_the_redactor_sees_every_line_before_it_is_written(tmp_path: Path):
    hook_log = HookLog(
        tmp_path / "agent.log", redact=lambda line: line.replace("s3cret", "[REDACTED]")
    )

    hook_log.script_output("h", "stdout", "token=s3cret", at=AT)
    hook_log.write_execution("h", "post-start", "failed", 1, 0.1, message="bad token s3cret", at=AT)

    text = (tmp_path / "agent.log").read_text()
    assert "s3cret" not in text and text.count("[REDACTED]") == 2


def test_a_redactor_that_fails_means_the_line_is_dropped_not_leaked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    def broken(line: str) -> str:
        raise ValueError(f"cannot handle {line}")

    hook_log = HookLog(tmp_path / "agent.log", redact=broken)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        hook_log.script_output("h", "stdout", "token=s3cret")

    assert (
        not (tmp_path / "agent.log").exists()
        or "s3cret" not in (tmp_path / "agent.log").read_text()
    )
    assert "s3cret" not in caplog.text
    assert not hook_log.healthy


def test_lines_from_many_threads_arrive_whole(tmp_path: Path):
    hook_log = HookLog(tmp_path / "agent.log")
    threads_count, per_thread = 8, 200

    def write(worker: int) -> None:
        for index in range(per_thread):
            hook_log.script_output(f"hook-{worker}", "stdout", f"line {index} " + "x" * 500)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    hook_log.close()

    lines = lines_of(tmp_path / "agent.log")
    assert len(lines) == threads_count * per_thread
    pattern = re.compile(r"^\S+Z \[hook-\d stdout\] line \d+ x{500}$")
    assert all(pattern.match(line) for line in lines)


def test_appends_to_an_existing_log_and_creates_missing_directories(tmp_path: Path):
    path = tmp_path / "logs" / "agent.log"
    HookLog(path).write("first", at=AT)

    second = HookLog(path)
    second.write("second", at=AT)

    assert [line.split(" ", 1)[1] for line in lines_of(path)] == ["first", "second"]


def test_a_log_that_cannot_be_written_is_reported_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    hook_log = HookLog(blocker / "agent.log")

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(5):
            hook_log.write_execution("h", "post-start", "success", 1, 0.01)

    assert not hook_log.healthy
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1


def test_record_execution_reads_the_engines_record(tmp_path: Path):
    hook_log = HookLog(tmp_path / "agent.log")
    execution = SimpleNamespace(
        hook=SimpleNamespace(name="notify"),
        event=SimpleNamespace(name="task-completed"),
        outcome="timeout",
        attempts=4,
        duration=12.0,
        status_code=None,
        exit_code=None,
        error_type="timeout",
        message="",
    )

    hook_log.record_execution(execution)

    (line,) = lines_of(tmp_path / "agent.log")
    assert line.endswith(
        " hook=notify event=task-completed outcome=timeout attempts=4 duration=12000ms"
        " error=timeout"
    )


def test_default_path_honours_the_override_then_home():
    assert default_hook_log_path(
        {"OTEL_LIFECYCLE_HOOKS_LOG": "/x/hooks.log", "HOME": "/h"}
    ) == Path("/x/hooks.log")
    assert default_hook_log_path({"HOME": "/home/agent"}) == Path("/home/agent/agent.log")


def test_the_tmp_home_fixture_feeds_the_default_path(tmp_home: Path):
    import os

    assert default_hook_log_path(os.environ) == tmp_home / "agent.log"


def test_the_hook_commands_own_lines_carry_milliseconds_like_the_supervisors(tmp_path: Path):
    """`hook` writes its refusals to the same log as the supervisor: the same timestamp form,
    so that the lines of both sort and read alike."""
    import os
    import subprocess
    import sys

    log_path = tmp_path / "agent.log"
    clean = {k: v for k, v in os.environ.items() if "LIFECYCLE_HOOKS_" not in k}
    env = {**clean, "HOME": str(tmp_path), "LIFECYCLE_HOOKS_LOG": str(log_path)}
    subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "claude"],
        input=b'{"hook_event_name": "SessionStart", "session_id": "s", "source": "startup"}',
        capture_output=True,
        env=env,
        check=True,
        timeout=120,
    )
    [line] = lines_of(log_path)
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[hook\] ", line), line


def test_diagnostics_are_hook_log_lines_and_an_exception_only_by_its_type(tmp_path: Path) -> None:
    from otel_lifecycle_hooks.hooklog import HookLog, diagnostics_to

    shown: list[tuple[str, bool]] = []
    path = tmp_path / "agent.log"
    logger = logging.getLogger("otel_lifecycle_hooks.engine")
    with diagnostics_to(HookLog(path), lambda text, is_error: shown.append((text, is_error))):
        logger.warning("hook %s: unresolved variables %s rendered empty", "notify", "REGION")
        try:
            raise RuntimeError("token sk-live-secret refused")
        except RuntimeError:
            logger.exception("hook notify worker failed")
        logger.info("not a diagnostic")
    logger.warning("after the block: not routed")
    lines = [line.split(" ", 1)[1] for line in path.read_text().splitlines()]
    assert lines == [
        "warning: hook notify: unresolved variables REGION rendered empty",
        "error: hook notify worker failed (RuntimeError)",
    ]
    assert shown == [
        ("hook notify: unresolved variables REGION rendered empty", False),
        ("hook notify worker failed (RuntimeError)", True),
    ]
