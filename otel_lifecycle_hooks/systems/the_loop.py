"""the-loop's lifecycle hooks (seed 002): in-process Python executors and remote JSON-RPC ones.

    hooks:
      - name: house-policy
        path: hooks/policy.py        # a class with one method per point, beside this file
        on: [work_item_start, session_spawn]
        required: true               # its failure at a point that carries proceed refuses
      - name: telemetry
        module: acme_loop_hooks.telemetry
        with: {team: platform}
      - name: compliance
        url: https://hooks.acme.example/the-loop
        tokenEnv: ACME_HOOKS_TOKEN
        timeoutSeconds: 10

Reading a file imports and contacts nothing (`list` and `validate` stay safe); a local
executor is imported when it is first called. How the six points map onto this package's
events (`POINT_EVENTS`) is documented in docs/hook-systems.md.

A point's answer: `None` passes; a mapping holds decisions. Of the decisions, this host applies
`proceed: false` (with an optional `reason`), which at a point that carries proceed refuses the
transition when the hook is `required`; the answer is kept as `${HOOK_<NAME>_RESPONSE}` for the
hooks after it. Anything else is the executor answering badly: its failure.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import re
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from .. import events as ev
from ..actions.base import AttemptResult
from ..actions.python import call_bounded
from ..errors import LifecycleHooksError
from ..template.condition import Condition
from ..template.model import MAX_TIMEOUT, AuthSpec, HookAction, HookSpec
from ..template.problems import Located, Problem, describe, did_you_mean, quote
from ..template.validate import _host, _is_loopback  # the template rules' own URL checks

# The six points, in the order the-loop reaches them, and the event of ours each one is.
POINTS: tuple[str, ...] = (
    "work_item_start",
    "session_spawn",
    "session_spawned",
    "waiting_for_input",
    "phase_changed",
    "work_item_complete",
)
POINT_EVENTS: Mapping[str, str] = MappingProxyType(
    {
        "work_item_start": ev.PRE_START,
        "session_spawn": ev.PRE_START,
        "session_spawned": ev.POST_START,
        "waiting_for_input": ev.ACTIVITY_CHANGE,
        "phase_changed": ev.PHASE_CHANGE,
        "work_item_complete": ev.TASK_COMPLETED,
    }
)
# Points that carry `proceed`: a required hook's failure there refuses the operation.
PROCEED_POINTS: frozenset[str] = frozenset({"work_item_start", "session_spawn"})

NAME_PATTERN = re.compile(r"[a-z][a-z0-9-]*")
KEYS: tuple[str, ...] = (
    "name",
    "module",
    "path",
    "url",
    "executor",
    "with",
    "tokenEnv",
    "headers",
    "timeoutSeconds",
    "on",
    "required",
    "enabled",
)
LOCAL_KEYS = ("executor", "with")
REMOTE_KEYS = ("tokenEnv", "headers", "timeoutSeconds")
DEFAULT_TIMEOUT = 10.0
# Only activity changes into waiting_for_input are the-loop's waiting_for_input point.
WAITING_CONDITION = f"EVENT != {ev.ACTIVITY_CHANGE} or ACTIVITY == waiting_for_input"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Entry:
    """Collects the problems of one entry of `hooks:`."""

    def __init__(self, located: Located, index: int, problems: list[Problem]) -> None:
        self.located = located
        self.fields: dict[str, Located] = located.value
        self.name: str | None = None
        self.index = index
        self._problems = problems
        self.count = 0

    def report(self, where: Located, field_name: str | None, message: str) -> None:
        self.count += 1
        path = f"hooks[{self.index}].{field_name}" if field_name else f"hooks[{self.index}]"
        self._problems.append(Problem(where.position, self.name, path, message))


def read_the_loop_hooks(section: Located, file: str) -> tuple[list[HookSpec], list[Problem]]:
    """The hooks of the-loop's `hooks:` list, or every problem found in it."""
    hooks: list[HookSpec] = []
    problems: list[Problem] = []
    seen: dict[str, Located] = {}
    base = Path(file).resolve().parent
    for index, located in enumerate(section.value):
        if not located.is_mapping:
            message = (
                f"got {describe(located)}; "
                "each entry is a mapping with name and one of module, path or url"
            )
            problems.append(Problem(located.position, None, f"hooks[{index}]", message))
            continue
        entry = _Entry(located, index, problems)
        hook = _read_entry(entry, base, seen)
        if hook is not None and entry.count == 0:
            hooks.append(hook)
    return hooks, problems


