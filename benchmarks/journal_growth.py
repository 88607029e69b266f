"""Journal growth: bytes the SQLite journal gains per delivery, measured on 10,000 deliveries
of a webhook through the real engine to a loopback endpoint.

Two shapes: a delivery answered 200 at once (one attempt row), and one answered 503 twice
before a 200 (three attempt rows; the retry waits are skipped with the engine's fake clock).
Each figure is the file's growth between a warm-up of `WARM_UP` deliveries and the end,
divided by the deliveries in between, after the journal is closed (its WAL checkpointed).
Run: `python benchmarks/journal_growth.py [--deliveries N]`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from otel_lifecycle_hooks.engine import HookEngine, SessionInfo
from otel_lifecycle_hooks.engine.clock import FakeClock
from otel_lifecycle_hooks.journal import Journal
from otel_lifecycle_hooks.template.loader import load_template_text

WARM_UP = 200
TEMPLATE = """\
lifecycle_hooks:
  - name: notify
    on: [tool-start]
    blocking: true
    on_error: retry
    action:
      type: webhook
      url: "{url}"
      headers: {{Content-Type: application/json}}
      body: '{{"agent": "${{AGENT_NAME}}", "event": "${{EVENT}}", "tool": "${{TOOL_NAME}}",
        "at": "${{TIMESTAMP}}"}}'
"""


class Endpoint:
    """Answers `failures` 503s for every delivery, then a 200 with a small JSON body, as a
    typical receiver does."""

    def __init__(self, failures: int) -> None:
        seen: dict[bytes, int] = {}  # by body: each delivery's names its own tool
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                key = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    seen[key] = seen.get(key, 0) + 1
                    failing = seen[key] <= failures
                body = b'{"error": "busy"}' if failing else b'{"received": true}'
                self.send_response(503 if failing else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def growth_per_delivery(deliveries: int, failures: int) -> tuple[float, int]:
    """Bytes per delivery, and the attempt rows written per delivery (checked)."""
    endpoint = Endpoint(failures)
    folder = Path(tempfile.mkdtemp(prefix="journal-growth-"))
    path = folder / "journal.sqlite3"
    try:
        sizes = []
        for count in (WARM_UP, deliveries):
            engine = HookEngine(
                load_template_text(TEMPLATE.format(url=endpoint.url)),
                journal=path,
                hook_log=False,
                environ={},
                clock=FakeClock(),
            )
            session = SessionInfo("5e55101a" * 4, {"AGENT_ID": "agent-1", "AGENT_NAME": "worker"})
            for n in range(count):
                engine.fire("tool-start", session, {"TOOL_NAME": f"Bash-{n:05d}"})
            engine.shutdown(30)
            sizes.append(path.stat().st_size)
        journal = Journal(path)
        rows = journal.executions(limit=None)
        attempts = sum(len(journal.attempts(row.row_uid)) for row in rows[:100])
        journal.close()
        assert len(rows) == WARM_UP + deliveries, len(rows)  # every delivery has its row
        assert all(row.outcome == "success" for row in rows)
        return (sizes[1] - sizes[0]) / deliveries, attempts // 100
    finally:
        endpoint.stop()
        for leftover in folder.iterdir():
            leftover.unlink()
        folder.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deliveries", type=int, default=10_000)
    args = parser.parse_args()
    figures = {}
    for failures in (0, 2):
        per_delivery, attempts = growth_per_delivery(args.deliveries, failures)
        figures[f"{attempts} attempt(s)"] = round(per_delivery)
        print(
            f"{args.deliveries} deliveries, {attempts} attempt row(s) each:"
            f" {per_delivery:.0f} bytes per delivery"
            f" ({per_delivery * 100_000 / 1e6:.1f} MB per 100,000)"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
