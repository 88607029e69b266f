"""JSON-RPC 2.0 over HTTP: the request body for one call, and what its response means.

The request itself goes through `actions.http.send` (one attempt, pooled client, timeouts); this
module only builds the body and reads the answer. A response is understood when it is a JSON
object with `"jsonrpc": "2.0"`, the request's `id`, and either `result` or `error`. Anything
else (HTML from a proxy, a truncated body, a wrong id) is the executor answering badly.

error_type values on top of `send`'s: `jsonrpc.error` (the executor answered an `error`),
`jsonrpc.invalid` (the answer is not a JSON-RPC response to this request).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .base import AttemptResult

VERSION = "2.0"


def request_body(method: str, params: Any, request_id: int | str) -> bytes:
    """The UTF-8 JSON of one JSON-RPC 2.0 request."""
    return json.dumps(
        {"jsonrpc": VERSION, "id": request_id, "method": method, "params": params},
        ensure_ascii=False,
        default=str,
    ).encode("utf-8")


@dataclass(frozen=True)
class RpcAnswer:
    """The attempt's result, and the `result` member when the call succeeded."""

    result: AttemptResult
    value: Any = None


def read_answer(http_result: AttemptResult, request_id: int | str) -> RpcAnswer:
    """Interpret the HTTP attempt's response as the answer to request `request_id`."""
    if not http_result.ok:
        return RpcAnswer(http_result)
    try:
        answer = json.loads((http_result.response_body or b"").decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return RpcAnswer(_invalid(http_result, "the response is not JSON"))
    if not isinstance(answer, dict) or answer.get("jsonrpc") != VERSION:
        return RpcAnswer(_invalid(http_result, "the response is not a JSON-RPC 2.0 object"))
    if answer.get("id") != request_id:
        return RpcAnswer(_invalid(http_result, "the response answers another request id"))
    if "error" in answer:
        error = answer["error"]
        detail = ""
        if isinstance(error, dict):
            detail = f" {error.get('code', '')}: {str(error.get('message', ''))[:200]}".rstrip(": ")
        failed = http_result._replace(
            kind="permanent",
            error_type="jsonrpc.error",
            message=f"executor error{detail}",
        )
        return RpcAnswer(failed)
    if "result" not in answer:
        return RpcAnswer(_invalid(http_result, "the response has neither result nor error"))
    return RpcAnswer(http_result, answer["result"])


def _invalid(http_result: AttemptResult, message: str) -> AttemptResult:
    return http_result._replace(kind="permanent", error_type="jsonrpc.invalid", message=message)
