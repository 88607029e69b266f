"""The local trace file is rotated at a size bound, so that a busy session cannot fill the disk,
and `trace` still reads everything that is kept."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_lifecycle_hooks.telemetry.tracefile import (
    DEFAULT_KEEP,
    DEFAULT_MAX_BYTES,
    TraceFileExporter,
    newest_trace_file,
    read_trace_file,
    rotated_path,
    rotation_limits,
    spans_in_file,
)

# Each span carries about 1 KB of attributes, as a hook span with a request body might.
PADDING = "x" * 1000


def write_spans(exporter: Any, count: int) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for number in range(count):
        with tracer.start_as_current_span(f"span-{number}", attributes={"pad": PADDING}):
            pass
    provider.shutdown()


def test_the_file_rotates_before_it_passes_the_bound_and_only_keep_files_stay(
    tmp_path: Path,
) -> None:
    path = tmp_path / "session.jsonl"
    exporter = TraceFileExporter(path, max_bytes=64 * 1024, keep=2)

    write_spans(exporter, 400)  # about 400 KB: six times the bound

    files = [path, rotated_path(path, 1), rotated_path(path, 2)]
    assert all(f.exists() for f in files)
    assert not rotated_path(path, 3).exists()
    assert all(f.stat().st_size <= 64 * 1024 for f in files)
    # The newest spans are kept, in order, across the rotated files and the current one.
    names = [span["name"] for span in read_trace_file(path)]
    assert names == [f"span-{n}" for n in range(400 - len(names), 400)]
    assert len(names) > 2 * 50  # each full file holds about 60 spans


def test_the_newest_trace_file_is_the_current_one_not_a_rotated_one(tmp_path: Path) -> None:
    path = tmp_path / "traces" / "sess-1.jsonl"
    write_spans(TraceFileExporter(path, max_bytes=64 * 1024, keep=3), 150)
    assert rotated_path(path, 1).exists()

    # Rotated files keep the session's name and are not taken for other sessions.
    assert newest_trace_file(path.parent) == path


def test_trace_command_shows_spans_from_rotated_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sess.jsonl"
    write_spans(TraceFileExporter(path, max_bytes=64 * 1024, keep=3), 100)
    capsys.readouterr()
    from otel_lifecycle_hooks.cli.main import main

    assert main(["trace", "--json", str(path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    names = {span["name"] for span in (shown if isinstance(shown, list) else shown["spans"])}
    assert "span-0" in names and "span-99" in names  # span-0 lives in a rotated file
    assert "span-0" not in {s["name"] for s in spans_in_file(path)}


def test_keep_zero_keeps_only_the_current_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_spans(TraceFileExporter(path, max_bytes=64 * 1024, keep=0), 200)
    assert not rotated_path(path, 1).exists()
    assert 0 < path.stat().st_size <= 64 * 1024


def test_the_bound_and_the_count_come_from_the_environment_with_stated_defaults(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert rotation_limits({}) == (DEFAULT_MAX_BYTES, DEFAULT_KEEP) == (20 * 1024 * 1024, 3)
    env = {
        "LIFECYCLE_HOOKS_TRACE_FILE_MAX_BYTES": "1048576",
        "LIFECYCLE_HOOKS_TRACE_FILE_KEEP": "7",
    }
    assert rotation_limits(env) == (1048576, 7)
    with caplog.at_level(logging.WARNING):
        bad = {"LIFECYCLE_HOOKS_TRACE_FILE_MAX_BYTES": "20MB"}
        assert rotation_limits(bad) == (DEFAULT_MAX_BYTES, DEFAULT_KEEP)
    assert "LIFECYCLE_HOOKS_TRACE_FILE_MAX_BYTES='20MB': write a whole number" in caplog.text


def test_the_older_otel_prefixed_names_are_still_read_when_the_new_ones_are_unset() -> None:
    older = {
        "OTEL_LIFECYCLE_HOOKS_TRACE_FILE_MAX_BYTES": "1048576",
        "OTEL_LIFECYCLE_HOOKS_TRACE_FILE_KEEP": "7",
    }
    assert rotation_limits(older) == (1048576, 7)
    both = {**older, "LIFECYCLE_HOOKS_TRACE_FILE_KEEP": "2"}
    assert rotation_limits(both) == (1048576, 2)


def test_the_exporter_reads_its_limits_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIFECYCLE_HOOKS_TRACE_FILE_MAX_BYTES", str(64 * 1024))
    monkeypatch.setenv("LIFECYCLE_HOOKS_TRACE_FILE_KEEP", "1")
    path = tmp_path / "t.jsonl"
    write_spans(TraceFileExporter(path), 300)
    assert rotated_path(path, 1).exists() and not rotated_path(path, 2).exists()
    assert path.stat().st_size <= 64 * 1024


def test_a_session_under_run_keeps_its_trace_file_under_the_bound(tmp_path: Path) -> None:
    from tests.supervisor.supervised import Workspace

    ws = Workspace(tmp_path)
    try:
        # A script hook on every tool-start: each event adds spans to the session's file.
        template = ws.template(
            "  - name: note\n"
            "    on: [tool-start]\n"
            "    action:\n"
            "      type: script\n"
            f"      command: {json.dumps([sys.executable, '-c', 'pass'])}\n"
            "    blocking: true\n"
        )
        payloads = [
            {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"pad": PADDING}}
        ] * 120
        run = ws.start(
            template,
            ws.agent_command(claude=payloads, exit=0),
            env={
                "OTEL_LIFECYCLE_HOOKS_TRACE_FILE_MAX_BYTES": str(64 * 1024),
                "OTEL_LIFECYCLE_HOOKS_TRACE_FILE_KEEP": "2",
            },
        )
        assert run.wait(120) == 0, run.stderr
    finally:
        ws.cleanup()
    [current] = list(ws.trace_dir.glob("*.jsonl"))
    rotated = sorted(ws.trace_dir.glob("*.jsonl.*"))
    assert [p.name for p in rotated][:1] == [current.name + ".1"]
    assert not (ws.trace_dir / (current.name + ".3")).exists()
    assert all(p.stat().st_size <= 64 * 1024 for p in [current, *rotated])
    # The session span ends last: it is in the current file, read with the rest by `trace`.
    names = [span["name"] for span in read_trace_file(current)]
    assert names[-1].startswith("invoke_agent")


def test_one_batch_larger_than_the_bound_is_split_between_files_at_a_line(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    write_spans(memory, 200)
    path = tmp_path / "t.jsonl"
    exporter = TraceFileExporter(path, max_bytes=64 * 1024, keep=5)

    exporter.export(memory.get_finished_spans())  # one batch, about 200 KB

    files = [path, *(rotated_path(path, n) for n in (1, 2, 3))]
    assert all(0 < f.stat().st_size <= 64 * 1024 for f in files)
    assert [s["name"] for s in read_trace_file(path)] == [f"span-{n}" for n in range(200)]
