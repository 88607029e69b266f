"""Record what the real opencode's plugin hands the hook command, as the dialect's samples.

    python -m tests.harnesses.record_opencode [OUTPUT_DIR]

runs the pinned opencode (tests/harnesses/npm_cache.py) through the plugin that `harness
install opencode` writes, with a hook program that saves each payload before passing it on
(record_sequences.WRAPPER), and writes one sample per event kind to OUTPUT_DIR (default:
tests/harness/payloads/opencode/). Three sessions: a tool call, a tool call that asks for
permission (opencode's headless `run` rejects it), and a model API that refuses the key.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.harnesses import scenarios
from tests.harnesses.real import Opencode, Session, harness_binary
from tests.harnesses.record_sequences import WRAPPER
from tests.harnesses.session import PACKAGE_CLI

PAYLOADS = Path(__file__).resolve().parents[1] / "harness" / "payloads" / "opencode"
# The sample file each recorded event kind is saved as.
SAMPLES = {
    "session.created": "session_created",
    "chat.message": "chat_message",
    "tool.execute.before": "tool_execute_before",
    "tool.execute.after": "tool_execute_after",
    "session.idle": "session_idle",
    "permission.asked": "permission_asked",
    "session.error": "session_error",
}


@contextmanager
def refusing_api() -> Iterator[str]:
    """A model API on loopback that answers every request 401, as for a wrong key."""

    class Refuse(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"error": {"message": "invalid API key", "type": "auth"}}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def point_at(url: str) -> Callable[[Session], None]:
    def rewrite(session: Session) -> None:
        path = session.home / ".config" / "opencode" / "opencode.json"
        config = json.loads(path.read_text())
        config["provider"]["fake"]["options"]["baseURL"] = f"{url}/v1"
        path.write_text(json.dumps(config, indent=2))

    return rewrite


def record_session(
    scratch: Path,
    env_extra: dict[str, str] | None = None,
    after_install: Callable[[Session], None] | None = None,
) -> list[dict[str, Any]]:
    """The payloads one tool-turn session of opencode gave the hook command, in order."""
    wrapper, record = scratch / "record_hook.py", scratch / "payloads.jsonl"
    wrapper.write_text(WRAPPER)
    program = [sys.executable, str(wrapper), str(record), str(PACKAGE_CLI)]
    scenario = scenarios.tool_turn("opencode")
    Opencode(harness_binary("opencode")).run(
        scratch / "session",
        scenario.script,
        extra=scenario.extra,
        program=program,
        env_extra=env_extra,
        after_install=after_install,
    )
    # The session's scratch folder is this run's alone: a stable name instead.
    text = record.read_text().replace(str(scratch), "/tmp/session-root")
    return [json.loads(line) for line in text.splitlines() if line]


def record(output: Path) -> list[Path]:
    """Run the three sessions; write the first payload of each kind in SAMPLES."""
    payloads: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        payloads += record_session(Path(scratch))
    with tempfile.TemporaryDirectory() as scratch:
        payloads += record_session(Path(scratch), {"OPENCODE_PERMISSION": '{"bash": "ask"}'})
    with tempfile.TemporaryDirectory() as scratch, refusing_api() as url:
        payloads += record_session(Path(scratch), after_install=point_at(url))
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for payload in payloads:
        name = SAMPLES.get(str(payload.get("type")))
        target = output / f"{name}.json"
        if name is None or target in written:
            continue
        target.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
        written.append(target)
    return written


if __name__ == "__main__":
    for path in record(Path(sys.argv[1]).absolute() if sys.argv[1:] else PAYLOADS):
        print(path)
