"""A policy service for gates: answers each tool call with a decision (docs/gates.md).

Run it, then point a gate at it:

    python examples/gate/policy_service.py --port 8099

It reads the JSON body the gate sends (`{"tool": "${TOOL_NAME}", "input": "${TOOL_INPUT}"}`
in examples/gate/scion-agent.yaml) and answers `{"decision": "deny", "reason": ...}` for a
shell command that removes files recursively or pipes a download into a shell, and
`{"decision": "allow"}` for anything else. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1024 * 1024
RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\brm\s+(-\w*r\w*f|-\w*f\w*r)\b"), "no recursive forced removal"),
    (re.compile(r"\b(curl|wget)\b[^|]*\|\s*(ba|z)?sh\b"), "no piping a download into a shell"),
)


def decide(request: dict[str, object]) -> dict[str, str]:
    """The decision for one gate request: deny with the first matching rule's reason."""
    text = f"{request.get('tool', '')} {request.get('input', '')}"
    for pattern, reason in RULES:
        if pattern.search(text):
            return {"decision": "deny", "reason": f"policy: {reason}"}
    return {"decision": "allow"}


class PolicyHandler(BaseHTTPRequestHandler):
    """POST any path: a gate's request in, its decision out."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        size = int(self.headers.get("Content-Length") or 0)
        try:
            request = json.loads(self.rfile.read(min(size, MAX_BODY)) or b"{}")
        except ValueError:
            request = {}
        answer = decide(request if isinstance(request, dict) else {})
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # quiet: the gate's span and journal row keep every decision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8099)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), PolicyHandler)
    print(f"policy service on http://127.0.0.1:{args.port}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
