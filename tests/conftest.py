"""Shared fixtures: a loopback HTTP target server and a throwaway HOME.

How the suite runs in parallel: `make test` runs `pytest -n 4 --dist loadfile
--no-loadscope-reorder` (pytest-xdist): every test of one file runs on the same worker, in
order, the files that took longest in the last run first (tests/support/file_order.py), so
a module- or session-scoped fixture serves the whole file once (Phoenix in
tests/e2e/test_e2e_phoenix.py, the built wheel in tests/test_wheel_install.py, the real
harness sessions of tests/harnesses/). Each worker is its own process with its own
`tmp_path`s; a session fixture runs once per worker that needs it (PostgreSQL: a few seconds).
So, for a new test:
- ports: bind port 0 (`tests.support.rotel.free_port`, `TargetServer`), never a fixed one; a
  fixed one the docs show is held under `tests.support.locks.machine_lock`;
- files: under `tmp_path` (or `tempfile.mkdtemp`), never a fixed path;
- shared downloads and installs: under `tests.support.cache.cache_root()`, built under a lock
  (`machine_lock`, as `tests/support/sdk_venv.py` and `tests/harnesses/npm_cache.py` do), since
  other workers and other checkouts' suites ask for them at once;
- processes: count only your own process tree (a pid, a process group, a unique argument),
  never the machine's;
- an expensive fixture: keep its tests in one file.
`pytest -n0` (or `-p no:xdist`) runs in this one process, for a debugger or to time a test.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.file_order import FILE_SECONDS_KEY, FileClock, longest_files_first
from tests.support.target_server import TargetServer

# Hypothesis's own time limits (a 200 ms deadline per example, a health check on slow data
# generation) judge speed: on a loaded 2-core machine with four workers they fail tests whose
# behaviour is right. The tests' own `@settings` still apply on top of this profile.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

# A suite started in the background by a non-interactive shell (`make test &`, some CI
# runners) inherits SIGINT ignored, and so would every command a test starts: the tests that
# press Ctrl-C on a command (`history --follow`) need it delivered as on a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The commands' tables fit `COLUMNS` when it is set, even on a pipe; pytest-xdist's workers
# start with COLUMNS=80 in their environment. A test that wants a width sets it itself.
os.environ.pop("COLUMNS", None)


_file_clock = FileClock()


def _on_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


@pytest.hookimpl(trylast=True)  # after `-m`/`-k` have deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On pytest-xdist's workers: the files that took longest last time first."""
    cache = getattr(config, "cache", None)  # None under `-p no:cacheprovider`
    if _on_worker() and cache is not None:
        longest_files_first(items, cache.get(FILE_SECONDS_KEY, {}))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Time each file (in the controller, which sees every worker's reports, or serially)."""
    if not _on_worker():
        _file_clock.add(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    cache = getattr(session.config, "cache", None)
    if not _on_worker() and cache is not None:
        _file_clock.save(cache)


@pytest.fixture
def target_server() -> Iterator[TargetServer]:
    """A started TargetServer on 127.0.0.1; stopped (never hanging) after the test."""
    with TargetServer() as server:
        yield server


@pytest.fixture
def tmp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME pointed at an empty directory, and no journal / hook-log location overrides."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("JOURNAL", "LOG"):
        monkeypatch.delenv(f"LIFECYCLE_HOOKS_{name}", raising=False)
        monkeypatch.delenv(f"OTEL_LIFECYCLE_HOOKS_{name}", raising=False)
    return home
