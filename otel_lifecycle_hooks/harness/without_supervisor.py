"""Firing hooks when no supervisor runs: track activity in the state file, run hooks in-process.

`hook` and `status` come here when `$OTEL_LIFECYCLE_HOOKS_SOCKET` is unset or unreachable and a
template is given (`--template`, or `$OTEL_LIFECYCLE_HOOKS_TEMPLATE`, `os.pathsep`-separated).
Under the state file's lock: load the state, move the tracker, hand the derived events to
`engine.standalone.fire(template_paths, derived, state)`, save the state. `state["tracker"]`
holds the tracker; `fire` may keep its own keys in `state`, and they are saved with it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import state as state_file
from .activity import ActivityTracker, Derived
from .normalized import NormalizedEvent

TEMPLATE_ENV = "OTEL_LIFECYCLE_HOOKS_TEMPLATE"


class EngineMissing(RuntimeError):
    """The in-process engine (`engine.standalone`) cannot be imported."""


def template_paths(given: Sequence[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """The templates named on the command line, else those of $OTEL_LIFECYCLE_HOOKS_TEMPLATE."""
    if given:
        return list(given)
    env = os.environ if environ is None else environ
    named = env.get(TEMPLATE_ENV.removeprefix("OTEL_")) or env.get(TEMPLATE_ENV, "")
    return [p for p in named.split(os.pathsep) if p]


def fire_events(
    templates: list[str],
    events: Sequence[NormalizedEvent],
    environ: Mapping[str, str] | None = None,
) -> list[Derived]:
    """Observe `events` and fire every derived event's hooks; returns what was derived."""
    return _with_tracker(templates, environ, lambda t: [d for e in events for d in t.observe(e)])


def fire_signal(
    templates: list[str], status: str, message: str, environ: Mapping[str, str] | None = None
) -> list[Derived]:
    """Apply an explicit status signal and fire the derived events' hooks."""
    return _with_tracker(templates, environ, lambda t: t.signal(status, message))


def _with_tracker(
    templates: list[str],
    environ: Mapping[str, str] | None,
    derive: Callable[[ActivityTracker], list[Derived]],
) -> list[Derived]:
    fire = _engine_fire()
    path = state_file.state_path(environ)
    with state_file.locked(path):
        state: dict[str, Any] = state_file.load_state(path)
        saved = state.get("tracker")
        tracker = ActivityTracker.from_snapshot(saved if isinstance(saved, dict) else {})
        derived = derive(tracker)
        state["tracker"] = tracker.snapshot()
        try:
            fire(templates, derived, state)
        finally:
            state_file.save_state(path, state)
    return derived


def _engine_fire() -> Callable[[list[str], list[Derived], dict[str, Any]], None]:
    try:
        from ..engine.standalone import fire
    except ImportError as exc:
        raise EngineMissing(f"the in-process engine is not available ({exc.name})") from None
    return fire
