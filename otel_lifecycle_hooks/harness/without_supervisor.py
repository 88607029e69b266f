"""Firing hooks when no supervisor runs: track activity in the state file, run hooks in-process.

`hook` and `status` come here when no supervisor is reachable and a template is given
(`--template`, or `$LIFECYCLE_HOOKS_TEMPLATE`, `os.pathsep`-separated). Each call is a new
process, so what makes one harness session whole lives in the state file, keyed by the
harness's session id: the activity tracker, the session id hooks see as SESSION_ID, the agent's
name, the trace context of the session's first span (so that every later call's spans join
the same trace and trace file) and the `discover` answers of its host-protocol scripts.

Under the state file's lock: load the state, move the session's tracker, hand the derived
events to `standalone.fire(template_paths, derived, entry)` (`entry` is the session's
part of the state: `fire` reads and keeps its own keys there), save the state. A `status`
signal goes to the session that reported last.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import LifecycleHooksError
from . import socket_client
from . import state as state_file
from .activity import ActivityTracker, Derived, turn_end_completes_task
from .normalized import NormalizedEvent

TEMPLATE_ENV = "OTEL_LIFECYCLE_HOOKS_TEMPLATE"
# Sessions kept in the state file; the least recently active ones are forgotten first.
MAX_SESSIONS = 64


class EngineMissing(RuntimeError, LifecycleHooksError):
    """The in-process engine (`standalone`) cannot be imported."""


def template_paths(given: Sequence[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """The templates named on the command line, else those of $LIFECYCLE_HOOKS_TEMPLATE."""
    return socket_client.template_paths(given, os.environ if environ is None else environ)


def fire_events(
    templates: list[str],
    events: Sequence[NormalizedEvent],
    environ: Mapping[str, str] | None = None,
) -> list[Derived]:
    """Observe `events` and fire every derived event's hooks; returns what was derived."""
    derived: list[Derived] = []
    for harness_session_id, dialect, batch in _by_session(events):
        derived += _with_tracker(
            templates,
            environ,
            harness_session_id,
            dialect,
            _observe_all(batch),
        )
    return derived


def _observe_all(batch: list[NormalizedEvent]) -> Callable[[ActivityTracker], list[Derived]]:
    return lambda tracker: [derived for event in batch for derived in tracker.observe(event)]


def fire_signal(
    templates: list[str], status: str, message: str, environ: Mapping[str, str] | None = None
) -> list[Derived]:
    """Apply an explicit status signal to the session that reported last and fire the hooks."""
    return _with_tracker(templates, environ, None, "", lambda t: t.signal(status, message))


def _by_session(
    events: Sequence[NormalizedEvent],
) -> list[tuple[str, str, list[NormalizedEvent]]]:
    groups: dict[str, tuple[str, list[NormalizedEvent]]] = {}
    for event in events:
        groups.setdefault(event.session_id, (event.dialect, []))[1].append(event)
    return [(key, dialect, batch) for key, (dialect, batch) in groups.items()]


def _with_tracker(
    templates: list[str],
    environ: Mapping[str, str] | None,
    harness_session_id: str | None,  # None: the session that reported last
    dialect: str,
    derive: Callable[[ActivityTracker], list[Derived]],
) -> list[Derived]:
    engine = _engine()
    env = os.environ if environ is None else environ
    path = state_file.state_path(environ)
    with state_file.locked(path):
        state: dict[str, Any] = state_file.load_state(path)
        sessions = state.get("sessions")
        if not isinstance(sessions, dict):
            sessions = {}
        if harness_session_id is None:
            current = state.get("current")
            harness_session_id = current if isinstance(current, str) else ""
        entry = sessions.get(harness_session_id)
        if not isinstance(entry, dict):
            entry = {}
        if dialect and not entry.get("dialect"):
            entry["dialect"] = dialect
        if harness_session_id:
            entry["harness_session_id"] = harness_session_id
        saved = entry.get("tracker")
        tracker = ActivityTracker.from_snapshot(
            saved if isinstance(saved, dict) else {},
            turn_end_completes_task=turn_end_completes_task(env, engine.template_env(templates)),
        )
        derived = derive(tracker)
        entry["tracker"] = tracker.snapshot()
        entry["updated"] = time.time()
        sessions[harness_session_id] = entry
        state["sessions"] = _most_recent(sessions)
        state["current"] = harness_session_id
        try:
            engine.fire(templates, derived, entry)
        finally:
            state_file.save_state(path, state)
    return derived


def _most_recent(sessions: dict[str, Any]) -> dict[str, Any]:
    if len(sessions) <= MAX_SESSIONS:
        return sessions

    def updated(key: str) -> float:
        value = sessions[key].get("updated") if isinstance(sessions[key], dict) else None
        return value if isinstance(value, (int, float)) else 0.0

    kept = sorted(sessions, key=updated)[-MAX_SESSIONS:]
    return {key: sessions[key] for key in kept}


def _engine() -> Any:
    # Here, not at the top: an engine that cannot load is one clear line (EngineMissing), and
    # an agent's `status` signal, sent with whatever python the agent has, needs no engine.
    try:
        from . import standalone
    except ImportError as exc:
        raise EngineMissing(f"the in-process engine is not available ({exc.name})") from None
    return standalone
