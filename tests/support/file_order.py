"""The longest test files first, so that parallel workers finish together.

With `--dist loadfile` a file is the unit a worker takes; a long file taken last keeps one
worker busy while the others idle. Each run records how long every file took in pytest's
cache (`.pytest_cache`, key `FILE_SECONDS_KEY`); the next run's workers hand the files out
longest first. Within a file the order stays as written. With no record yet (a fresh clone),
the order is the collection order.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Protocol

import pytest

FILE_SECONDS_KEY = "otel-lifecycle-hooks/file-seconds"


def file_of(nodeid: str) -> str:
    """`tests/x.py` of `tests/x.py::test_y[param]`."""
    return nodeid.split("::", 1)[0]


def longest_files_first(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Reorder `items` in place: files by their recorded seconds, longest first (files with
    no record after them, in collection order); each file's tests keep their order."""
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(file_of(item.nodeid), index)

    def key(item: pytest.Item) -> tuple[float, int]:
        name = file_of(item.nodeid)
        return (-seconds.get(name, 0.0), first_seen[name])

    items.sort(key=key)  # stable: a file's tests keep their order


class Cache(Protocol):
    """What is used of pytest's `config.cache`."""

    def get(self, key: str, default: Any) -> Any: ...

    def set(self, key: str, value: object) -> None: ...


class FileClock:
    """Sums the seconds each file's tests took (setup, call and teardown), from the reports
    the workers send, and merges them into the cache at the end of the run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def add(self, report: pytest.TestReport) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration

    def save(self, cache: Cache) -> None:
        if not self.seconds:
            return
        recorded = cache.get(FILE_SECONDS_KEY, {})
        recorded.update({name: round(total, 2) for name, total in self.seconds.items()})
        cache.set(FILE_SECONDS_KEY, recorded)
