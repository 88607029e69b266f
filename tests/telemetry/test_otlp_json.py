"""The trace file's OTLP JSON encoding: the same message the OTel SDK's own encoder builds
(`encode_spans`), in the OTLP specification's JSON form (hex ids), as protobuf's JSON mapping
parses it; and read back without trusting a single field."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from otel_lifecycle_hooks.telemetry import otlp_json
from otel_lifecycle_hooks.telemetry.tracefile import read_trace_file

ATTRIBUTES: dict[str, Any] = {
    "text": 'héllo \u2028 "quoted"',
    "empty.text": "",
    "yes": True,
    "no": False,
    "count": 3,
    "zero": 0,
    "negative": -(2**63),
    "largest": 2**63 - 1,
    "ratio": 0.25,
    "whole.float": 2.0,
    "infinite": math.inf,
    "minus.infinite": -math.inf,
    "words": ("a", "b"),
    "numbers": (1, 2, 3),
    "flags": (True, False),
    "floats": (1.5, -0.5),
    "nothing": (),
}


def varied_spans() -> list[ReadableSpan]:
    """Spans with every attribute type, events, links (one to a remote span with a trace
    state), a remote parent, every kind and status, two scopes and two resources."""
    memory = InMemorySpanExporter()
    spans: list[ReadableSpan] = []
    for service in ("first", "second"):
        provider = TracerProvider(
            resource=Resource({"service.name": service, "tags": ("a", "b")}, "https://schema/1")
        )
        provider.add_span_processor(SimpleSpanProcessor(memory))
        tracer = provider.get_tracer("otel_lifecycle_hooks", "0.1.0", "https://schema/2")
        other = provider.get_tracer("other", attributes={"scope.attribute": 1})
        remote = SpanContext(
            0x5B8E0C1F5B8E0C1F5B8E0C1F5B8E0C1F,
            0x051F051F051F051F,
            is_remote=True,
            trace_flags=TraceFlags(1),
            trace_state=TraceState([("vendor", "value"), ("other", "x")]),
        )
        with tracer.start_as_current_span(
            "invoke_agent reviewer",
            context=set_span_in_context(NonRecordingSpan(remote)),
            attributes=ATTRIBUTES,
            links=[Link(remote, {"link.attribute": "x"}), Link(remote)],
        ) as session:
            session.add_event("agent.lifecycle.post_start", {"agent.lifecycle.event": "post-start"})
            session.add_event("bare")
            for kind in SpanKind:
                with other.start_as_current_span(f"span {kind.name}", kind=kind) as span:
                    span.set_status(Status(StatusCode.ERROR, "boom"))
            with tracer.start_as_current_span("agent.lifecycle_hook ok") as span:
                span.set_status(Status(StatusCode.OK))
        spans.extend(memory.get_finished_spans())
        memory.clear()
    return spans


def sdk_json(request: dict[str, Any]) -> dict[str, Any]:
    """`request` with its hex ids in base64, as protobuf's own JSON mapping has bytes."""

    def b64(value: str) -> str:
        return base64.b64encode(bytes.fromhex(value)).decode("ascii")

    for resource_spans in request["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for holder in (span, *span.get("links", ())):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in holder:
                            assert re.fullmatch("[0-9a-f]+", holder[key]), holder[key]
                            holder[key] = b64(holder[key])
    return request


def test_a_line_is_the_request_the_sdk_encoder_builds_field_for_field() -> None:
    spans = varied_spans()
    line = otlp_json.encode_line(spans)
    assert line.endswith(b"\n") and line.count(b"\n") == 1

    # Parsed by protobuf's JSON mapping (after the OTLP encoding's one difference, hex ids,
    # is turned back), it is exactly the message the SDK's OTLP exporters send.
    parsed = json_format.Parse(json.dumps(sdk_json(json.loads(line))), ExportTraceServiceRequest())
    # But for one field the SDK's encoder leaves out and OTLP has: a link's trace state.
    link_states = [
        link.trace_state
        for resource_spans in parsed.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
        for link in span.links
    ]
    assert link_states == ["vendor=value,other=x"] * 4
    for resource_spans in parsed.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                for link in span.links:
                    link.ClearField("trace_state")
    assert parsed == encode_spans(spans)
    assert len(parsed.resource_spans) == 2
    assert [len(r.scope_spans) for r in parsed.resource_spans] == [2, 2]


def test_ids_are_hex_and_name_the_spans_the_sdk_made() -> None:
    spans = varied_spans()
    request = json.loads(otlp_json.encode_line(spans))
    written = [
        span
        for resource_spans in request["resourceSpans"]
        for scope_spans in resource_spans["scopeSpans"]
        for span in scope_spans["spans"]
    ]
    by_id = {format(span.context.span_id, "016x"): span for span in spans if span.context}
    assert sorted(span["spanId"] for span in written) == sorted(by_id)
    for span in written:
        made = by_id[span["spanId"]]
        assert made.context is not None and made.parent is not None
        assert span["traceId"] == format(made.context.trace_id, "032x")
        assert span["parentSpanId"] == format(made.parent.span_id, "016x")
        assert span["name"] == made.name
    session = next(span for span in written if span["name"] == "invoke_agent reviewer")
    assert session["parentSpanId"] == "051f051f051f051f"  # the remote parent
    assert session["flags"] == 0x300  # its parent is remote, and it says so
    assert session["links"][0]["traceId"] == "5b8e0c1f" * 4
    assert session["links"][0]["traceState"] == "vendor=value,other=x"


def test_values_are_written_as_the_json_mapping_spells_them() -> None:
    [span] = [s for s in varied_spans() if s.name == "invoke_agent reviewer"][:1]
    encoded = otlp_json.encode_request([span])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    values = {a["key"]: a["value"] for a in encoded["attributes"]}
    assert values["count"] == {"intValue": "3"}  # 64-bit integers as strings
    assert values["largest"] == {"intValue": str(2**63 - 1)}
    assert values["infinite"] == {"doubleValue": "Infinity"}
    assert values["minus.infinite"] == {"doubleValue": "-Infinity"}
    assert values["nothing"] == {"arrayValue": {}}
    assert values["empty.text"] == {"stringValue": ""}
    assert encoded["kind"] == 1 and isinstance(encoded["startTimeUnixNano"], str)


def test_nan_is_written_as_the_json_mapping_spells_it() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.get_tracer("t").start_span("s", attributes={"ratio": math.nan}).end()
    line = otlp_json.encode_line(memory.get_finished_spans())
    assert b'{"doubleValue":"NaN"}' in line  # bare NaN is not JSON
    parsed = json_format.Parse(json.dumps(sdk_json(json.loads(line))), ExportTraceServiceRequest())
    value = parsed.resource_spans[0].scope_spans[0].spans[0].attributes[0].value.double_value
    assert math.isnan(value)


def test_read_back_every_value_has_its_python_type() -> None:
    spans = varied_spans()
    records = list(otlp_json.flat_spans(json.loads(otlp_json.encode_line(spans))))
    session = next(r for r in records if r["name"] == "invoke_agent reviewer")
    expected = {k: list(v) if isinstance(v, tuple) else v for k, v in ATTRIBUTES.items()}
    expected["infinite"], expected["minus.infinite"] = "Infinity", "-Infinity"
    assert session["attributes"] == expected
    assert session["resource"] == {"service.name": "first", "tags": ["a", "b"]}
    assert session["scope"] == {"name": "otel_lifecycle_hooks", "version": "0.1.0"}
    assert session["links"] == [
        {"trace_id": "5b8e0c1f" * 4, "span_id": "051f051f051f051f",
         "attributes": {"link.attribute": "x"}},
        {"trace_id": "5b8e0c1f" * 4, "span_id": "051f051f051f051f", "attributes": {}},
    ]  # fmt: skip
    assert [e["name"] for e in session["events"]] == ["agent.lifecycle.post_start", "bare"]
    kinds = {r["name"]: r["kind"] for r in records if r["name"].startswith("span ")}
    assert kinds == {f"span {kind.name}": kind.name for kind in SpanKind}
    statuses = {r["name"]: r["status"]["code"] for r in records}
    assert statuses["span CLIENT"] == "ERROR" and statuses["agent.lifecycle_hook ok"] == "OK"
    assert statuses["invoke_agent reviewer"] == "UNSET"


def test_a_hostile_line_is_read_without_failing_its_odd_fields_left_out(tmp_path: Path) -> None:
    """The agent runs as the same user and may write the file: every field of another type
    is left out or given its empty value, and `trace` still shows what is well formed."""
    odd: list[Any] = [None, 7, True, "x", [], {}, [1], {"a": 1}, 1.5]
    spans = [
        {"spanId": "00000000000000a1", "traceId": value, "parentSpanId": value, "name": value,
         "kind": value, "startTimeUnixNano": value, "endTimeUnixNano": value, "status": value,
         "attributes": [value, {"key": value}, {"key": "k", "value": value},
                        {"key": "n", "value": {"intValue": "9" * 400}},
                        {"key": "a", "value": {"arrayValue": {"values": value}}}],
         "events": value, "links": [value, {"traceId": value}]}
        for value in odd
    ]  # fmt: skip
    request = {"resourceSpans": [
        {"resource": odd[5], "scopeSpans": [{"scope": value, "spans": spans} for value in odd]},
        *odd,
    ]}  # fmt: skip
    path = tmp_path / "t.jsonl"
    nested = '{"resourceSpans":[' + "[" * 100_000 + "]" * 100_000 + "]}"
    path.write_text(json.dumps(request) + "\n" + nested + "\n" + '{"resourceSpans": 5}\n')
    records = read_trace_file(path)
    assert len(records) == len(odd) ** 2
    for record in records:
        assert record["span_id"] == "00000000000000a1"
        assert record["trace_id"] in (None, "x") and isinstance(record["name"], str)
        assert record["kind"] == "UNSPECIFIED" and record["status"]["code"] == "UNSET"
        assert isinstance(record["start_time_unix_nano"], (int, type(None)))
        assert set(record["attributes"]) <= {"k", "n", "a", "x"}
        assert record["attributes"]["n"] is None  # 400 digits: no 64-bit integer
    from otel_lifecycle_hooks.cli.trace import render_waterfall

    assert render_waterfall(records, width=80)  # drawn, not failed
