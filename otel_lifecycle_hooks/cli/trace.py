"""`otel-lifecycle-hooks trace [FILE] [--trace-id ID] [--last N | --all] [--json]`: a
terminal waterfall of a local trace file, the newest session unless told otherwise.

invoke_agent reviewer  2026-11-30 10:34:37Z  trace 5b8e0c1f  ✓ 3.204s
────────────────────────────────────────────────────────────────────────────────
invoke_agent reviewer                         ██████████████████████      3.204s
◆ post_start  +0.012s                         ◆
✓ register-agent  post-start  ×1              ██                           120ms
    POST 200                                  █                            110ms

Every value the agent or an endpoint controls is shown with its control characters escaped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import events
from ..telemetry.tracefile import (
    TRACE_FILE_SUFFIX,
    default_trace_dir,
    newest_trace_file,
    read_trace_file,
)
from .console import EXIT_NOTHING, EXIT_OK, escape_control, wants_colour

OUTCOME_MARKS = {"success": "✓", "failed": "✗", "timeout": "⏱", "skipped": "–", "refused": "⊘"}
EVENT_MARK = "◆"
MESSAGE_MARK = "\u2002"  # marks a row that holds a failure's message (never drawn)
RETRY_MARK = "↻"
DEFAULT_WIDTH = 100
MIN_WIDTH = 60
BAR_SHARE = 0.34  # of a wide line, for the time axis
NARROW = 100  # below this many columns the time axis gets a smaller share
NARROW_BAR_SHARE = 0.2
SHORT_ID = 8  # hex digits of the trace id shown in a title, and enough to look it up
EVENT_PREFIX = "agent.lifecycle."
MESSAGE_LIMIT = 200

_ANSI = {"✓": "32", "✗": "31", "⏱": "33", "⊘": "33", EVENT_MARK: "36", RETRY_MARK: "33"}


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "trace",
        help="show a local trace file as a waterfall",
        description="Show a trace file written by the embedded default exporter as a waterfall:"
        " the session span, its lifecycle events and every hook execution.",
    )
    parser.add_argument(
        "file",
        nargs="?",
        type=Path,
        help="a .jsonl trace file (default: the newest in $LIFECYCLE_HOOKS_TRACE_DIR"
        " or ~/.local/state/otel-lifecycle-hooks/traces)",
    )
    parser.add_argument(
        "--trace-id", metavar="ID", help="show only this trace (the short id a title shows will do)"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--last",
        type=_positive,
        metavar="N",
        help="the newest N sessions (default: 1; with --json, every one)",
    )
    which.add_argument("--all", action="store_true", help="every session of the file")
    parser.add_argument("--json", action="store_true", help="print the spans as JSON")
    parser.add_argument(
        "--width", type=int, help="line width (default: the terminal's, else $COLUMNS, else 100)"
    )


def run(args: argparse.Namespace) -> int:
    path: Path | None = args.file
    if path is None:
        directory = default_trace_dir()
        path = newest_trace_file(directory)
        if path is None:
            print(f"no trace files in {directory}", file=sys.stderr)
            return EXIT_NOTHING
        if args.trace_id:
            # Each agent name writes its own file: the id may be in any of them.
            path = _file_holding(args.trace_id, directory) or path
    try:
        spans = read_trace_file(path)
    except OSError as exc:
        print(f"cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_NOTHING
    if not spans:
        print(f"no spans in {path}", file=sys.stderr)
        return EXIT_NOTHING
    if args.trace_id:
        wanted = args.trace_id.strip().rstrip("…").lower()
        matching = [span for span in spans if str(span.get("trace_id", "")).startswith(wanted)]
        if not matching or not wanted:
            print(_no_such_trace(args.trace_id, path, spans), file=sys.stderr)
            return EXIT_NOTHING
        spans = matching
    elif args.last or not (args.all or args.json):
        # The waterfall shows the newest session unless told otherwise; --json gives the
        # whole file to a program unless --last says how much.
        spans = newest_traces(spans, args.last or 1)
    if args.json:
        json.dump({"file": str(path), "spans": spans}, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return EXIT_OK
    # A terminal's width, or COLUMNS when piped (`COLUMNS=80 trace | less`), else the default.
    sized = sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    width = args.width or (
        shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns if sized else DEFAULT_WIDTH
    )
    color = wants_colour(sys.stdout, os.environ)
    sys.stdout.write(render_waterfall(spans, width=max(width, MIN_WIDTH), color=color))
    return EXIT_OK


def newest_traces(spans: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The spans of the `count` traces that started last."""
    started: dict[str, int] = {}
    for span in spans:
        trace_id = str(span.get("trace_id", ""))
        start = int(span.get("start_time_unix_nano") or 0)
        started[trace_id] = min(started.get(trace_id, start), start)
    keep = set(sorted(started, key=lambda trace_id: started[trace_id])[-count:])
    return [span for span in spans if str(span.get("trace_id", "")) in keep]


