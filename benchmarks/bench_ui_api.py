"""The `ui` page's API on a journal of 100,000 deliveries: the time of each page's answer.

The installed `otel-lifecycle-hooks ui` serves a SQLite journal filled with 100,000 generated
deliveries (tests/ui/bulk_journal.py: the journal's own schema, one bulk insert; every row
kept, retention off) and this script times, over loopback HTTP with the page's token, the
answer of each view the page draws: the log's first page, a deep page by cursor, each filter,
each search, one delivery, and a hook's figures. Interleaved runs; each answer must be a 200
with what the view needs (a timed error would be a fast figure of nothing). The baseline is
a round trip to the same server that reads nothing (`/api/settings`). Target: under 200 ms
at the median, per answer. PostgreSQL is measured too when the venv has the
`[postgres]` extra and the server's binaries are installed (as tests/ui does); else it says
so.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from _common import REPO_DIR, Figure, bench_arguments, clean_env, console_script, interleave, report

SCRIPT = "bench_ui_api.py"
DELIVERIES = 100_000
TARGET_MS = 200.0
TOKEN_HEADER = "X-Lifecycle-Hooks-Token"
BASELINE = "settings"


def load(relative: str, name: str) -> ModuleType:
    """A helper of the tests by its file: the checkout is never put on sys.path (its package
    would shadow the installed one this script measures)."""
    spec = importlib.util.spec_from_file_location(name, REPO_DIR / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def views(bulk: Any) -> dict[str, str]:
    """Each API answer a view of the page reads, by the name the table gives it."""
    since, until = bulk.START + 50_000, bulk.START + 53_600  # one hour of the journal
    return {
        "log: first page": "/api/deliveries",
        "log: deep page (cursor before=50000)": "/api/deliveries?before=50000",
        "log: oldest page (cursor before=101)": "/api/deliveries?before=101",
        "log: newer page (cursor after=50000)": "/api/deliveries?after=50000",
        "filter: status=failed": "/api/deliveries?status=failed",
        "filter: status=failures": "/api/deliveries?status=failures",
        "filter: hook": "/api/deliveries?hook=audit-log",
        "filter: event": "/api/deliveries?event=pre-stop",
        "filter: agent (name)": "/api/deliveries?agent=agent-beta-name",
        "filter: time range (1 h)": f"/api/deliveries?since={since:.0f}&until={until:.0f}",
        "filter: hook + status, deep": (
            "/api/deliveries?hook=deregister-agent&status=failed&before=50000"
        ),
        "search: delivery id": "/api/deliveries?q=42424",
        "search: session id": f"/api/deliveries?q={bulk.session_of(42424)}",
        "search: idempotency key": f"/api/deliveries?q={bulk.key_of(42424)}",
        "delivery: one, with attempts": "/api/deliveries/42424",
        "hook: figures of the newest 1,000": "/api/hooks/audit-log",
    }  # fmt: skip


class Page:
    """`otel-lifecycle-hooks ui` as a subprocess; its port and token from the URL it prints."""

    def __init__(self, journal: str, home: Path) -> None:
        env = clean_env(home, LIFECYCLE_HOOKS_JOURNAL_RETENTION="off")
        self.process = subprocess.Popen(
            [console_script(), "ui", "--journal", journal],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        url = self.process.stdout.readline().strip()
        if not url:
            raise SystemExit(f"ui printed no URL (exit {self.process.wait(60)})")
        address, _, self.token = url.partition("/#token=")
        self.port = int(address.rsplit(":", 1)[1])

    def get(self, path: str) -> tuple[float, Any]:
        started = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request("GET", path, headers={TOKEN_HEADER: self.token})
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        elapsed = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise SystemExit(f"GET {path}: {response.status} {body[:300]!r}")
        return elapsed, json.loads(body)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(60)


def check(path: str, answer: Any) -> None:
    """What the view needs is there: a page of deliveries, a delivery, or a hook's figures."""
    if path.startswith("/api/hooks/"):
        ok = answer.get("deliveries") == 1000 and answer.get("p99_ms") is not None
    elif path.startswith("/api/deliveries/"):
        ok = answer.get("delivery", {}).get("id") == 42424
    else:
        ok = bool(answer.get("deliveries"))
    if not ok:
        raise SystemExit(f"GET {path} did not answer what its view needs: {str(answer)[:300]}")


def measure(backend: str, journal: str, home: Path, runs: int, bulk: Any) -> list[Figure]:
    page = Page(journal, home)
    try:
        paths = views(bulk)
        for path in paths.values():  # each answered right, once, before any is timed
            check(path, page.get(path)[1])

        def timed(path: str) -> Callable[[], float]:
            return lambda: page.get(path)[0]

        # The baseline: a round trip to the same server that reads nothing from the journal.
        subjects = {name: timed(path) for name, path in paths.items()}
        subjects[BASELINE] = timed("/api/settings")
        samples = interleave(runs, subjects)
    finally:
        page.stop()
    return [
        Figure(
            benchmark=f"ui API ({backend}, {DELIVERIES:,} deliveries)",
            name=f"{name}, median",
            value=samples[name].median,
            unit="ms",
            baseline=samples[BASELINE].median,
            baseline_name="GET /api/settings (no journal read), median",
            target=TARGET_MS,
            checked="value",
            detail=f"GET {path}; {samples[name].summary()}",
        )
        for name, path in paths.items()
    ]


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    runs = 3 if args.quick else 25
    bulk = load("tests/ui/bulk_journal.py", "bulk_journal")
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        home = Path(tmp)
        journal = home / "journal.sqlite3"
        started = time.perf_counter()
        bulk.fill(journal, DELIVERIES)
        print(f"  filled {DELIVERIES:,} deliveries in {time.perf_counter() - started:.1f} s")
        figures += measure("SQLite", str(journal), home, runs, bulk)
        figures += postgres_figures(home, runs, bulk)
    return report(SCRIPT, figures, args)


def postgres_figures(home: Path, runs: int, bulk: Any) -> list[Figure]:
    """The same on a real PostgreSQL server, when this venv and machine can run one."""
    if importlib.util.find_spec("psycopg") is None:
        print("  PostgreSQL: not measured (this venv lacks the [postgres] extra)")
        return []
    postgres = load("tests/support/postgres.py", "bench_postgres")
    if not (postgres.BIN / "postgres").exists():
        print(f"  PostgreSQL: not measured (no server binaries in {postgres.BIN})")
        return []
    server = postgres.PostgresServer()
    server.start()
    try:
        url = server.new_database()
        bulk.fill(url, DELIVERIES)
        return measure("PostgreSQL", url, home, runs, bulk)
    finally:
        server.remove()


if __name__ == "__main__":
    sys.exit(main())