def _read_entry(entry: _Entry, base: Path, seen: dict[str, Located]) -> HookSpec | None:
    fields = entry.fields
    for key, position, message in entry.located.duplicate_keys:
        entry.report(Located(None, position), key, message)
    for key, position in entry.located.key_positions.items():
        if key not in KEYS:
            entry.report(
                Located(None, position),
                key,
                f"unknown key{did_you_mean(key, KEYS)}; valid keys are {', '.join(KEYS)}",
            )
    name = _read_name(entry, seen)
    kinds = [key for key in ("module", "path", "url") if key in fields]
    if len(kinds) != 1:
        found = "none" if not kinds else " and ".join(kinds)
        entry.report(
            entry.located,
            None,
            f"names {found}; each entry names exactly one of module, path or url",
        )
        return None
    kind = kinds[0]
    wrong = REMOTE_KEYS if kind != "url" else LOCAL_KEYS
    for key in wrong:
        if key in fields:
            side = "remote (url)" if key in REMOTE_KEYS else "local (module, path)"
            entry.report(fields[key], key, f"applies to {side} entries only")
    points = _read_points(entry)
    required = _read_bool(entry, "required", False)
    enabled = _read_bool(entry, "enabled", True)
    if kind == "url":
        action, timeout = _read_remote(entry, points)
    else:
        action, timeout = _read_local(entry, kind, base, points), DEFAULT_TIMEOUT
    if name is None or action is None or entry.count:
        return None
    events = tuple(dict.fromkeys(POINT_EVENTS[p] for p in points))
    refusable = frozenset(POINT_EVENTS[p] for p in points if p in PROCEED_POINTS)
    return HookSpec(
        name=name,
        on=events,
        action=action,
        # Only a required hook is waited for: it alone can refuse (seed 002, `required`).
        on_error="fail" if required else "log",
        timeout=timeout,
        blocking=required,
        condition=Condition(WAITING_CONDITION) if ev.ACTIVITY_CHANGE in events else None,
        enabled=enabled,
        position=entry.located.position,
        refuse_on=refusable if required else None,
    )


def _read_name(entry: _Entry, seen: dict[str, Located]) -> str | None:
    located = entry.fields.get("name")
    if located is None:
        entry.report(
            entry.located, "name", 'missing; every entry needs a name, e.g. name: "house-policy"'
        )
        return None
    if not isinstance(located.value, str) or not NAME_PATTERN.fullmatch(located.value):
        entry.report(
            located,
            "name",
            f"got {describe(located)}; a name matches ^[a-z][a-z0-9-]*$, e.g. house-policy",
        )
        return None
    entry.name = located.value
    first = seen.setdefault(located.value, located)
    if first is not located:
        where = f"line {first.position.line}, column {first.position.column}"
        entry.report(
            located,
            "name",
            f"duplicate: {where} already names {quote(located.value)}; names are unique",
        )
    return located.value


def _read_points(entry: _Entry) -> tuple[str, ...]:
    located = entry.fields.get("on")
    if located is None:
        return POINTS  # local: narrowed at call time to the methods the class defines
    items = (
        [located] if isinstance(located.value, str) else located.value if located.is_list else None
    )
    if not items:
        entry.report(
            located, "on", f"got {describe(located)}; write a list of points: {', '.join(POINTS)}"
        )
        return ()
    points: list[str] = []
    for item in items:
        if item.value in POINTS:
            points.append(item.value)
        else:
            hint = did_you_mean(str(item.value), POINTS)
            entry.report(
                item,
                "on",
                f"got {describe(item)}, not a hook point{hint}; "
                f"valid points are {', '.join(POINTS)}",
            )
    return tuple(p for p in POINTS if p in points)


def _read_bool(entry: _Entry, key: str, default: bool) -> bool:
    located = entry.fields.get(key)
    if located is None:
        return default
    if not isinstance(located.value, bool):
        entry.report(located, key, f"got {describe(located)}; write true or false")
        return default
    return located.value


