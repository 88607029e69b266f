"""SDK spans to the OTLP JSON encoding, and that encoding back to flat span records.

Writing: `encode_request` gives the `ExportTraceServiceRequest` of a batch of spans as the
OTLP specification's JSON encoding has it (the protobuf JSON mapping with its differences):
`resourceSpans` / `scopeSpans` / `spans`, lowerCamelCase keys, trace and span ids as hex
strings (not base64), 64-bit integers and times as decimal strings, enums as integers,
attributes as `{"key": ..., "value": {"stringValue" | "intValue" | "doubleValue" |
"boolValue" | "arrayValue" | "kvlistValue" | "bytesValue": ...}}`, fields at their default
value left out. It is the message the OTel SDK's `encode_spans` builds, written without
building it: the protobuf message and its JSON conversion cost about nine times as much per
span (a test holds the two equal, field by field).

Reading: `flat_spans` turns a request back into the flat records that `trace` draws (see
`tracefile.read_trace_file`). The file may have been written by someone else (the agent runs
as the same user): every field is checked for its type, and one of another type is left out.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind

# opentelemetry.proto.trace.v1.Span.SpanKind: SPAN_KIND_UNSPECIFIED is 0.
_KIND_NUMBERS = {
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}
_KIND_NAMES = {number: kind.name for kind, number in _KIND_NUMBERS.items()}
_STATUS_NAMES = {0: "UNSET", 1: "OK", 2: "ERROR"}  # Status.StatusCode
# SpanFlags: the SDK always says whether the parent was remote (bit 8), and if so (bit 9).
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}  # the JSON mapping's spellings


# --- writing -------------------------------------------------------------------------------


def encode_line(spans: Sequence[ReadableSpan]) -> bytes:
    """`spans` as one line of an OTLP JSON file: their request, newline-terminated UTF-8."""
    text = json.dumps(
        encode_request(spans), ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
    # "replace": a lone surrogate in an attribute becomes "?", never a failed export.
    return (text + "\n").encode("utf-8", "replace")


def encode_request(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The `ExportTraceServiceRequest` of `spans` in the OTLP JSON encoding, grouped by
    resource, then by instrumentation scope, in the order the spans come."""
    # Keyed by identity: a provider's spans share one Resource object (hashing one by value
    # serialises its attributes).
    grouped: dict[int, tuple[Resource, dict[int, tuple[InstrumentationScope | None, list[Any]]]]]
    grouped = {}
    for span in spans:
        resource = span.resource
        scopes = grouped.setdefault(id(resource), (resource, {}))[1]
        scope = span.instrumentation_scope
        scopes.setdefault(id(scope), (scope, []))[1].append(_span(span))
    resource_spans = []
    for resource, scopes in grouped.values():
        scope_spans = []
        for scope, encoded in scopes.values():
            entry: dict[str, Any] = {"scope": _scope(scope), "spans": encoded}
            if scope is not None and scope.schema_url:
                entry["schemaUrl"] = scope.schema_url
            scope_spans.append(entry)
        entry = {"resource": _resource(resource), "scopeSpans": scope_spans}
        if resource.schema_url:
            entry["schemaUrl"] = resource.schema_url
        resource_spans.append(entry)
    return {"resourceSpans": resource_spans}


