"""The normalized harness event: what every dialect produces and the supervisor consumes.

A dialect turns one raw harness payload into zero or more `NormalizedEvent`s. The event name is
one of `events.RUNTIME_EVENTS` (Scion's normalized vocabulary); `fields` carries only what a
hook can use, keyed by the template variable that will hold it:

| field               | holds                                                            |
|---------------------|------------------------------------------------------------------|
| `TOOL_NAME`         | the tool a tool-start / tool-end is about                        |
| `TOOL_INPUT`        | the tool's input, as compact JSON (tool-start, tool-end)         |
| `TOOL_CALL_ID`      | the harness's id of that tool call, where it gives one           |
| `TOOL_OUTPUT`       | what the tool returned, as text or compact JSON (tool-end)       |
| `ASSISTANT_TEXT`    | the agent's final text of a turn (agent-end, response-complete)  |
| `TASK_SUMMARY`      | a summary the harness gives with a completion                    |
| `ERROR_MESSAGE`     | why a tool or a turn failed                                      |
| `ERROR_TYPE`        | the harness's short error class (`rate_limit`, ...)              |
| `MESSAGE`           | notification text                                                |
| `NOTIFICATION_TYPE` | the harness's notification kind (`permission_prompt`, ...)       |
| `PROMPT`            | the prompt the user submitted (prompt-submit)                    |
| `SOURCE`, `REASON`  | why a session started / ended, or a compaction's trigger         |
| `TRANSCRIPT_PATH`   | where the harness keeps its transcript                           |

The harness's own session id travels beside the fields (`session_id`); the activity tracker
hands it on as `HARNESS_SESSION_ID`, so that `SESSION_ID` names one supervised session for
every hook.

`PROMPT`, `ASSISTANT_TEXT` and `TASK_SUMMARY` are text that a user or the model wrote: a hook may
forward them, but they are data, never trusted configuration. Every value is cut to
`MAX_FIELD_CHARS` so that one event stays one small line on the wire. A field the event may
not carry (reported.py: PHASE, AGENT_ID, an `env:` name, ...) is not kept; its name
is listed in `dropped`, for the supervisor to count.

This module imports only the standard library: the `hook` command runs it on every event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType

from ..errors import LifecycleHooksError
from ..events import RUNTIME_EVENTS
from ..reported import admit_fields, safe_text

# On the hook path, so a plain class and no `typing`: importing `dataclasses` (with `inspect`)
# costs 7 ms, `typing` 3 ms (-X importtime), of a hook process of 14.7 ms whose target is 2x
# `python -c pass`, 17 ms (bench_hook_path.py).
WIRE_VERSION = 1
MAX_FIELD_CHARS = 16 * 1024

# The variables a dialect may fill; each event keeps only those reported.py allows it.
TOOL_NAME = "TOOL_NAME"
TOOL_INPUT = "TOOL_INPUT"
TOOL_CALL_ID = "TOOL_CALL_ID"
TOOL_OUTPUT = "TOOL_OUTPUT"
ASSISTANT_TEXT = "ASSISTANT_TEXT"
TASK_SUMMARY = "TASK_SUMMARY"
ERROR_MESSAGE = "ERROR_MESSAGE"
ERROR_TYPE = "ERROR_TYPE"
MESSAGE = "MESSAGE"
NOTIFICATION_TYPE = "NOTIFICATION_TYPE"
PROMPT = "PROMPT"
SOURCE = "SOURCE"
REASON = "REASON"
TRANSCRIPT_PATH = "TRANSCRIPT_PATH"
HARNESS_SESSION_ID = "HARNESS_SESSION_ID"

_RUNTIME_EVENTS = frozenset(RUNTIME_EVENTS)


class WireFormatError(ValueError, LifecycleHooksError):
    """A wire object that is not a valid normalized event."""


def as_text(value: object) -> str:
    """A payload's value as a field's text: a string as is; other JSON values as compact JSON;
    None as ""."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return ""


def clip(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """`text` cut to `limit` characters, marking the cut with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class NormalizedEvent:
    """One harness event in the shared vocabulary (immutable).

    `event` is a runtime event name; `dialect` and `raw_event` say where it came from
    (`claude`, `PreToolUse`); `session_id` is the harness's conversation id, or empty.
    Empty fields are dropped and long ones clipped.
    """

    # Not a dataclass: importing `dataclasses` is about 6 ms (-X importtime) of every harness
    # event's `hook`.
    __slots__ = ("dialect", "dropped", "event", "fields", "raw_event", "session_id")

    event: str
    dialect: str
    raw_event: str
    session_id: str
    fields: Mapping[str, str]
    dropped: tuple[str, ...]  # names the event may not set (reported.py), not kept

    def __init__(
        self,
        event: str,
        dialect: str,
        raw_event: str = "",
        session_id: str = "",
        fields: Mapping[str, str] | None = None,
    ) -> None:
        if event not in _RUNTIME_EVENTS:
            raise ValueError(f"{event!r} is not a runtime event")
        # Only what this event may report, whatever route it came by (reported.py).
        admitted, dropped = admit_fields(event, {k: v for k, v in (fields or {}).items() if v})
        kept = {key: clip(value) for key, value in admitted.items()}
        for name, value in (
            ("event", event),
            ("dialect", safe_text(dialect)),
            ("raw_event", safe_text(raw_event)),
            ("session_id", safe_text(session_id)),
            ("fields", MappingProxyType(kept)),
            ("dropped", dropped),
        ):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"NormalizedEvent is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"NormalizedEvent is immutable: cannot delete {name!r}")

    def _key(self) -> tuple[str, str, str, str, tuple[tuple[str, str], ...]]:
        fields = tuple(sorted(self.fields.items()))
        return (self.event, self.dialect, self.raw_event, self.session_id, fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NormalizedEvent):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"NormalizedEvent(event={self.event!r}, dialect={self.dialect!r}, "
            f"raw_event={self.raw_event!r}, session_id={self.session_id!r}, "
            f"fields={dict(self.fields)!r})"
        )

    def to_wire(self) -> dict[str, object]:
        """The JSON object sent to the supervisor (see docs/harness-protocol.md)."""
        return {
            "v": WIRE_VERSION,
            "kind": "event",
            "event": self.event,
            "dialect": self.dialect,
            "raw_event": self.raw_event,
            "session_id": self.session_id,
            "fields": dict(self.fields),
        }

    @classmethod
    def from_wire(cls, obj: Mapping[str, object]) -> NormalizedEvent:
        """Parse a wire object; raises `WireFormatError` naming what is wrong."""
        if obj.get("kind") != "event":
            raise WireFormatError("kind must be 'event'")
        if obj.get("v") != WIRE_VERSION:
            raise WireFormatError(f"unsupported wire version {obj.get('v')!r}")
        event = obj.get("event")
        if event not in _RUNTIME_EVENTS:
            raise WireFormatError(f"unknown event {event!r}")
        fields = obj.get("fields", {})
        if not isinstance(fields, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in fields.items()
        ):
            raise WireFormatError("fields must map strings to strings")
        strings = {}
        for key in ("dialect", "raw_event", "session_id"):
            value = obj.get(key, "")
            if not isinstance(value, str):
                raise WireFormatError(f"{key} must be a string")
            strings[key] = value
        return cls(event=str(event), fields=fields, **strings)