def _read_local(entry: _Entry, kind: str, base: Path, points: tuple[str, ...]) -> HookAction | None:
    located = entry.fields[kind]
    if not isinstance(located.value, str) or not located.value:
        entry.report(
            located, kind, f"got {describe(located)}; write a dotted module name or a .py path"
        )
        return None
    module = path = None
    if kind == "module":
        if not all(part.isidentifier() for part in located.value.split(".")):
            entry.report(
                located, "module", f"got {describe(located)}; write an importable dotted name"
            )
        module = located.value
    else:
        # Relative to this file's directory, never to a work item's checkout.
        path = str((base / Path(located.value).expanduser()).resolve())
    executor = entry.fields.get("executor")
    if executor is not None and not (
        isinstance(executor.value, str) and executor.value.isidentifier()
    ):
        entry.report(
            executor, "executor", f"got {describe(executor)}; write an attribute name of the module"
        )
    with_args: dict[str, Any] = {}
    with_located = entry.fields.get("with")
    if with_located is not None:
        if with_located.is_mapping:
            with_args = {key: _plain(value) for key, value in with_located.value.items()}
        elif with_located.value is not None:
            entry.report(
                with_located,
                "with",
                f"got {describe(with_located)}; write a mapping of keyword arguments",
            )
    return HookAction(
        type="python",
        module=module,
        path=path,
        executor=executor.value if executor is not None else None,
        with_args=MappingProxyType(with_args),
        points=_points_by_event(points),
    )


def _read_remote(entry: _Entry, points: tuple[str, ...]) -> tuple[HookAction | None, float]:
    located = entry.fields["url"]
    url = located.value if isinstance(located.value, str) else ""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    host = _host(url) if scheme in ("http", "https") else None
    if scheme not in ("http", "https") or not host:
        entry.report(
            located,
            "url",
            "is not an absolute http(s) URL; write https://... (or http:// to a loopback host)",
        )
    token_env = _read_token_env(entry)
    if token_env and scheme == "http" and host and not _is_loopback(host):
        entry.report(
            located,
            "url",
            "plain http to a non-loopback host with tokenEnv set; "
            "a bearer token never travels in clear: use https",
        )
    headers = _read_headers(entry)
    timeout = DEFAULT_TIMEOUT
    timeout_located = entry.fields.get("timeoutSeconds")
    if timeout_located is not None:
        value = timeout_located.value
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 < value <= MAX_TIMEOUT
        ):
            entry.report(
                timeout_located,
                "timeoutSeconds",
                f"got {describe(timeout_located)}; "
                f"write a number of seconds above 0, at most {MAX_TIMEOUT:g}",
            )
        else:
            timeout = float(value)
    auth = AuthSpec(type="bearer-token", token_env=token_env) if token_env else AuthSpec()
    action = HookAction(
        type="jsonrpc",
        url=url,
        headers=MappingProxyType(headers),
        auth=auth,
        points=_points_by_event(points),
    )
    return action, timeout


def _read_token_env(entry: _Entry) -> str | None:
    located = entry.fields.get("tokenEnv")
    if located is None:
        return None
    if not isinstance(located.value, str) or not _ENV_NAME.fullmatch(located.value):
        # Never echo the text: someone may have pasted the token itself here.
        entry.report(
            located,
            "tokenEnv",
            "is not a variable name; name the variable that holds the token, never the token",
        )
        return None
    return located.value


def _read_headers(entry: _Entry) -> dict[str, str]:
    located = entry.fields.get("headers")
    if located is None or located.value is None:
        return {}
    if not located.is_mapping:
        entry.report(
            located, "headers", f"got {describe(located)}; write a mapping of header: value"
        )
        return {}
    headers: dict[str, str] = {}
    for key, value in located.value.items():
        if key.lower() == "authorization":
            entry.report(
                value,
                f"headers.{key}",
                "an Authorization header is refused here; name the token's variable under tokenEnv",
            )
        elif not value.is_scalar or value.value is None or any(c in value.text() for c in "\r\n\0"):
            entry.report(value, f"headers.{key}", "write one line of text")
        else:
            headers[key] = value.text()
    return headers


def _points_by_event(points: tuple[str, ...]) -> Mapping[str, tuple[str, ...]]:
    by_event: dict[str, tuple[str, ...]] = {}
    for point in points:
        event = POINT_EVENTS[point]
        by_event[event] = by_event.get(event, ()) + (point,)
    return MappingProxyType(by_event)


def _plain(located: Located) -> Any:
    if located.is_mapping:
        return {key: _plain(value) for key, value in located.value.items()}
    if located.is_list:
        return [_plain(item) for item in located.value]
    return located.value


