"""The host-agnostic hook protocol (seed 003): `<script> <stage>`, one JSON object on stdin,
JSONL on stdout, the exit code honoured.

This host fires the stages of `EVENT_STAGES` (listed to scripts as `host.stages`); a script
is run for each of them and ignores the ones it does not care about, as on every host.
Its stdout is read line by line: `{"result": ...}` lines are merged, `{"log": "..."}` lines go
to the hook log, and any other line is logged as the script's output. Results merge serially,
first within one script and then across the scripts of one event in the order they ran:
arrays are concatenated, scalars joined with a newline (an object is kept whole, the later
one winning key by key). The merged result of the event's stage is kept for the session as
`${HOOK_RESULT_<STAGE>}`, and each script's own as `${HOOK_<NAME>_RESPONSE}`.

Scripts are listed in a template under `hook_scripts:` (see docs/hook-systems.md); each
becomes a blocking script hook with `protocol: host-v1`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .. import events as ev
from ..engine.model import SessionInfo
from ..spec.durations import DurationError, parse_duration
from ..spec.model import DEFAULT_SCRIPT_TIMEOUT, MAX_TIMEOUT, HookAction, HookSpec
from ..spec.validate import Located, Problem, describe

PROTOCOL = "host-v1"
HOST_NAME = "otel-lifecycle-hooks"

# The stages this host can fire, and the event of ours that fires each.
EVENT_STAGES: Mapping[str, str] = MappingProxyType(
    {
        "tool-start": "before_tool",
        "tool-end": "after_tool",
        "model-start": "before_turn",
        "model-end": "after_turn",
        "agent-end": "before_stop",
        ev.ERROR: "on_error",
    }
)
STAGES: tuple[str, ...] = tuple(EVENT_STAGES.values())


def stage_for(event: str) -> str | None:
    """The stage `event` fires, if any."""
    return EVENT_STAGES.get(event)


def request(stage: str, session_id: str, context: Mapping[str, Any]) -> dict[str, Any]:
    """The one JSON object a script reads on stdin."""
    return {
        "hook": stage,
        "session_id": session_id,
        "host": {"name": HOST_NAME, "protocol": PROTOCOL, "stages": list(STAGES)},
        **{key: value for key, value in context.items() if key not in ("hook", "host")},
    }


def merge(earlier: Any, later: Any) -> Any:
    """Seed 003's serial merge: arrays concatenate, scalars join with a newline."""
    if earlier is None:
        return later
    if later is None:
        return earlier
    if isinstance(earlier, list) and isinstance(later, list):
        return earlier + later
    if isinstance(earlier, dict) and isinstance(later, dict):
        return {**earlier, **later}
    if isinstance(earlier, list):
        return earlier + [later]
    return f"{_scalar_text(earlier)}\n{_scalar_text(later)}"


def _scalar_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class StdoutReader:
    """Reads a script's stdout as it arrives: results merged, `log` lines passed on."""

    def __init__(self, on_log: Callable[[str], None]) -> None:
        self.result: Any = None
        self._on_log = on_log

    def line(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        if not isinstance(message, dict) or not ({"result", "log"} & message.keys()):
            if text.strip():
                self._on_log(text)  # not protocol: the script's own output, logged as is
            return
        if "log" in message:
            self._on_log(_scalar_text(message["log"]))
        if "result" in message:
            self.result = merge(self.result, message["result"])


def remember_result(session: SessionInfo, stage: str, event_id: str, result: Any) -> None:
    """Merge one script's result into its event's `${HOOK_RESULT_<STAGE>}` (scripts of one
    event run one after another, so the read and the write never interleave)."""
    key = f"HOOK_RESULT_{stage.upper()}"
    captured = session.captured_snapshot()
    earlier = captured.get(key + "_JSON") if captured.get(key + "_EVENT") == event_id else None
    merged = merge(json.loads(earlier) if earlier else None, result)
    session.capture(
        {
            key: result_text(merged),
            key + "_JSON": json.dumps(merged, ensure_ascii=False),
            key + "_EVENT": event_id,
        }
    )


def result_text(value: Any) -> str:
    """A merged result as a variable's value: text as is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# --- `hook_scripts:` in a template -------------------------------------------------------------


def read_hook_scripts(section: Located, file: str) -> tuple[list[HookSpec], list[Problem]]:
    """`hook_scripts: [path, {path, timeout}]`: each script, relative to the template's directory,
    as a hook on every event whose stage this host fires."""
    problems: list[Problem] = []
    if section.value is None:
        return [], problems
    if not section.is_list:
        message = f"got {describe(section)}; write a list of script paths"
        return [], [Problem(section.position, None, "hook_scripts", message)]
    hooks: list[HookSpec] = []
    names: set[str] = set()
    base = Path(file).resolve().parent
    for index, item in enumerate(section.value):
        where = f"hook_scripts[{index}]"
        path_located = item.value.get("path") if item.is_mapping else item
        if (
            path_located is None
            or not isinstance(path_located.value, str)
            or not path_located.value
        ):
            message = f"got {describe(path_located or item)}; write the script's path"
            problems.append(Problem((path_located or item).position, None, where, message))
            continue
        timeout = DEFAULT_SCRIPT_TIMEOUT
        timeout_located = item.value.get("timeout") if item.is_mapping else None
        if timeout_located is not None:
            try:
                timeout = parse_duration(timeout_located.text())
            except DurationError as exc:
                problems.append(
                    Problem(timeout_located.position, None, f"{where}.timeout", str(exc))
                )
                continue
            if not 0 < timeout <= MAX_TIMEOUT:
                message = f"got {timeout_located.text()}; write a duration above 0, at most {MAX_TIMEOUT:g}s"
                problems.append(
                    Problem(timeout_located.position, None, f"{where}.timeout", message)
                )
                continue
        script = base / Path(path_located.value).expanduser()
        name = "hook-script." + re.sub(r"[^A-Za-z0-9._-]", "-", script.name)
        name = name if name not in names else f"{name}.{index + 1}"
        names.add(name)
        hooks.append(
            HookSpec(
                name=name,
                on=tuple(EVENT_STAGES),
                action=HookAction(type="script", command=(str(script),), protocol=PROTOCOL),
                timeout=timeout,
                blocking=True,  # results merge serially, in the order the scripts are listed
                position=item.position,
            )
        )
    return hooks, problems