def _span(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    parent = span.parent
    record: dict[str, Any] = {}
    if context is not None:
        record["traceId"] = format(context.trace_id, "032x")
        record["spanId"] = format(context.span_id, "016x")
        if context.trace_state:
            record["traceState"] = context.trace_state.to_header()
    if parent is not None:
        record["parentSpanId"] = format(parent.span_id, "016x")
    record["flags"] = _flags(parent)
    if span.name:
        record["name"] = span.name
    record["kind"] = _KIND_NUMBERS[span.kind]
    if span.start_time:
        record["startTimeUnixNano"] = str(span.start_time)
    if span.end_time:
        record["endTimeUnixNano"] = str(span.end_time)
    if span.attributes:
        record["attributes"] = _attributes(span.attributes)
    if span.dropped_attributes:
        record["droppedAttributesCount"] = span.dropped_attributes
    if span.events:
        record["events"] = [_event(event.name, event.timestamp, event.attributes,
                                   event.dropped_attributes) for event in span.events]  # fmt: skip
    if span.dropped_events:
        record["droppedEventsCount"] = span.dropped_events
    if span.links:  # a replay's link to the delivery it re-sends; other spans have none
        record["links"] = [_link(link.context, link.attributes, link.dropped_attributes)
                           for link in span.links]  # fmt: skip
    if span.dropped_links:
        record["droppedLinksCount"] = span.dropped_links
    status: dict[str, Any] = {}
    if span.status.description:
        status["message"] = span.status.description
    if span.status.status_code.value:
        status["code"] = span.status.status_code.value
    record["status"] = status
    return record


def _flags(parent: SpanContext | None) -> int:
    return (
        _HAS_IS_REMOTE | _IS_REMOTE if parent is not None and parent.is_remote else _HAS_IS_REMOTE
    )


def _event(
    name: str, timestamp: int | None, attributes: Mapping[str, Any] | None, dropped: int
) -> dict[str, Any]:
    event: dict[str, Any] = {}
    if timestamp:
        event["timeUnixNano"] = str(timestamp)
    if name:
        event["name"] = name
    if attributes:
        event["attributes"] = _attributes(attributes)
    if dropped:
        event["droppedAttributesCount"] = dropped
    return event


def _link(
    context: SpanContext, attributes: Mapping[str, Any] | None, dropped: int
) -> dict[str, Any]:
    link: dict[str, Any] = {
        "traceId": format(context.trace_id, "032x"),
        "spanId": format(context.span_id, "016x"),
    }
    if context.trace_state:
        link["traceState"] = context.trace_state.to_header()
    if attributes:
        link["attributes"] = _attributes(attributes)
    if dropped:
        link["droppedAttributesCount"] = dropped
    link["flags"] = _flags(context)
    return link


def _scope(scope: InstrumentationScope | None) -> dict[str, Any]:
    encoded: dict[str, Any] = {}
    if scope is not None:
        if scope.name:
            encoded["name"] = scope.name
        if scope.version:
            encoded["version"] = scope.version
        if scope.attributes:
            encoded["attributes"] = _attributes(scope.attributes)
    return encoded


# The last resource seen and its encoding: every span of a provider shares one immutable
# Resource, and `run` has one provider, so it is encoded once, not once per batch.
_last_resource: tuple[Resource, dict[str, Any]] | None = None


def _resource(resource: Resource) -> dict[str, Any]:
    global _last_resource
    last = _last_resource
    if last is None or last[0] is not resource:
        encoded = {"attributes": _attributes(resource.attributes)} if resource.attributes else {}
        last = _last_resource = (resource, encoded)
    return last[1]


def _attributes(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _value(value)} for key, value in attributes.items()]


def _value(value: object) -> dict[str, Any]:
    # The most common type first; bool before int, which it is a subclass of.
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value if math.isfinite(value) else _NON_FINITE.get(value, "NaN")}
    if isinstance(value, (tuple, list)):
        return {"arrayValue": {"values": [_value(item) for item in value]} if value else {}}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Mapping):
        values = [{"key": str(key), "value": _value(item)} for key, item in value.items()]
        return {"kvlistValue": {"values": values} if values else {}}
    if value is None:
        return {}
    return {"stringValue": str(value)}  # no SDK attribute is of another type


# --- reading -------------------------------------------------------------------------------


def is_request(record: object) -> bool:
    """Whether a decoded line is an OTLP JSON trace request (not an older flat span)."""
    return isinstance(record, dict) and "resourceSpans" in record


