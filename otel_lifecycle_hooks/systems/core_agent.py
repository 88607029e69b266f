"""core-agent's hook config (seed 001), read as script hooks.

    {"hooks": {"tool-start": [{"command": "sciontool hook --dialect=core-agent",
                               "timeout_seconds": 5}]}}

Each handler becomes one hook named `core-agent.<event>.<n>` that runs `sh -c <command>` (so
pipes and redirections work, as in core-agent) with core-agent's JSON envelope on stdin. The
hooks are blocking: core-agent runs the handlers of one event one after the other in the agent's
own loop, so a slow handler delays the next; a failing one is logged and never stops anything.

Rules, as core-agent's `Validate()` has them: event names must be known (here: every event of
this package, which includes core-agent's four), a timeout is a whole number of seconds, 0 or
absent means 10, and a negative one is refused.
"""

from __future__ import annotations

from typing import Any

from ..events import ALL_EVENTS
from ..template.model import HookAction, HookSpec
from ..template.problems import Located, Problem, describe, did_you_mean
from .wire import CORE_AGENT_PROTOCOL, event_context

DEFAULT_TIMEOUT_SECONDS = 10
PROTOCOL = CORE_AGENT_PROTOCOL
SHELL = "sh"


def hook_name(event: str, index: int) -> str:
    """`core-agent.tool-start.1`: the event and the handler's 1-based place in its list."""
    return f"core-agent.{event}.{index + 1}"


def read_core_agent_hooks(section: Located, file: str) -> tuple[list[HookSpec], list[Problem]]:
    """The hooks of core-agent's `hooks` map, or every problem found in it."""
    hooks: list[HookSpec] = []
    problems: list[Problem] = []
    for key, position, message in section.duplicate_keys:
        problems.append(Problem(position, None, f"hooks.{key}", message))
    for event, handlers in section.value.items():
        where = f"hooks.{event}"
        if event not in ALL_EVENTS:
            message = (
                f"unknown event{did_you_mean(event, sorted(ALL_EVENTS))}; "
                "core-agent fires tool-start, tool-end, model-start and agent-end"
            )
            problems.append(Problem(section.key_positions[event], None, where, message))
            continue
        if handlers.value is None:
            continue  # an empty entry is a no-op, as in core-agent
        if not handlers.is_list:
            message = (
                f'got {describe(handlers)}; write a list of handlers, e.g. [{{"command": "..."}}]'
            )
            problems.append(Problem(handlers.position, None, where, message))
            continue
        for index, handler in enumerate(handlers.value):
            hook = _read_handler(handler, event, index, file, problems)
            if hook is not None:
                hooks.append(hook)
    return hooks, problems


def _read_handler(
    handler: Located, event: str, index: int, file: str, problems: list[Problem]
) -> HookSpec | None:
    name = hook_name(event, index)
    if not handler.is_mapping:
        message = f'got {describe(handler)}; a handler is an object: {{"command": "..."}}'
        problems.append(Problem(handler.position, name, None, message))
        return None
    fields: dict[str, Located] = handler.value
    command = fields.get("command")
    before = len(problems)
    if command is None or not isinstance(command.value, str) or not command.value.strip():
        found = "missing" if command is None else f"got {describe(command)}"
        message = f'{found}; a handler runs a shell command, e.g. "command": "notify-send done"'
        problems.append(Problem((command or handler).position, name, "command", message))
    timeout = _read_timeout(fields.get("timeout_seconds"), name, problems)
    if len(problems) > before or command is None:
        return None
    return HookSpec(
        name=name,
        on=(event,),
        action=HookAction(type="script", command=(SHELL, "-c", command.value), protocol=PROTOCOL),
        timeout=float(timeout),
        blocking=True,
        position=handler.position,
    )


def _read_timeout(located: Located | None, name: str, problems: list[Problem]) -> int:
    if located is None or located.value is None:
        return DEFAULT_TIMEOUT_SECONDS
    value = located.value
    if isinstance(value, bool) or not isinstance(value, int):
        message = f"got {describe(located)}; write a whole number of seconds, e.g. 10"
        problems.append(Problem(located.position, name, "timeout_seconds", message))
        return DEFAULT_TIMEOUT_SECONDS
    if value < 0:
        message = (
            f"got {value}; a timeout cannot be negative "
            f"(0 or absent means {DEFAULT_TIMEOUT_SECONDS})"
        )
        problems.append(Problem(located.position, name, "timeout_seconds", message))
    return value or DEFAULT_TIMEOUT_SECONDS


def envelope(event: str, session_id: str, fields: dict[str, str]) -> dict[str, Any]:
    """core-agent's stdin: the event's payload with `hook_event_name` (and `session_id`,
    omitted when empty) at the top level, as `hook --dialect core-agent` reads it."""
    payload: dict[str, Any] = event_context(fields)
    payload["hook_event_name"] = event
    if session_id:
        payload["session_id"] = session_id
    return payload
