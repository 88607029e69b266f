"""Locks that span processes: parallel workers of one run (`pytest -n`) and suites of other
checkouts running on the same machine at once.

`machine_lock("port-8080")` serialises whatever must be alone on this machine (a fixed port);
it lives beside the suite's caches (tests/support/cache.py), which every checkout of a user
shares. The lock is released when the block ends, or when its holder dies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from filelock import FileLock

from tests.support.cache import cache_root

# A hang guard: a holder that runs longer than this is stuck.
LOCK_TIMEOUT_S = 900.0


@contextmanager
def machine_lock(name: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the lock `name` (a plain word) for the block, waiting for any other holder."""
    folder = cache_root() / "locks"
    folder.mkdir(exist_ok=True)
    with FileLock(folder / f"{name}.lock", timeout=timeout):
        yield