def _file_holding(trace_id: str, directory: Path) -> Path | None:
    """The newest trace file of `directory` with a span of a trace starting with `trace_id`."""
    wanted = trace_id.strip().rstrip("…").lower()
    if not wanted:
        return None
    try:
        files = [p for p in directory.glob("*" + TRACE_FILE_SUFFIX) if p.is_file()]
        files.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for candidate in files:
        try:
            spans = read_trace_file(candidate)
        except OSError:
            continue
        if any(str(span.get("trace_id", "")).startswith(wanted) for span in spans):
            return candidate
    return None


def _no_such_trace(given: str, path: Path, spans: list[dict[str, Any]]) -> str:
    roots = [node.span for node in _roots(spans)][-5:][::-1]  # newest first
    known = ", ".join(
        f"{escape_control(str(span.get('trace_id', ''))[:SHORT_ID])}"
        f" ({_fit(str(span.get('name', '?')), 40)})"
        for span in roots
    )
    return f"no trace {escape_control(given)!r} in {path}; the newest there: {known}"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


# --- rendering (pure) ------------------------------------------------------------------


@dataclass
class _Node:
    span: dict[str, Any]
    children: list[_Node] = field(default_factory=list)

    @property
    def start(self) -> int:
        return int(self.span.get("start_time_unix_nano") or 0)

    @property
    def end(self) -> int:
        return int(self.span.get("end_time_unix_nano") or self.start)


@dataclass(frozen=True)
class _Row:
    label: str
    start: int
    end: int | None  # None: an instant (a span event)
    right: str
    mark: str = ""


def render_waterfall(
    spans: list[dict[str, Any]], *, width: int = DEFAULT_WIDTH, color: bool = False
) -> str:
    """Every trace in `spans` as a waterfall, `width` columns wide, oldest trace first."""
    blocks = [_render_tree(root, width, color) for root in _roots(spans)]
    return "\n".join(blocks)


def _roots(spans: list[dict[str, Any]]) -> list[_Node]:
    nodes = {(s.get("trace_id"), s.get("span_id")): _Node(s) for s in spans}
    roots: list[_Node] = []
    for node in nodes.values():
        parent = nodes.get((node.span.get("trace_id"), node.span.get("parent_span_id")))
        (parent.children if parent is not None else roots).append(node)
    for node in nodes.values():
        node.children.sort(key=lambda n: n.start)
    return sorted(roots, key=lambda n: n.start)


def _render_tree(root: _Node, width: int, color: bool) -> str:
    rows = [_span_row(root, 0)] + list(_rows_below(root, 1))
    share = BAR_SHARE if width >= NARROW else NARROW_BAR_SHARE
    bar_width = max(int(width * share), 10)
    right_width = 8
    label_width = width - bar_width - right_width - 2
    origin, finish = root.start, max(root.end, root.start + 1)
    for row in rows:
        finish = max(finish, row.end or row.start)
    scale = bar_width / (finish - origin)

    status = _mark_of(root.span) or "·"
    title = f"{root.span.get('name', '?')}  {_started(root.start)}  "
    title += f"trace {str(root.span.get('trace_id', ''))[:SHORT_ID]}  "
    title += f"{status} {_duration(root.end - root.start)}"
    lines = [_paint(_fit(title, width), color), "─" * width]
    for row in rows:
        if row.mark == MESSAGE_MARK:  # a failure's message: the whole line, wrapped
            for part in _wrap(row.label, width):
                lines.append(_paint(part, color))
            continue
        label = escape_control(row.label)
        if len(label) > label_width and row.end is not None:
            # Too long to share the line with the bar: the label reads whole on its own line.
            lines.append(_paint(_fit(label, width), color))
            label = ""
        label = _fit(label, label_width).ljust(label_width)
        bar = _bar(row, origin, scale, bar_width)
        lines.append(_paint(f"{label} {bar} {row.right.rjust(right_width)}".rstrip(), color))
    return "\n".join(lines) + "\n"


