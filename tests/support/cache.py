"""Where the suite keeps large downloads (Phoenix, the harness CLIs, browsers) between runs.

They live outside the checkout, so a fresh clone on the same machine (CI's, a second work tree)
reuses them: `$OTEL_LIFECYCLE_HOOKS_TEST_CACHE`, else `$XDG_CACHE_HOME/otel-lifecycle-hooks-tests`,
else `~/.cache/otel-lifecycle-hooks-tests`. Each installer is idempotent and takes a lock.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The folder that holds every cached download of the suite (created on demand)."""
    explicit = os.environ.get("OTEL_LIFECYCLE_HOOKS_TEST_CACHE")
    if explicit:
        root = Path(explicit)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(base) / "otel-lifecycle-hooks-tests"
    root.mkdir(parents=True, exist_ok=True)
    return root
