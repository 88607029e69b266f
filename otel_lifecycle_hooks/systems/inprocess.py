"""In-process lifecycle hooks (seed 004): a `name` and `on_event(event)`, in Python.

    class AuditHook:
        name = "audit.tool-call"

        def on_event(self, event: AgentLifecycleEvent) -> None:
            if event.type is LifecycleEventType.AFTER_TOOL_CALL:
                audit_store.record(event.session_id, event.step, event.payload)

    registry = LifecycleHookRegistry()
    registry.register(AuditHook())          # no side effects: nothing is called yet
    session = AgentSession(engine, agent_name="a", in_process_hooks=registry)

Guarantees, as the seed gives them: every registered hook of an enabled plugin sees every
event; each runs isolated, so an exception it raises becomes a `LifecycleHookError` handed to
the error listeners and recorded on the session span as an `agent.lifecycle.error` event, and
never interrupts the agent or the other hooks. Here each hook also runs on a worker thread of
its own, in event order, so a hook that blocks delays only itself (the seed's advice, "make it
async", applied by the host).

Plugins ship hooks through the entry-point group `otel_lifecycle_hooks.hooks`: the entry point
names the plugin and points at a hook class, a hook instance, or a function called with a
`PluginContext` to register several. `LifecycleHookRegistry.discover()` lists them without
importing any; only plugins passed to `enable(...)` are loaded and run.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib.metadata import EntryPoint, entry_points
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from .. import events as ev
from ..engine.session import register_in_process_hooks
from ..errors import LifecycleHooksError

log = logging.getLogger("otel_lifecycle_hooks.systems.inprocess")

ENTRY_POINT_GROUP = "otel_lifecycle_hooks.hooks"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
DEFAULT_PLUGIN = "default"  # hooks registered directly, always enabled
QUEUE_LIMIT = 1024  # events waiting per hook; past it the oldest is dropped and logged
CLOSE_TIMEOUT = 5.0  # seconds a session's end waits for its hooks to catch up


class LifecycleEventType(StrEnum):
    """The ten points of one agent execution."""

    SESSION_START = "SESSION_START"
    SESSION_END = "SESSION_END"
    BEFORE_TURN = "BEFORE_TURN"
    AFTER_TURN = "AFTER_TURN"
    BEFORE_MODEL_REQUEST = "BEFORE_MODEL_REQUEST"
    AFTER_MODEL_RESPONSE = "AFTER_MODEL_RESPONSE"
    BEFORE_TOOL_CALL = "BEFORE_TOOL_CALL"
    AFTER_TOOL_CALL = "AFTER_TOOL_CALL"
    BEFORE_COMPACT = "BEFORE_COMPACT"
    ON_COMPACT = "ON_COMPACT"


# Which of this package's events is which point; both names of a turn's start open one turn.
EVENT_TYPES: Mapping[str, LifecycleEventType] = MappingProxyType(
    {
        "session-start": LifecycleEventType.SESSION_START,
        ev.POST_START: LifecycleEventType.SESSION_START,
        ev.SESSION_END: LifecycleEventType.SESSION_END,
        "prompt-submit": LifecycleEventType.BEFORE_TURN,
        "agent-start": LifecycleEventType.BEFORE_TURN,
        "agent-end": LifecycleEventType.AFTER_TURN,
        "model-start": LifecycleEventType.BEFORE_MODEL_REQUEST,
        "model-end": LifecycleEventType.AFTER_MODEL_RESPONSE,
        "tool-start": LifecycleEventType.BEFORE_TOOL_CALL,
        "tool-end": LifecycleEventType.AFTER_TOOL_CALL,
        "pre-compact": LifecycleEventType.BEFORE_COMPACT,
        "post-compact": LifecycleEventType.ON_COMPACT,
    }
)
# The event fields a point's human-readable message is taken from, first non-empty wins.
_MESSAGE_FIELDS = ("MESSAGE", "ERROR_MESSAGE", "TASK_SUMMARY", "ASSISTANT_TEXT", "PROMPT")


@dataclass(frozen=True)
class AgentLifecycleEvent:
    """What a hook is told. `attributes` is read-only (empty, never None)."""

    type: LifecycleEventType
    runtime: str | None = None
    session_id: str | None = None
    step: int = 0
    message: str | None = None
    payload: Any = None
    attributes: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", MappingProxyType(dict(self.attributes)))


@runtime_checkable
class AgentLifecycleHook(Protocol):
    """A hook: a unique `name` and `on_event`, which may raise."""

    name: str

    def on_event(self, event: AgentLifecycleEvent) -> None: ...


@dataclass(frozen=True)
class LifecycleHookError:
    """A hook's exception, as the error listeners receive it."""

    hook_name: str
    event: AgentLifecycleEvent
    exception: BaseException

    def __str__(self) -> str:
        return (
            f"lifecycle hook {self.hook_name!r} failed on {self.event.type.value}: "
            f"{type(self.exception).__name__}: {self.exception}"
        )