def _started(nanos: int) -> str:
    if not nanos:
        return "?"
    moment = datetime.datetime.fromtimestamp(nanos / 1e9, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _wrap(text: str, width: int) -> list[str]:
    """A message row over as many lines as it needs, each indented like the first."""
    indent = text[: len(text) - len(text.lstrip())] + "  "
    body = escape_control(text.strip())
    room = max(width - len(indent), 20)

    # Between words; a word longer than the line (a URL) is cut where the line ends.
    parts = textwrap.wrap(body, room, break_on_hyphens=False) or [""]
    return [indent + part for part in parts]


def _rows_below(node: _Node, depth: int) -> Iterator[_Row]:
    # Span events and child spans interleaved in time: a hook's bar sits under its event.
    items: list[tuple[int, int, Any]] = []
    for event in node.span.get("events") or []:
        items.append((int(event.get("time_unix_nano") or node.start), 0, event))
    for child in node.children:
        items.append((child.start, 1, child))
    for at, kind, item in sorted(items, key=lambda entry: (entry[0], entry[1])):
        if kind == 0:
            yield _event_row(item, at, node.start, depth)
        else:
            yield _span_row(item, depth)
            message = _failure_message(item.span)
            if message:
                yield _Row("  " * depth + f"✗ {message}", item.start, None, "", MESSAGE_MARK)
            yield from _rows_below(item, depth + 1)


def _failure_message(span: dict[str, Any]) -> str:
    """What a failed hook span says went wrong (its status description), bounded."""
    if not events.is_hook_span_name(span.get("name")) or _status_code(span) != "ERROR":
        return ""
    status = span.get("status") or {}
    description = str(status.get("message") or status.get("description") or "")
    description = " ".join(description.split())
    return description[:MESSAGE_LIMIT]


def _event_row(event: dict[str, Any], at: int, origin: int, depth: int) -> _Row:
    indent = "  " * max(depth - 1, 0)
    name = str(event.get("name", "?"))
    attributes = event.get("attributes") or {}
    if name == events.HOOK_RETRY_EVENT:
        detail = " ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in attributes.items())
        return _Row(f"{indent}{RETRY_MARK} retry {detail}".rstrip(), at, None, "", RETRY_MARK)
    short = name.removeprefix(EVENT_PREFIX)
    label = f"{indent}{EVENT_MARK} {short:<15} +{(at - origin) / 1e9:.3f}s"
    detail = _event_detail(attributes)
    if detail:
        label += f"  {detail}"
    return _Row(label, at, None, "", EVENT_MARK)


def _event_detail(attributes: dict[str, Any]) -> str:
    """What a glance needs from a lifecycle event: where the agent went, and why."""
    event = attributes.get(events.ATTR_EVENT)
    parts = []
    for kind, key in (("phase", "agent.phase"), ("activity", "agent.activity")):
        if event == f"{kind}-change" and attributes.get(key):
            previous = attributes.get(f"{key}.previous")
            # The row's name says which (phase_change, activity_change): the values suffice.
            parts.append(f"{previous} → {attributes[key]}" if previous else f"→ {attributes[key]}")
    for key, label in (
        ("gen_ai.tool.name", "tool"),
        ("process.exit.code", "exit"),
        ("agent.limit.name", "limit"),
        ("agent.error.message", "error:"),
    ):
        if attributes.get(key) not in (None, ""):
            parts.append(f"{label} {str(attributes[key])[:MESSAGE_LIMIT]}")
    return " ".join(parts)


def _span_row(node: _Node, depth: int) -> _Row:
    span = node.span
    attributes = span.get("attributes") or {}
    indent = "  " * max(depth - 1, 0)
    if events.is_hook_span_name(span.get("name")):
        mark = _mark_of(span)
        attempts = attributes.get(events.HOOK_ATTR_ATTEMPTS)
        parts = [
            f"{mark} {attributes.get(events.HOOK_ATTR_NAME, '?')}",
            str(attributes.get(events.HOOK_ATTR_EVENT, "")),
            f"×{attempts}" if attempts is not None else "",
        ]
        if attributes.get(events.HOOK_ATTR_OUTCOME) not in (None, "success"):
            parts.append(str(attributes.get(events.HOOK_ATTR_OUTCOME)))
        label = indent + "  ".join(part for part in parts if part)
    elif span.get("kind") == "CLIENT":
        label = indent + "  " + _client_label(span)
    else:
        mark = "✗ " if _status_code(span) == "ERROR" else ""
        label = indent + mark + str(span.get("name", "?"))
    return _Row(label, node.start, node.end, _duration(node.end - node.start))


def _client_label(span: dict[str, Any]) -> str:
    attributes = span.get("attributes") or {}
    status = attributes.get("http.response.status_code", attributes.get("http.status_code"))
    error = attributes.get("error.type")
    text = str(span.get("name", "?"))
    if status is not None:
        text += f" {status}"
    if error and str(error) != str(status):
        text += f" {error}"
    return ("✗ " if _status_code(span) == "ERROR" else "") + text


def _mark_of(span: dict[str, Any]) -> str:
    outcome = (span.get("attributes") or {}).get(events.HOOK_ATTR_OUTCOME)
    if outcome in OUTCOME_MARKS:
        return OUTCOME_MARKS[outcome]
    return "✗" if _status_code(span) == "ERROR" else "✓"


def _status_code(span: dict[str, Any]) -> str:
    return str((span.get("status") or {}).get("code", "UNSET"))


def _bar(row: _Row, origin: int, scale: float, bar_width: int) -> str:
    first = min(int((row.start - origin) * scale), bar_width - 1)
    cells = [" "] * bar_width
    if row.end is None:
        cells[max(first, 0)] = row.mark or EVENT_MARK
    else:
        last = min(max(int((row.end - origin) * scale), first + 1), bar_width)
        for index in range(max(first, 0), last):
            cells[index] = "█"
    return "".join(cells)


def _duration(nanos: int) -> str:
    seconds = max(nanos, 0) / 1e9
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return f"{seconds:.3f}s"


def _fit(text: str, width: int) -> str:
    text = escape_control(text)  # what the agent wrote is shown, never interpreted
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _paint(line: str, color: bool) -> str:
    if not color:
        return line
    for mark, code in _ANSI.items():
        line = line.replace(mark, f"\x1b[{code}m{mark}\x1b[0m")
    return line
