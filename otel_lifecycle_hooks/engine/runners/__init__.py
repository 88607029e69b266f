"""The runners of this package's own action types, and the registry an engine starts from.

`RUNNERS` holds http, webhook and script; the other seeds' hook systems add theirs to it when
`otel_lifecycle_hooks.systems` is imported, which the template loader does for any file
written in one of them (systems/runners.py).
"""

from __future__ import annotations

from .base import ActionRegistry, ActionRunner, ActionServices, Attempt, Refusal
from .http import HttpRunner
from .script import ScriptRunner

__all__ = [
    "RUNNERS",
    "ActionRegistry",
    "ActionRunner",
    "ActionServices",
    "Attempt",
    "Refusal",
    "builtin_runners",
]


def builtin_runners() -> ActionRegistry:
    """A registry of this package's own action types: http, webhook and script."""
    registry = ActionRegistry()
    http = HttpRunner()
    registry.register("http", http)
    registry.register("webhook", http)
    registry.register("script", ScriptRunner())
    return registry


# The registry every engine uses unless it is given one.
RUNNERS = builtin_runners()
