"""The local trace file: where it goes, what a line holds, and reading it back."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from otel_lifecycle_hooks.telemetry.tracefile import (
    MAX_LINE_BYTES,
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


def write_session(path: Path) -> None:
    """A session span with an event and a failed hook span under it, one export each."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(TraceFileExporter(path)))
    tracer = provider.get_tracer("test", "1.2")
    with tracer.start_as_current_span("invoke_agent a", attributes={"tags": ("x", "y")}) as root:
        root.add_event("agent.lifecycle.pre_stop", {"agent.lifecycle.event": "pre-stop"})
        with tracer.start_as_current_span(
            "agent.lifecycle_hook notify", attributes={"agent.lifecycle_hook.attempts": 2}
        ) as child:
            child.set_status(Status(StatusCode.ERROR, "boom"))
    provider.shutdown()


def test_each_export_is_one_line_an_export_trace_service_request_in_otlp_json(
    tmp_path: Path,
) -> None:
    path = tmp_path / "deep" / "t.jsonl"
    write_session(path)

    lines = path.read_text().splitlines()
    assert len(lines) == 2  # a simple processor exports each span on its own
    hook_request, session_request = (json.loads(line) for line in lines)
    [resource_spans] = session_request["resourceSpans"]
    assert {"key": "service.name", "value": {"stringValue": "unknown_service:python"}} in (
        resource_spans["resource"]["attributes"]
    )
    [scope_spans] = resource_spans["scopeSpans"]
    assert scope_spans["scope"] == {"name": "test", "version": "1.2"}
    [session] = scope_spans["spans"]
    [hook] = hook_request["resourceSpans"][0]["scopeSpans"][0]["spans"]
    # Ids in hex (the OTLP JSON encoding's difference from protobuf's base64).
    assert re.fullmatch("[0-9a-f]{32}", session["traceId"])
    assert re.fullmatch("[0-9a-f]{16}", session["spanId"])
    assert hook["traceId"] == session["traceId"] and hook["parentSpanId"] == session["spanId"]
    assert "parentSpanId" not in session
    # Times and 64-bit integers as decimal strings, enums as integers.
    assert int(session["startTimeUnixNano"]) <= int(session["endTimeUnixNano"])
    assert (session["kind"], hook["kind"]) == (1, 1)  # SPAN_KIND_INTERNAL
    assert hook["status"] == {"code": 2, "message": "boom"}  # STATUS_CODE_ERROR
    assert session["status"] == {}  # unset: every field at its default is left out
    assert hook["name"] == "agent.lifecycle_hook notify"
    assert hook["attributes"] == [
        {"key": "agent.lifecycle_hook.attempts", "value": {"intValue": "2"}}
    ]
    tags = {"arrayValue": {"values": [{"stringValue": "x"}, {"stringValue": "y"}]}}
    assert session["attributes"] == [{"key": "tags", "value": tags}]
    [event] = session["events"]
    assert event["name"] == "agent.lifecycle.pre_stop"
    assert event["attributes"] == [
        {"key": "agent.lifecycle.event", "value": {"stringValue": "pre-stop"}}
    ]
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


def test_read_back_each_span_is_a_flat_record_with_ids_events_status_and_resource(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    write_session(path)

    hook, session = read_trace_file(path)
    assert hook["name"] == "agent.lifecycle_hook notify"
    assert hook["parent_span_id"] == session["span_id"]
    assert hook["trace_id"] == session["trace_id"] and len(session["trace_id"]) == 32
    assert session["parent_span_id"] is None
    assert hook["status"] == {"code": "ERROR", "message": "boom"}
    assert session["status"] == {"code": "UNSET", "message": ""}
    assert session["kind"] == "INTERNAL"
    assert session["attributes"] == {"tags": ["x", "y"]}
    assert hook["attributes"] == {"agent.lifecycle_hook.attempts": 2}
    (event,) = session["events"]
    assert event["name"] == "agent.lifecycle.pre_stop"
    assert event["attributes"] == {"agent.lifecycle.event": "pre-stop"}
    assert (
        session["start_time_unix_nano"] <= event["time_unix_nano"] <= session["end_time_unix_nano"]
    )
    assert session["resource"]["service.name"] == "unknown_service:python"
    assert session["scope"] == {"name": "test", "version": "1.2"}


def test_each_line_carries_the_resource_of_its_own_provider(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    exporter = TraceFileExporter(path)
    for service in ("first", "second", "first"):
        provider = TracerProvider(resource=Resource({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        provider.get_tracer("test").start_span("work").end()
    services = [
        json.loads(line)["resourceSpans"][0]["resource"]["attributes"]
        for line in path.read_text().splitlines()
    ]
    assert services == [
        [{"key": "service.name", "value": {"stringValue": service}}]
        for service in ("first", "second", "first")
    ]
    assert [span["resource"] for span in read_trace_file(path)] == [
        {"service.name": "first"}, {"service.name": "second"}, {"service.name": "first"}
    ]  # fmt: skip


def test_a_batch_is_split_over_lines_of_at_most_a_mebibyte(tmp_path: Path) -> None:
    """The collector's `otlp_json_file` receiver reads entries of up to 1 MiB by default."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for number in range(300):
        provider.get_tracer("t").start_span(f"s{number}", attributes={"pad": "x" * 8000}).end()
    path = tmp_path / "t.jsonl"
    TraceFileExporter(path).export(memory.get_finished_spans())  # one batch, about 2.4 MB

    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) > 2 and all(len(line) <= MAX_LINE_BYTES for line in lines)
    assert [span["name"] for span in read_trace_file(path)] == [f"s{n}" for n in range(300)]


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
    write_session(path)
    whole = path.read_bytes()
    path.write_bytes(whole + whole.splitlines(keepends=True)[0][:-40])
    assert [span["name"] for span in read_trace_file(path)] == [
        "agent.lifecycle_hook notify", "invoke_agent a"
    ]  # fmt: skip


def test_a_file_of_an_earlier_version_one_flat_span_a_line_is_still_read(
    tmp_path: Path,
) -> None:
    """A user who upgrades keeps the trace files of the version before, and a session file
    may hold both: `trace` reads each line in its own format."""
    path = tmp_path / "t.jsonl"
    old = {
        "trace_id": "5b8e0c1f" * 4, "span_id": "051f0000aaaa0001", "parent_span_id": None,
        "name": "agent.lifecycle_hook", "kind": "INTERNAL",
        "start_time_unix_nano": 1767000000000000000, "end_time_unix_nano": 1767000001000000000,
        "status": {"code": "OK", "message": ""}, "attributes": {"agent.lifecycle_hook.name": "h"},
        "events": [], "resource": {"service.name": "s"}, "scope": {"name": "x", "version": None},
    }  # fmt: skip
    path.write_text(json.dumps(old) + "\n" + '{"span_id": "02", "na\n')
    write_session(path)
    spans = read_trace_file(path)
    assert [span["name"] for span in spans] == [
        "agent.lifecycle_hook", "agent.lifecycle_hook notify", "invoke_agent a"
    ]  # fmt: skip
    assert spans[0] == old


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