ErrorListener = Callable[[LifecycleHookError], None]


class HookRegistrationError(ValueError, LifecycleHooksError):
    """A hook refused at registration: a bad or duplicate name, or no `on_event`."""


def hook_name(hook: Any) -> str | None:
    """A hook's name: its `name` attribute, or what its `name()` method returns (Java style)."""
    name = getattr(hook, "name", None)
    if callable(name):
        name = name()
    return name if isinstance(name, str) else None


class PluginContext:
    """Handed to a plugin's registering function: it registers, and does nothing else."""

    def __init__(self, registry: LifecycleHookRegistry, plugin: str) -> None:
        self._registry = registry
        self.plugin = plugin

    def register(self, hook: AgentLifecycleHook) -> None:
        self._registry.register(hook, plugin=self.plugin)


class LifecycleHookRegistry:
    """The hooks of one agent, grouped by plugin; only enabled plugins' hooks run.

    Hooks registered directly belong to the always-enabled plugin "default"; entry-point
    plugins (`discover`) are loaded when they are enabled.
    """

    def __init__(self) -> None:
        self._hooks: dict[str, tuple[str, AgentLifecycleHook]] = {}  # name -> (plugin, hook)
        self._entry_points: dict[str, EntryPoint] = {}
        self._enabled: set[str] = {DEFAULT_PLUGIN}
        self._loaded: set[str] = set()
        self._lock = threading.Lock()
        self.error_listeners: list[ErrorListener] = []

    @classmethod
    def discover(cls, group: str = ENTRY_POINT_GROUP) -> LifecycleHookRegistry:
        """A registry knowing the plugins of an entry-point group; none is imported yet."""
        registry = cls()
        for entry_point in entry_points(group=group):
            registry._entry_points.setdefault(entry_point.name, entry_point)
        return registry

    @property
    def plugins(self) -> tuple[str, ...]:
        """The discovered plugins' names."""
        return tuple(sorted(self._entry_points))

    def enable(self, *plugins: str) -> LifecycleHookRegistry:
        """Let these plugins' hooks run; they are loaded (and register) now."""
        unknown = [p for p in plugins if p not in self._entry_points and p != DEFAULT_PLUGIN]
        if unknown:
            known = ", ".join(self.plugins) or "none"
            raise ValueError(
                f"unknown lifecycle hook plugin(s) {', '.join(unknown)}; discovered: {known}"
            )
        for plugin in plugins:
            self._enabled.add(plugin)
            self._load(plugin)
        return self

    def register(self, hook: AgentLifecycleHook, *, plugin: str = DEFAULT_PLUGIN) -> None:
        """Add a hook; refuses a bad or duplicate name. Never calls the hook."""
        name = hook_name(hook)
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise HookRegistrationError(
                f"lifecycle hook name {name!r}: start with a letter or digit, then letters, "
                "digits, '.', '_' or '-'"
            )
        if not callable(getattr(hook, "on_event", None)):
            raise HookRegistrationError(f"lifecycle hook {name!r} has no on_event(event) method")
        with self._lock:
            if name in self._hooks:
                raise HookRegistrationError(f"duplicate lifecycle hook id {name!r}")
            self._hooks[name] = (plugin, hook)

    def add_error_listener(self, listener: ErrorListener) -> None:
        """Told of every hook's exception (a listener that raises is logged and skipped)."""
        self.error_listeners.append(listener)

    def hooks(self) -> tuple[AgentLifecycleHook, ...]:
        """The hooks of enabled plugins, in registration order."""
        with self._lock:
            return tuple(hook for plugin, hook in self._hooks.values() if plugin in self._enabled)

    def _load(self, plugin: str) -> None:
        if plugin in self._loaded or plugin not in self._entry_points:
            return
        self._loaded.add(plugin)
        target = self._entry_points[plugin].load()
        if isinstance(target, type):
            target = target()
        if callable(getattr(target, "on_event", None)):
            self.register(target, plugin=plugin)
        elif callable(target):
            target(PluginContext(self, plugin))
        else:
            raise HookRegistrationError(
                f"plugin {plugin!r}: its entry point is neither a hook nor a registering function"
            )


