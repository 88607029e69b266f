"""The hook engine: the span processor, dispatch with its policies, and execution.

Names load on first use, so importing one pure module (policies) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AgentSession": ".session",
    "DispatchResult": ".dispatch",
    "Execution": ".model",
    "HookEngine": ".engine",
    "LifecycleEvent": ".model",
    "LifecycleHookLogProcessor": ".log_processor",
    "LifecycleHookProcessor": ".processor",
    "SessionInfo": ".model",
}

__all__ = [
    "AgentSession",
    "DispatchResult",
    "Execution",
    "HookEngine",
    "LifecycleEvent",
    "LifecycleHookLogProcessor",
    "LifecycleHookProcessor",
    "SessionInfo",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
