from __future__ import annotations

from collections.abc import Iterator

import pytest

from otel_lifecycle_hooks.engine.engine import HookEngine


@pytest.fixture
def engines() -> Iterator[list[HookEngine]]:
    """Engines a test builds, shut down after it even when it fails."""
    built: list[HookEngine] = []
    yield built
    for engine in built:
        engine.shutdown(1.0)
