"""otel-lifecycle-hooks: declarative lifecycle hooks for AI agents, visible in OpenTelemetry.

The names below load on first use, so that importing the package (as the harness hook
command does) costs almost nothing.
"""

from __future__ import annotations

from .version import __version__

# Not even `typing` at run time: the harness hook command imports this package per event.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_LAZY = {
    "LifecycleHookProcessor": "otel_lifecycle_hooks.engine.processor",
    "LifecycleHookLogProcessor": "otel_lifecycle_hooks.engine.log_processor",
    "AgentSession": "otel_lifecycle_hooks.engine.session",
    "HookEngine": "otel_lifecycle_hooks.engine.engine",
    "load_templates": "otel_lifecycle_hooks.systems",
    "TemplateError": "otel_lifecycle_hooks.template.loader",
}

__all__ = [
    "AgentSession",
    "HookEngine",
    "LifecycleHookLogProcessor",
    "LifecycleHookProcessor",
    "TemplateError",
    "__version__",
    "load_templates",
]


# The public names come composed: the other hook systems register what they read and run with
# the template loader and the engine when imported, and these names are used with them.
_COMPOSED = {
    "AgentSession": ("otel_lifecycle_hooks.systems", "otel_lifecycle_hooks.systems.inprocess"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'otel_lifecycle_hooks' has no attribute {name!r}")
    import importlib

    for system in _COMPOSED.get(name, ("otel_lifecycle_hooks.systems",)):
        importlib.import_module(system)
    return getattr(importlib.import_module(module), name)
