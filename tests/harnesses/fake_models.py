"""Fake model APIs on 127.0.0.1 that the real harness CLIs talk to, scripted per test.

One server speaks all three wire formats the harnesses use:
- Anthropic Messages (`POST /v1/messages`, streaming SSE or one JSON) for Claude Code;
- Gemini (`POST /v1beta/models/<model>:streamGenerateContent?alt=sse`, and `:generateContent`
  for its routing classifier) for Gemini CLI;
- OpenAI Responses (`POST /v1/responses`, SSE) for Codex;
- OpenAI Chat Completions (`POST /v1/chat/completions`, SSE or one JSON) for opencode's
  OpenAI-compatible provider.

A script is a list of `Step`s for the agent's main conversation: step N answers the request
that already holds N model turns (so retries and side calls never shift the script). A step is
either a tool call running one shell command, or final text. Requests without tools (titles,
summaries, classifiers) get a short text answer. Every request is recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass(frozen=True)
class Step:
    """One model turn: run `command` with the harness's shell tool, or answer `text`."""

    command: str | None = None
    text: str = ""
    escalated: bool = False  # Codex: the call asks to run outside the sandbox (an approval)

    @classmethod
    def shell(cls, command: str, escalated: bool = False) -> Step:
        return cls(command=command, escalated=escalated)

    @classmethod
    def reply(cls, text: str) -> Step:
        return cls(text=text)


@dataclass
class ModelRequest:
    path: str
    body: dict[str, Any]


