"""The package's exception base: `except LifecycleHooksError` catches every error the package
raises on purpose (a template it refuses, credentials it cannot get, a journal key it cannot
read, ...).

Each error also keeps the built-in base it always had (`ValueError`, `OSError`, `LookupError`,
...), so code that catches those goes on catching them.
"""

from __future__ import annotations


class LifecycleHooksError(Exception):
    """Base class of the errors otel-lifecycle-hooks raises for its users to handle."""
