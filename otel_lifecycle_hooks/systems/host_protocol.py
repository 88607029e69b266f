"""The host-agnostic hook protocol (seed 003): `<script> <stage>`, one JSON object on stdin,
JSONL on stdout, the exit code honoured.

This host fires the stages of `EVENT_STAGES` (listed to scripts as `host.stages`), each under
its published name and, for the moments older scripts of the same family name differently,
under that name too (`tool_before`, `tool_after`, `idle`, `observe_message`). A script is
asked `discover` once, before its first other stage of a session (under `run`, at
pre-start); if it answers with `stages`, only those are fired for it, else every stage is
and it ignores the ones it does not handle, as on every host.

Every payload carries the published base (`hook`, `session {id, agent}`, `host {name,
version, stages}`, `prompts`) and each stage's own keys (`tool`, `args`, `callID`, `output`,
`answer`, `error`, ...), beside this package's own keys (`session_id`, `event`, `context`,
`agent`, `hook_name`, `timestamp`); see `request` and docs/hook-systems.md.

Its stdout is read line by line. Each JSON object line is a response: its `log` goes to the
hook log, its `result` is merged, and any other key (`deny`, `args`, `continue`, `system`,
...) is one this host cannot act on from outside a harness: it is written to the hook log and
to the execution's message (so the journal) as "not applied by this host". A line that is not
a JSON object is logged as the script's output. Results merge serially, first within one
script and then across the scripts of one event in the order they ran: arrays are
concatenated, scalars joined with a newline (an object is kept whole, the later one winning
key by key). The merged result of the event's stage is kept for the session as
`${HOOK_RESULT_<STAGE>}`, and each script's own as `${HOOK_<NAME>_RESPONSE}`.

Scripts are listed in a template under `hook_scripts:` (see docs/hook-systems.md); each
becomes a blocking script hook with `protocol: host-v1`.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from opentelemetry import trace

from .. import events as ev
from ..actions.base import AttemptResult
from ..engine.model import LifecycleEvent, SessionInfo
from ..template.durations import DurationError, parse_duration
from ..template.model import DEFAULT_SCRIPT_TIMEOUT, MAX_TIMEOUT, HookAction, HookSpec
from ..template.problems import Located, Problem, describe
from ..version import __version__
from .wire import HOST_PROTOCOL

PROTOCOL = HOST_PROTOCOL
HOST_NAME = "otel-lifecycle-hooks"
# The version of the published wire this host speaks (its base payload's `host.version`).
PROTOCOL_VERSION = 2
DISCOVER = "discover"

# The stages each event of ours fires: the published name first, then the older names of the
# same moment (opencode-evolve's `tool_before` / `tool_after`, `idle`, `observe_message`).
EVENT_STAGES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "tool-start": ("before_tool", "tool_before"),
        "tool-end": ("after_tool", "tool_after"),
        "model-start": ("before_turn",),
        "model-end": ("after_turn",),
        "agent-end": ("before_stop", "idle", "observe_message"),
        ev.ERROR: ("on_error",),
    }
)
# Discovery runs at the first event a script sees; under `run` that is pre-start.
DISCOVERY_EVENT = ev.PRE_START
STAGES: tuple[str, ...] = (DISCOVER, *(s for stages in EVENT_STAGES.values() for s in stages))

# The published prompt contract's names; this host has no prompt files, so each is "".
PROMPT_NAMES = ("preamble", "chat", "heartbeat", "compaction", "recover")

# Response keys this host acts on: `log` lines reach the hook log, `result` is merged and kept
# for later hooks, and `discover`'s `name` and `stages` say who the script is and what it
# handles. Everything else would need the harness's cooperation.
APPLIED_KEYS = frozenset({"log", "result"})
# `deny` at the stages before a tool runs is a gate's refusal (engine/gates.py): the harness
# is told in its own protocol where it can refuse a tool call (docs/gates.md).
DENY_STAGES = frozenset({"before_tool", "tool_before"})
DENY_KEY = "deny"
DISCOVER_APPLIED_KEYS = APPLIED_KEYS | {"name", "stages"}

NOT_APPLIED_STREAM = "not-applied"
# On the hook's span: one event per stage whose answer held keys this host cannot act on, and
# an attribute of the same name listing the notes (the words the journal's message holds).
NOT_APPLIED_EVENT = "agent.lifecycle_hook.not_applied"
ATTR_STAGE = "agent.lifecycle_hook.stage"
ATTR_RESPONSE_KEYS = "agent.lifecycle_hook.response_keys"


def stages_for(event: str) -> tuple[str, ...]:
    """The stages `event` fires (none for an event this host maps to no stage)."""
    return EVENT_STAGES.get(event, ())


def host_descriptor() -> dict[str, Any]:
    """`host` of every payload: who this host is and the stages it fires."""
    return {
        "name": HOST_NAME,
        "version": PROTOCOL_VERSION,
        "host_version": __version__,
        "protocol": PROTOCOL,
        "stages": list(STAGES),
    }


def request(
    stage: str,
    session_id: str,
    context: Mapping[str, Any],
    *,
    fields: Mapping[str, str] | None = None,
    agent_name: str = "",
) -> dict[str, Any]:
    """The one JSON object a script reads on stdin: the published base and the stage's keys,
    then this package's own keys (`context` and the rest), which never override them."""
    payload: dict[str, Any] = {
        "hook": stage,
        "session": {"id": session_id, "agent": agent_name},
        "host": host_descriptor(),
        "prompts": dict.fromkeys(PROMPT_NAMES, ""),
        **stage_keys(stage, fields or {}),
    }
    payload["session_id"] = session_id
    for key, value in context.items():
        payload.setdefault(key, value)
    return payload