class _HookWorker:
    """One hook's queue and thread: its events in order, its failures contained."""

    def __init__(
        self, hook: AgentLifecycleHook, on_error: Callable[[LifecycleHookError], None]
    ) -> None:
        self.hook = hook
        self.name = hook_name(hook) or "?"  # registration made sure it has one
        self._on_error = on_error
        self._events: deque[AgentLifecycleEvent] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(
            target=self._work, name=f"lifecycle-hook:{self.name}", daemon=True
        )
        self._thread.start()

    def offer(self, event: AgentLifecycleEvent) -> None:
        with self._cond:
            if self._closed:
                return
            if len(self._events) >= QUEUE_LIMIT:
                dropped = self._events.popleft()
                log.warning(
                    "lifecycle hook %s is behind: dropped a %s event", self.name, dropped.type.value
                )
            self._events.append(event)
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._events and not self._closed:
                    self._cond.wait()
                if not self._events:
                    return
                event = self._events.popleft()
                self._busy = True
            try:
                self.hook.on_event(event)
            except Exception as exc:  # noqa: BLE001 - a hook never interrupts the agent or the others
                self._on_error(LifecycleHookError(self.name, event, exc))
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._events and not self._busy, timeout)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class LifecycleHookDispatcher:
    """Hands every event to every hook, each on its own worker; exceptions become errors."""

    def __init__(
        self, hooks: Sequence[AgentLifecycleHook], on_error: Callable[[LifecycleHookError], None]
    ) -> None:
        self._workers = [_HookWorker(hook, on_error) for hook in hooks]

    def dispatch(self, event: AgentLifecycleEvent) -> None:
        for worker in self._workers:
            worker.offer(event)

    def flush(self, timeout: float) -> bool:
        """Wait until every hook has handled what it was given (True), or `timeout` passed."""
        deadline = time.monotonic() + timeout
        return all(w.wait_idle(max(0.0, deadline - time.monotonic())) for w in self._workers)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """Let the hooks finish their queues within `timeout`, then stop taking events."""
        caught_up = self.flush(timeout)
        for worker in self._workers:
            worker.close()
        return caught_up


class RecordingSession(Protocol):
    """What the in-process hooks need of their session (an `AgentSession`): its identity, and
    a way to record a hook's failure on it."""

    @property
    def metadata(self) -> Mapping[str, str]: ...

    @property
    def session_id(self) -> str: ...

    def record(self, event: str, fields: Mapping[str, Any] | None = None) -> Any: ...


class SessionHooks:
    """The in-process hooks of one `AgentSession`: turns its events into the ten points."""

    def __init__(
        self,
        hooks: LifecycleHookRegistry | Iterable[AgentLifecycleHook],
        session: RecordingSession,
    ) -> None:
        if isinstance(hooks, LifecycleHookRegistry):
            self._listeners: Sequence[ErrorListener] = hooks.error_listeners
            hooks = hooks.hooks()
        else:
            registry = LifecycleHookRegistry()
            for hook in hooks:
                registry.register(hook)
            self._listeners, hooks = (), registry.hooks()
        self._session = session
        self._dispatcher = LifecycleHookDispatcher(tuple(hooks), self._failed)
        self._lock = threading.Lock()
        self._started = False
        self._in_turn = False
        self.step = 0

    def observe(self, event: str, fields: Mapping[str, str]) -> None:
        """An event was recorded on the session: deliver the point it is, if any."""
        point = EVENT_TYPES.get(event)
        if point is None:
            return
        with self._lock:
            if point is LifecycleEventType.SESSION_START:
                if self._started:
                    return  # post-start and the harness's session-start are one start
                self._started = True
            elif point is LifecycleEventType.BEFORE_TURN:
                if self._in_turn:
                    return  # prompt-submit then agent-start open one turn
                self._in_turn = True
                self.step += 1
            elif point is LifecycleEventType.AFTER_TURN:
                self._in_turn = False
            step = self.step
        metadata = self._session.metadata
        message = next((fields[name] for name in _MESSAGE_FIELDS if fields.get(name)), None)
        self._dispatcher.dispatch(
            AgentLifecycleEvent(
                type=point,
                runtime=metadata.get("HARNESS_NAME") or None,
                session_id=self._session.session_id,
                step=step,
                message=message,
                payload=MappingProxyType(dict(fields)),
                attributes={
                    ev.ATTR_EVENT: event,
                    ev.ATTR_AGENT_NAME: metadata.get("AGENT_NAME", ""),
                },
            )
        )

    def _failed(self, error: LifecycleHookError) -> None:
        log.warning("%s", error)
        for listener in self._listeners:
            try:
                listener(error)
            except Exception:
                log.exception("a lifecycle hook error listener failed")
        try:
            self._session.record(
                ev.ERROR,
                {"ERROR_TYPE": "LifecycleHookError", "ERROR_MESSAGE": str(error)[:500]},
            )
        except Exception:
            log.debug("could not record the hook error on the session", exc_info=True)

    def flush(self, timeout: float) -> bool:
        return self._dispatcher.flush(timeout)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        return self._dispatcher.close(timeout)


# Sessions given `in_process_hooks=` build them with this: the engine never imports this module.
register_in_process_hooks(SessionHooks)