def flat_spans(request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The spans of an OTLP JSON trace request as flat records::

        {"trace_id": "5b8e...", "span_id": "051f...", "parent_span_id": None,
         "name": "invoke_agent reviewer", "kind": "INTERNAL",
         "start_time_unix_nano": 1767000000000000000, "end_time_unix_nano": ...,
         "status": {"code": "OK", "message": ""}, "attributes": {...},
         "events": [{"name": ..., "time_unix_nano": ..., "attributes": {...}}],
         "resource": {"service.name": ...}, "scope": {"name": ..., "version": ...}}

    and `"links": [{"trace_id": ..., "span_id": ..., "attributes": {...}}]` when it has
    links. A span without a span id is left out."""
    for resource_spans in _list(request.get("resourceSpans")):
        resource = _flat_attributes(_dict(resource_spans.get("resource")).get("attributes"))
        for scope_spans in _list(resource_spans.get("scopeSpans")):
            scope = _dict(scope_spans.get("scope"))
            scope_record = {
                "name": _text(scope.get("name")),
                "version": _text(scope.get("version")),
            }
            for span in _list(scope_spans.get("spans")):
                span_id = span.get("spanId")
                if not isinstance(span_id, str) or not span_id:
                    continue
                yield _flat_span(span, span_id.lower(), resource, scope_record)


def _flat_span(
    span: dict[str, Any], span_id: str, resource: dict[str, Any], scope: dict[str, str]
) -> dict[str, Any]:
    status = _dict(span.get("status"))
    record: dict[str, Any] = {
        "trace_id": _hex(span.get("traceId")),
        "span_id": span_id,
        "parent_span_id": _hex(span.get("parentSpanId")),
        "name": _text(span.get("name")),
        "kind": _enum(span.get("kind"), _KIND_NAMES, "SPAN_KIND_", "UNSPECIFIED"),
        "start_time_unix_nano": _nanos(span.get("startTimeUnixNano")),
        "end_time_unix_nano": _nanos(span.get("endTimeUnixNano")),
        "status": {
            "code": _enum(status.get("code"), _STATUS_NAMES, "STATUS_CODE_", "UNSET"),
            "message": _text(status.get("message")),
        },
        "attributes": _flat_attributes(span.get("attributes")),
        "events": [
            {
                "name": _text(event.get("name")),
                "time_unix_nano": _nanos(event.get("timeUnixNano")) or 0,
                "attributes": _flat_attributes(event.get("attributes")),
            }
            for event in _list(span.get("events"))
        ],
        "resource": resource,
        "scope": scope,
    }
    links = [
        {
            "trace_id": _hex(link.get("traceId")),
            "span_id": _hex(link.get("spanId")),
            "attributes": _flat_attributes(link.get("attributes")),
        }
        for link in _list(span.get("links"))
    ]
    if links:
        record["links"] = links
    return record


def _flat_attributes(attributes: object) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for attribute in _list(attributes):
        key = attribute.get("key")
        if isinstance(key, str):
            flat[key] = _flat_value(attribute.get("value"))
    return flat


def _flat_value(value: object) -> Any:
    """An AnyValue's Python value; an integer written as a string is read as one, a value of
    no known kind as None."""
    if not isinstance(value, dict):
        return None
    if "stringValue" in value:
        return _text(value["stringValue"])
    if "boolValue" in value:
        return value["boolValue"] if isinstance(value["boolValue"], bool) else None
    if "intValue" in value:
        number = value["intValue"]
        if isinstance(number, int) and not isinstance(number, bool):
            return number
        return int(number) if isinstance(number, str) and _is_integer(number) else None
    if "doubleValue" in value:
        number = value["doubleValue"]
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return float(number)
        return number if isinstance(number, str) else None  # "NaN", "Infinity": kept as text
    if "arrayValue" in value:
        return [_flat_value(item) for item in _list(_dict(value["arrayValue"]).get("values"))]
    if "kvlistValue" in value:
        return _flat_attributes(_dict(value["kvlistValue"]).get("values"))
    if "bytesValue" in value:
        return _text(value["bytesValue"])  # base64, as written
    return None


def _is_integer(text: str) -> bool:
    # Bounded: int() of a long digit string is slow, and an attribute is at most 64 bits.
    digits = text.removeprefix("-")
    return 0 < len(digits) <= 20 and digits.isascii() and digits.isdigit()


def _nanos(value: object) -> int | None:
    """A time in Unix nanoseconds, written as a decimal string (or a number); None if not."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _is_integer(value):
        return int(value)
    return None


def _enum(value: object, names: Mapping[int, str], prefix: str, default: str) -> str:
    """An enum as its short name (`CLIENT`, `ERROR`): written as its number, or as its name
    (`SPAN_KIND_CLIENT`) as the protobuf JSON mapping also allows."""
    if isinstance(value, int) and not isinstance(value, bool):
        return names.get(value, default)
    if isinstance(value, str) and value.startswith(prefix):
        name = value.removeprefix(prefix)
        return name if name in names.values() else default
    return default


def _hex(value: object) -> str | None:
    return value.lower() if isinstance(value, str) and value else None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[dict[str, Any]]:
    """The objects of a JSON array (entries of another type are left out)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
