"""otel-lifecycle-hooks: declarative lifecycle hooks for AI agents, visible in OpenTelemetry.

The public names load on first use: importing the package, as the harness `hook` command does
once per harness event, then costs almost nothing. Type checkers see the real imports below.
"""

from __future__ import annotations

from .errors import LifecycleHooksError
from .version import __version__

# `typing` is not imported at run time: the `hook` command imports this package per event.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .engine.engine import HookEngine
    from .engine.log_processor import LifecycleHookLogProcessor
    from .engine.processor import LifecycleHookProcessor
    from .engine.session import AgentSession
    from .template.loader import load_templates
    from .template.problems import TemplateError

# Loaded on first use. Importing them eagerly made `import otel_lifecycle_hooks.cli.hook` take
# 650 ms instead of 153 ms (median of 9 fresh interpreters, 2 loaded cores).
_LAZY = {
    "LifecycleHookProcessor": "otel_lifecycle_hooks.engine.processor",
    "LifecycleHookLogProcessor": "otel_lifecycle_hooks.engine.log_processor",
    "AgentSession": "otel_lifecycle_hooks.engine.session",
    "HookEngine": "otel_lifecycle_hooks.engine.engine",
    "load_templates": "otel_lifecycle_hooks.systems",
    "TemplateError": "otel_lifecycle_hooks.template.problems",
}

# The public names come composed: the other hook systems register what they read and run with
# the template loader and the engine when imported, and these names are used with them.
_COMPOSED = {
    "AgentSession": ("otel_lifecycle_hooks.systems", "otel_lifecycle_hooks.systems.inprocess"),
}

__all__ = [
    "AgentSession",
    "HookEngine",
    "LifecycleHookLogProcessor",
    "LifecycleHookProcessor",
    "LifecycleHooksError",
    "TemplateError",
    "__version__",
    "load_templates",
]


def __getattr__(name: str) -> object:
    """A public name, imported from its module (with the hook systems) when first asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'otel_lifecycle_hooks' has no attribute {name!r}")
    import importlib  # not at the top: about 0.3 ms of every `hook` (-X importtime)

    for system in _COMPOSED.get(name, ("otel_lifecycle_hooks.systems",)):
        importlib.import_module(system)
    return getattr(importlib.import_module(module), name)