# --- running a local executor ---------------------------------------------------------------

_instances: dict[tuple[Any, ...], Any] = {}
_instances_lock = threading.Lock()


class ExecutorLoadError(LifecycleHooksError):
    """A local executor that cannot be imported, found or constructed."""


def load_executor(action: HookAction) -> Any:
    """The executor object of a local entry, built once per process (as the-loop's daemon
    builds it once); raises `ExecutorLoadError`."""
    key = (
        action.module,
        action.path,
        action.executor,
        json.dumps(dict(action.with_args), sort_keys=True, default=str),
    )
    with _instances_lock:
        if key not in _instances:
            _instances[key] = _build(action)
        return _instances[key]


def forget_executors() -> None:
    """Drop every built executor, so that the next call imports and constructs afresh."""
    with _instances_lock:
        _instances.clear()


def _build(action: HookAction) -> Any:
    module = _import(action)
    if action.executor:
        if not hasattr(module, action.executor):
            raise ExecutorLoadError(f"{module.__name__} has no attribute {action.executor!r}")
        target = getattr(module, action.executor)
    else:
        classes = [
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj) and obj.__module__ == module.__name__ and _defined_points(obj)
        ]
        if len(classes) != 1:
            found = ", ".join(sorted(c.__name__ for c in classes)) or "none"
            raise ExecutorLoadError(
                f"{module.__name__} defines {len(classes)} executor classes ({found}); "
                "name one with executor"
            )
        target = classes[0]
    if not inspect.isclass(target):
        if action.with_args:
            raise ExecutorLoadError(
                f"{action.executor} is an instance; `with` applies to a class only"
            )
        return target
    try:
        return target(**dict(action.with_args))
    except Exception as exc:
        raise ExecutorLoadError(
            f"constructing {target.__name__} raised {type(exc).__name__}: {exc}"
        ) from exc


def _import(action: HookAction) -> ModuleType:
    try:
        if action.module:
            return importlib.import_module(action.module)
        assert action.path is not None
        name = "the_loop_hook_" + re.sub(r"\W", "_", action.path)
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, action.path)
        if spec is None or spec.loader is None:
            raise ExecutorLoadError(f"{action.path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return module
    except ExecutorLoadError:
        raise
    except Exception as exc:
        raise ExecutorLoadError(
            f"cannot import {action.module or action.path}: {type(exc).__name__}: {exc}"
        ) from exc


def _defined_points(cls: type) -> list[str]:
    """The points a class handles: the methods of those names it (or its own bases) define."""
    return [point for point in POINTS if callable(getattr(cls, point, None))]


def call_local(
    action: HookAction, event: str, context: dict[str, Any], timeout: float
) -> AttemptResult:
    """Call the executor's method for each point of `event`, in order, within `timeout`."""

    def call() -> list[tuple[str, Any]]:
        executor = load_executor(action)
        answers = []
        for point in action.points.get(event, ()):
            method = getattr(executor, point, None)
            if callable(method):  # a point the class does not define is not run
                answers.append((point, method({**context, "point": point})))
        return answers

    outcome = call_bounded(call, timeout, name="executor")
    if not outcome.result.ok:
        return outcome.result
    if not outcome.value:
        return AttemptResult(
            "ok",
            outcome.result.duration,
            skipped=True,
            message="the executor defines no method for this point",
        )
    return decide(outcome.value, outcome.result.duration)


def decide(answers: list[tuple[str, Any]], duration: float) -> AttemptResult:
    """What the answers of one event's points mean: pass, decisions, a refusal or garbage."""
    decisions: dict[str, Any] = {}
    for point, answer in answers:
        if answer is None:
            continue
        if not isinstance(answer, Mapping):
            return AttemptResult(
                "permanent",
                duration,
                error_type="BadAnswer",
                message=(
                    f"{point} answered {type(answer).__name__}; "
                    "expected null or an object of decisions"
                ),
            )
        decisions.update(answer)
        if answer.get("proceed") is False:
            reason = str(answer.get("reason") or "no reason given")[:300]
            return AttemptResult(
                "permanent",
                duration,
                error_type="refused",
                message=f"{point}: proceed refused: {reason}",
                response_body=_json(decisions),
                response_content_type="application/json",
            )
    return AttemptResult(
        "ok",
        duration,
        response_body=_json(decisions) if decisions else None,
        response_content_type="application/json",
    )


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