def stage_keys(stage: str, fields: Mapping[str, str]) -> dict[str, Any]:
    """What the published protocol gives `stage`, read from the event's fields."""
    tool = fields.get("TOOL_NAME", "")
    if stage in ("before_tool", "tool_before", "after_tool", "tool_after"):
        keys: dict[str, Any] = {"tool": tool, "args": tool_arguments(fields.get("TOOL_INPUT"))}
        call_id = fields.get("TOOL_CALL_ID")
        if call_id:
            keys["callID"] = keys["call_id"] = call_id
        if stage in ("after_tool", "tool_after"):
            output = fields.get("TOOL_OUTPUT", "")
            keys.update(title=tool, output=output, result=output)
            if fields.get("ERROR_MESSAGE"):
                keys["error"] = fields["ERROR_MESSAGE"]
        return keys
    if stage in ("before_stop", "idle", "observe_message"):
        error = fields.get("ERROR_MESSAGE") or fields.get("ERROR_TYPE") or ""
        # This host observes from outside the harness: it can never re-enter the loop.
        keys = {"answer": fields.get("ASSISTANT_TEXT", ""), "final": True}
        keys["exit_reason"] = "error" if error else "stop"
        if error:
            keys["error"] = error
        return keys
    if stage == "on_error":
        return {"error": fields.get("ERROR_MESSAGE") or fields.get("ERROR_TYPE") or ""}
    return {}


def tool_arguments(text: str | None) -> Any:
    """A tool's input (JSON text in TOOL_INPUT) as the object a script reads as `args`; {}
    when the harness gave none, or gave more than an event carries (cut, so not JSON)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"input": value}


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
    """Reads a script's stdout as it arrives: results merged, `log` lines passed on, other
    response keys kept (merged the same way) in `others`."""

    def __init__(self, on_log: Callable[[str], None]) -> None:
        self.result: Any = None
        self.others: dict[str, Any] = {}
        self._on_log = on_log

    def line(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        if not isinstance(message, dict) or not message:
            if text.strip():
                self._on_log(text)  # not protocol: the script's own output, logged as is
            return
        for key, value in message.items():
            if key == "log":
                self._on_log(_scalar_text(value))
            elif key == "result":
                self.result = merge(self.result, value)
            else:
                self.others[key] = merge(self.others.get(key), value)


def not_applied(stage: str, keys: Sequence[str]) -> str:
    """The words recorded for response keys this host cannot act on."""
    return f"{stage}: {', '.join(keys)} not applied by this host"


class Registration(NamedTuple):
    """What a script's `discover` answer told this host."""

    name: str
    stages: frozenset[str] | None  # None: it did not say, so every stage is fired


def _registration_key(hook: str) -> str:
    # Kept with the session's captured values, so it lives and dies with the session; the
    # space keeps it out of reach of any `${...}` reference.
    return f"host-v1 registration {hook}"


def registration_of(session: SessionInfo, hook: str) -> Registration | None:
    """What `hook`'s script answered to `discover` in this session, if it was asked."""
    found = session.captured_snapshot().get(_registration_key(hook))
    return found if isinstance(found, Registration) else None


def read_registration(default_name: str, reader: StdoutReader) -> Registration:
    """A `discover` answer: the script's `name` and the `stages` it handles (those this host
    fires; an answer without a list of them registers it for every stage)."""
    name = reader.others.get("name")
    stages = reader.others.get("stages")
    handled: frozenset[str] | None = None
    if isinstance(stages, list):
        handled = frozenset(s for s in stages if isinstance(s, str) and s in STAGES)
    return Registration(name if isinstance(name, str) and name else default_name, handled)


