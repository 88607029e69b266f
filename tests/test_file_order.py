"""The suite's own scheduling (tests/support/file_order.py): the longest files first, each
file's tests in their written order, and the per-file seconds merged into pytest's cache."""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.file_order import FILE_SECONDS_KEY, FileClock, longest_files_first


@dataclass
class Node:
    """What the ordering reads of an item or a report: its node id, and a duration."""

    nodeid: str
    duration: float = 0.0


def test_files_go_longest_first_and_keep_their_tests_in_order() -> None:
    ids = ["a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2[x]", "d.py::t1"]
    items = [Node(nodeid) for nodeid in ids]
    # d.py was never timed: it goes after the timed ones, in collection order.
    longest_files_first(items, {"a.py": 1.0, "b.py": 0.5, "c.py": 30.0})  # type: ignore[arg-type]
    assert [item.nodeid for item in items] == [
        "c.py::t1", "c.py::t2[x]", "a.py::t1", "a.py::t2", "b.py::t1", "d.py::t1",
    ]  # fmt: skip


def test_with_no_record_the_collection_order_stays() -> None:
    ids = ["b.py::t1", "b.py::t2", "a.py::t1"]
    items = [Node(nodeid) for nodeid in ids]
    longest_files_first(items, {})  # type: ignore[arg-type]
    assert [item.nodeid for item in items] == ids


class DictCache(dict[str, object]):
    """pytest's cache as a dict (the real one is this run's own record)."""

    def set(self, key: str, value: object) -> None:
        self[key] = value


def test_the_clock_sums_each_files_phases_and_merges_them_into_the_cache() -> None:
    cache = DictCache({FILE_SECONDS_KEY: {"old.py": 4.0, "a.py": 99.0}})
    clock = FileClock()
    for report in [Node("a.py::t1", 1.5), Node("a.py::t1", 0.25), Node("b.py::t[1]", 2.0)]:
        clock.add(report)  # type: ignore[arg-type]
    clock.save(cache)
    assert cache[FILE_SECONDS_KEY] == {"old.py": 4.0, "a.py": 1.75, "b.py": 2.0}


def test_a_run_of_nothing_leaves_the_record_alone() -> None:
    cache = DictCache({FILE_SECONDS_KEY: {"a.py": 3.0}})
    FileClock().save(cache)
    assert cache == {FILE_SECONDS_KEY: {"a.py": 3.0}}