class FakeModelServer:
    """The three model APIs on an ephemeral loopback port, answering from `script`."""

    def __init__(self, script: Sequence[Step]) -> None:
        self.script = list(script)
        self.requests: list[ModelRequest] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def step(self, turns_so_far: int) -> Step:
        if turns_so_far < len(self.script):
            return self.script[turns_so_far]
        return Step.reply("Done.")

    def record(self, path: str, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(ModelRequest(path, body))


def _handler(server: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # model lists and health checks
            self._json(200, {"data": [], "models": []})

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            path = self.path.split("?", 1)[0]
            server.record(self.path, body)
            if path.endswith("/messages/count_tokens"):
                self._json(200, {"input_tokens": 10})
            elif path.endswith("/messages"):
                self._anthropic(body)
            elif ":streamGenerateContent" in path:
                self._gemini_stream(body)
            elif ":generateContent" in path:
                self._gemini_once(body)
            elif ":countTokens" in path:
                self._json(200, {"totalTokens": 10})
            elif path.endswith("/responses"):
                self._openai(body)
            elif path.endswith("/chat/completions"):
                self._chat_completions(body)
            else:
                self._json(404, {"error": {"message": f"no fake for {path}"}})

        # -- plumbing --

        def _json(self, status: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _sse(self, events: list[tuple[str | None, Any]], done: bool = False) -> None:
            chunks = []
            for name, data in events:
                head = f"event: {name}\n" if name else ""
                chunks.append(f"{head}data: {json.dumps(data)}\n\n")
            if done:  # Chat Completions ends its stream with a literal [DONE]
                chunks.append("data: [DONE]\n\n")
            payload = "".join(chunks).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        # -- Anthropic Messages --

        def _anthropic(self, body: dict[str, Any]) -> None:
            messages = body.get("messages") or []
            if body.get("tools"):
                turns = sum(1 for m in messages if m.get("role") == "assistant")
                step = server.step(turns)
            else:
                step = Step.reply("Shell check")
            if step.command is not None:
                block: dict[str, Any] = {
                    "type": "tool_use",
                    "id": f"toolu_{len(server.requests):04d}",
                    "name": "Bash",
                    "input": {"command": step.command, "description": "Run a command"},
                }
                stop = "tool_use"
            else:
                block = {"type": "text", "text": step.text}
                stop = "end_turn"
            message = {
                "id": f"msg_{len(server.requests):04d}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model", "claude"),
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            }
            if not body.get("stream"):
                self._json(200, {**message, "content": [block], "stop_reason": stop})
                return
            if block["type"] == "tool_use":
                start = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            else:
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": step.text}
            self._sse(
                [
                    ("message_start", {"type": "message_start", "message": message}),
                    (
                        "content_block_start",
                        {"type": "content_block_start", "index": 0, "content_block": start},
                    ),
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": 0, "delta": delta},
                    ),
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    (
                        "message_delta",
                        {
                            "type": "message_delta",
                            "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": 5},
                        },
                    ),
                    ("message_stop", {"type": "message_stop"}),
                ]
            )

        # -- Gemini --

        def _gemini_candidate(self, body: dict[str, Any]) -> dict[str, Any]:
            contents = body.get("contents") or []
            turns = sum(1 for c in contents if c.get("role") == "model")
            step = server.step(turns)
            if step.command is not None:
                part: dict[str, Any] = {
                    "functionCall": {
                        "name": "run_shell_command",
                        "args": {"command": step.command, "description": "Run a command"},
                    }
                }
            else:
                part = {"text": step.text}
            return {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": [part]},
                        "finishReason": "STOP",
                        "index": 0,
                    }
                ],
                "usageMetadata": {
                    "promptTokenCount": 10,
                    "candidatesTokenCount": 5,
                    "totalTokenCount": 15,
                },
                "modelVersion": "gemini-2.5-flash",
            }

        def _gemini_stream(self, body: dict[str, Any]) -> None:
            self._sse([(None, self._gemini_candidate(body))])

        def _gemini_once(self, body: dict[str, Any]) -> None:
            if body.get("tools"):
                self._json(200, self._gemini_candidate(body))
                return
            # The model router's classifier (and other side calls) expect a small JSON verdict.
            verdict = json.dumps({"reasoning": "simple task", "model_choice": "flash"})
            self._json(
                200,
                {
                    "candidates": [
                        {
                            "content": {"role": "model", "parts": [{"text": verdict}]},
                            "finishReason": "STOP",
                            "index": 0,
                        }
                    ],
                    "usageMetadata": {
                        "promptTokenCount": 1,
                        "candidatesTokenCount": 1,
                        "totalTokenCount": 2,
                    },
                },
            )

        # -- OpenAI Responses --

        def _openai(self, body: dict[str, Any]) -> None:
            items = body.get("input") or []
            turns = sum(
                1
                for item in items
                if isinstance(item, dict)
                and (
                    item.get("type") == "function_call"
                    or (item.get("type") == "message" and item.get("role") == "assistant")
                )
            )
            step = server.step(turns) if body.get("tools") else Step.reply("ok")
            response_id = f"resp_{len(server.requests):04d}"
            if step.command is not None:
                item: dict[str, Any] = {
                    "type": "function_call",
                    "id": f"fc_{len(server.requests):04d}",
                    "call_id": f"call_{len(server.requests):04d}",
                    "name": "exec_command",
                    "arguments": json.dumps(
                        {
                            "cmd": step.command,
                            "sandbox_permissions": "require_escalated",
                            "justification": "the test asks for it",
                        }
                        if step.escalated
                        else {"cmd": step.command}
                    ),
                    "status": "completed",
                }
            else:
                item = {
                    "type": "message",
                    "id": f"msg_{len(server.requests):04d}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": step.text, "annotations": []}],
                }
            usage = {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 15,
            }
            created = {
                "id": response_id,
                "object": "response",
                "status": "in_progress",
                "output": [],
            }
            completed = {
                "id": response_id,
                "object": "response",
                "status": "completed",
                "output": [item],
                "usage": usage,
            }
            self._sse(
                [
                    ("response.created", {"type": "response.created", "response": created}),
                    (
                        "response.output_item.added",
                        {"type": "response.output_item.added", "output_index": 0, "item": item},
                    ),
                    (
                        "response.output_item.done",
                        {"type": "response.output_item.done", "output_index": 0, "item": item},
                    ),
                    ("response.completed", {"type": "response.completed", "response": completed}),
                ]
            )

        # -- OpenAI Chat Completions --

        def _chat_completions(self, body: dict[str, Any]) -> None:
            messages = body.get("messages") or []
            turns = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
            step = server.step(turns) if body.get("tools") else Step.reply("Shell check")
            number = len(server.requests)
            message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
            finish = "stop"
            if step.command is not None:
                message["tool_calls"] = [
                    {
                        "index": 0,
                        "id": f"call_{number:04d}",
                        "type": "function",
                        "function": {
                            "name": "bash",  # opencode's shell tool
                            "arguments": json.dumps(
                                {"command": step.command, "description": "Run a command"}
                            ),
                        },
                    }
                ]
                finish = "tool_calls"
            usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            head = {
                "id": f"chatcmpl_{number:04d}",
                "created": 0,
                "model": body.get("model", "fake"),
            }
            if not body.get("stream"):
                choice = {"index": 0, "message": message, "finish_reason": finish}
                self._json(
                    200,
                    {**head, "object": "chat.completion", "choices": [choice], "usage": usage},
                )
                return
            chunk = {**head, "object": "chat.completion.chunk"}
            self._sse(
                [
                    (None, {**chunk, "choices": [{"index": 0, "delta": message}]}),
                    (
                        None,
                        {
                            **chunk,
                            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                            "usage": usage,
                        },
                    ),
                ],
                done=True,
            )

    return Handler