# --- `discover` answers kept between processes (`hook --template`, no supervisor) ---------------

# The key of the session's part of the harness state file that keeps the answers.
DISCOVERY_CACHE_KEY = "host_v1_discover"


def script_identity(path: str) -> list[int] | None:
    """What tells one version of a script file from another: device, inode, size and mtime
    (ns); None when it cannot be read."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return [found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns]


def _protocol_scripts(hooks: Sequence[HookSpec]) -> list[tuple[str, str]]:
    """(hook name, script path) of each hook of this protocol."""
    return [
        (hook.name, hook.action.command[0])
        for hook in hooks
        if hook.action.type == "script" and hook.action.protocol == PROTOCOL
    ]


def restore_registrations(
    hooks: Sequence[HookSpec], kept: object, session: SessionInfo
) -> dict[str, list[int]]:
    """Give `session` the `discover` answers kept for `hooks`' scripts (the part of the state
    file `keep_registrations` wrote), so `discover` is not asked again; returns each script's
    identity as it is now, for `keep_registrations`.

    The state file is writable by the agent, so a kept answer can only narrow what runs: it
    is read only for a script the template lists, under that script's path, and only while
    the file's identity is the one recorded when it answered; its stages are cut to those
    this host fires, so at most the stages the event fires are run (as for a script that
    named none), never another script or stage. Anything else is ignored: `discover` is
    asked again."""
    identities: dict[str, list[int]] = {}
    answers = kept if isinstance(kept, Mapping) else {}
    for hook_name, path in _protocol_scripts(hooks):
        identity = script_identity(path)
        if identity is None:
            continue
        identities[path] = identity
        answer = answers.get(path)
        if not isinstance(answer, Mapping) or answer.get("identity") != identity:
            continue
        stages, name = answer.get("stages"), answer.get("name")
        if not isinstance(stages, list):
            continue  # only an answer that named its stages is kept; anything else asks again
        registration = Registration(
            name if isinstance(name, str) and name else hook_name,
            frozenset(s for s in stages if isinstance(s, str) and s in STAGES),
        )
        session.capture({_registration_key(hook_name): registration})
    return identities


def keep_registrations(
    hooks: Sequence[HookSpec], session: SessionInfo, identities: Mapping[str, list[int]]
) -> dict[str, Any]:
    """The `discover` answers of this session that named their stages, by script path, each
    with the script's identity from before it was asked (a script changed since is asked
    again next time), for the state file."""
    kept: dict[str, Any] = {}
    for hook_name, path in _protocol_scripts(hooks):
        registration = registration_of(session, hook_name)
        identity = identities.get(path)
        if registration is None or registration.stages is None or identity is None:
            continue  # an answer without stages (or a failed discover) is asked again
        kept[path] = {
            "identity": identity,
            "name": registration.name,
            "stages": sorted(registration.stages),
        }
    return kept


# Runs the script once: (stage, the stdin bytes, seconds it may take, where its output lines
# go as (stream, line)) -> how that run ended.
ScriptRun = Callable[[str, bytes, float, Callable[[str, str], None]], AttemptResult]
LogLine = Callable[[str, str], None]  # (stream, line) -> the hook log


def run_event(
    hook_name: str,
    event: LifecycleEvent,
    session: SessionInfo,
    context: Mapping[str, Any],
    run: ScriptRun,
    log_line: LogLine,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
) -> AttemptResult:
    """One attempt of a protocol script for `event`: `discover` first if this session has not
    asked it yet, then each stage the event fires that the script handles, one after the
    other within `timeout`. The first failing run is the attempt's result; every response
    key this host cannot act on is logged and named in the result's message."""
    started = clock()
    agent_name = session.metadata.get("AGENT_NAME", "")
    notes: list[str] = []
    not_applied_notes: list[str] = []  # for the span: only these, never a run's message
    denials: list[str] = []  # the reasons of `deny` answers before a tool

    def ask(stage: str, left: float) -> tuple[AttemptResult, StdoutReader]:
        reader = StdoutReader(lambda line: log_line("log", line))

        def on_output(stream: str, line: str) -> None:
            reader.line(line) if stream == "stdout" else log_line(stream, line)

        payload = request(stage, session.session_id, context, fields=event.fields,
                          agent_name=agent_name)  # fmt: skip
        outcome = run(stage, json.dumps(payload, ensure_ascii=False).encode(), left, on_output)
        applied = DISCOVER_APPLIED_KEYS if stage == DISCOVER else APPLIED_KEYS
        if stage in DENY_STAGES:
            applied = applied | {DENY_KEY}
            reason = deny_reason(reader.others.get(DENY_KEY), hook_name)
            if reason is not None:
                denials.append(reason)
        unapplied = [key for key in reader.others if key not in applied]
        if unapplied:
            note = not_applied(stage, unapplied)
            log_line(NOT_APPLIED_STREAM, note)
            notes.append(note)
            not_applied_notes.append(note)
            mark_not_applied(stage, unapplied, not_applied_notes)
        return outcome, reader

    registration = registration_of(session, hook_name)
    discovery: AttemptResult | None = None
    if registration is None:
        discovery, reader = ask(DISCOVER, timeout)
        registration = read_registration(hook_name, reader)
        session.capture({_registration_key(hook_name): registration})
        if not discovery.ok:
            notes.append(f"discover: {discovery.message}; every stage is fired")
    stages = [
        stage
        for stage in stages_for(event.name)
        if registration.stages is None or stage in registration.stages
    ]
    if not stages:
        # Only the event `discover` belongs to (or a failed `discover`) is the discovery's
        # result; any other event ran none of its stages, so it is skipped, not a success.
        if discovery is not None and (not discovery.ok or event.name == DISCOVERY_EVENT):
            return _with_notes(discovery._replace(duration=clock() - started), notes)
        skipped = AttemptResult(
            "ok",
            clock() - started,
            skipped=True,
            message=f"{event.name} fires no stage this script handles",
        )
        return _with_notes(skipped, notes)
    failure: AttemptResult | None = None
    merged: Any = None
    for stage in stages:
        left = timeout - (clock() - started)
        if left <= 0:
            failure = failure or AttemptResult(
                "timeout", clock() - started, error_type="timeout",
                message=f"no time left for {stage} within {timeout:g}s",
            )  # fmt: skip
            break
        outcome, reader = ask(stage, left)
        if reader.result is not None:
            remember_result(session, stage, event.event_id, reader.result)
            merged = merge(merged, reader.result)
        if not outcome.ok and failure is None:
            failure = outcome._replace(message=f"{stage}: {outcome.message}")
        if outcome.kind == "timeout":
            break
    result = failure or AttemptResult("ok", 0.0, exit_code=0)
    result = result._replace(duration=clock() - started)
    if merged is not None:
        result = result._replace(response_body=result_text(merged).encode("utf-8"))
    if denials:
        result = result._replace(decision=("deny", "; ".join(denials)))
    return _with_notes(result, notes)


