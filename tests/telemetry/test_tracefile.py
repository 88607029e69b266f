"""The local trace file: where it goes, what a line holds, and reading it back."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from otel_lifecycle_hooks.telemetry.tracefile import (
    TraceFileExporter,
    default_trace_dir,
    default_trace_path,
    newest_trace_file,
    read_trace_file,
)


def test_trace_dir_variable_then_xdg_state_home_then_home() -> None:
    assert default_trace_dir({"OTEL_LIFECYCLE_HOOKS_TRACE_DIR": "/d", "HOME": "/h"}) == Path("/d")
    assert default_trace_dir({"LIFECYCLE_HOOKS_TRACE_DIR": "/n", "HOME": "/h"}) == Path("/n")
    both = {"LIFECYCLE_HOOKS_TRACE_DIR": "/n", "OTEL_LIFECYCLE_HOOKS_TRACE_DIR": "/d"}
    assert default_trace_dir(both) == Path("/n")
    assert default_trace_dir({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == Path(
        "/s/otel-lifecycle-hooks/traces"
    )
    assert default_trace_dir({"HOME": "/h"}) == Path("/h/.local/state/otel-lifecycle-hooks/traces")


def test_trace_path_is_named_by_session_with_unsafe_characters_replaced() -> None:
    path = default_trace_path({"HOME": "/h"}, session_id="../a b/c")
    assert path.parent == Path("/h/.local/state/otel-lifecycle-hooks/traces")
    assert path.name == ".._a_b_c.jsonl"
    assert default_trace_path({"HOME": "/h"}).suffix == ".jsonl"


def test_each_span_is_one_json_line_with_ids_events_status_and_resource(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "t.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(TraceFileExporter(path)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent a", attributes={"tags": ("x", "y")}) as root:
        root.add_event("agent.lifecycle.pre_stop", {"agent.lifecycle.event": "pre-stop"})
        with tracer.start_as_current_span("agent.lifecycle_hook") as child:
            child.set_status(Status(StatusCode.ERROR, "boom"))
    provider.shutdown()

    lines = path.read_text().splitlines()
    assert len(lines) == 2
    hook, session = (json.loads(line) for line in lines)
    assert hook["parent_span_id"] == session["span_id"]
    assert hook["trace_id"] == session["trace_id"] and len(session["trace_id"]) == 32
    assert session["parent_span_id"] is None
    assert hook["status"] == {"code": "ERROR", "message": "boom"}
    assert session["kind"] == "INTERNAL"
    assert session["attributes"] == {"tags": ["x", "y"]}
    (event,) = session["events"]
    assert event["name"] == "agent.lifecycle.pre_stop"
    assert event["attributes"] == {"agent.lifecycle.event": "pre-stop"}
    assert (
        session["start_time_unix_nano"] <= event["time_unix_nano"] <= session["end_time_unix_nano"]
    )
    assert "service.name" in session["resource"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


def test_each_line_carries_the_resource_of_its_own_provider(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    exporter = TraceFileExporter(path)
    for service in ("first", "second", "first"):
        provider = TracerProvider(resource=Resource({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        provider.get_tracer("test").start_span("work").end()
    services = [
        json.loads(line)["resource"]["service.name"] for line in path.read_text().splitlines()
    ]
    assert services == ["first", "second", "first"]


def test_the_directory_is_made_again_when_it_was_removed_between_exports(tmp_path: Path) -> None:
    path = tmp_path / "traces" / "t.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(TraceFileExporter(path)))
    tracer = provider.get_tracer("test")
    tracer.start_span("before").end()
    path.unlink()
    path.parent.rmdir()
    tracer.start_span("after").end()
    assert [span["name"] for span in read_trace_file(path)] == ["after"]
    assert oct(path.parent.stat().st_mode & 0o777) == oct(0o700)


def test_a_write_failure_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    provider = TracerProvider()
    exporter = TraceFileExporter(blocker / "cannot" / "t.jsonl")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.get_tracer("t").start_span("x").end()  # must not raise
    provider.shutdown()
    assert not (blocker / "cannot").exists()


def test_reading_skips_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"span_id": "01", "name": "a"}\n{"span_id": "02", "na')
    assert [span["name"] for span in read_trace_file(path)] == ["a"]


def test_newest_trace_file_is_the_last_modified(tmp_path: Path) -> None:
    assert newest_trace_file(tmp_path) is None
    assert newest_trace_file(tmp_path / "missing") is None
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text("")
    new.write_text("")
    (tmp_path / "other.txt").write_text("")
    now = time.time()
    os.utime(old, (now - 100, now - 100))
    assert newest_trace_file(tmp_path) == new