def deny_reason(value: Any, hook_name: str) -> str | None:
    """The reason of a `deny` answer (`{"reason": ...}`, a text, or `true`); None when it is
    not a refusal (absent, `false`, empty)."""
    if isinstance(value, dict):
        reason = value.get("reason")
        value = reason if isinstance(reason, str) and reason.strip() else True
    if isinstance(value, list):  # merged from several lines: any refusal refuses
        reasons = [r for r in (deny_reason(v, hook_name) for v in value) if r is not None]
        return "; ".join(reasons) if reasons else None
    if isinstance(value, str) and value.strip():
        return value
    if value is True:
        return f"refused by {hook_name}"
    return None


def mark_not_applied(stage: str, keys: Sequence[str], notes: Sequence[str]) -> None:
    """Put response keys this host cannot act on on the hook's span (the current one while
    the attempt runs): an event per stage, and the not-applied notes so far as one attribute."""
    span = trace.get_current_span()
    span.add_event(NOT_APPLIED_EVENT, {ATTR_STAGE: stage, ATTR_RESPONSE_KEYS: tuple(keys)})
    span.set_attribute(NOT_APPLIED_EVENT, tuple(notes))


def _with_notes(result: AttemptResult, notes: Sequence[str]) -> AttemptResult:
    if not notes:
        return result
    message = "; ".join(([result.message] if result.message else []) + list(notes))
    return result._replace(message=message)


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
                message = (
                    f"got {timeout_located.text()}; "
                    f"write a duration above 0, at most {MAX_TIMEOUT:g}s"
                )
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
                on=(DISCOVERY_EVENT, *EVENT_STAGES),
                action=HookAction(type="script", command=(str(script),), protocol=PROTOCOL),
                timeout=timeout,
                blocking=True,  # results merge serially, in the order the scripts are listed
                position=item.position,
            )
        )
    return hooks, problems
