"""One attempt as the delivery history keeps it: redacted, bounded, safe to store as text.

What an endpoint answers is hostile input: its headers and body may echo the request's
secrets, hand out new ones, hold escape sequences or NUL bytes, or be megabytes long. Each
attempt is journaled as an `AttemptRow` built here:

- every header, the URL and every body go through the execution's `Redactor` (credential
  headers replaced whole, known secret values in every encoded form, URL userinfo and
  secret-looking query values); a JSON response body also has the values of secret-looking
  keys (`token`, `password`, `api_key`...) replaced;
- bodies are redacted first and then cut at `BODY_LIMIT` bytes with a marker saying how much
  there was; a body that is not text is described (its size and type), not stored; headers
  are kept up to `HEADERS_LIMIT` bytes in all; a script's output tails at `OUTPUT_LIMIT`;
- NUL bytes become U+FFFD (PostgreSQL text cannot hold them). Other control characters are
  stored as sent; whoever prints them escapes them (`history show` does).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..actions.base import AttemptResult, Exchange
from ..journal.rows import AttemptRow
from ..redact import REDACTED, Redactor

BODY_LIMIT = 16 * 1024  # bytes of a request or response body kept per attempt
HEADERS_LIMIT = 8 * 1024  # bytes of names and values kept per header list
OUTPUT_LIMIT = 4 * 1024  # bytes of the end of a script's stdout and of its stderr
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-www-form")


def attempt_row(
    number: int,
    started_at: float,
    result: AttemptResult,
    redactor: Redactor,
    *,
    argv: Sequence[str] | None = None,
) -> AttemptRow:
    """The journal's row of attempt `number` (1-based) that began at `started_at`."""
    outcome = {"ok": "success", "timeout": "timeout"}.get(result.kind, "failed")
    if result.skipped:
        outcome = "skipped"
    request: dict[str, Any] | None = None
    response_headers: list[list[str]] | None = None
    response_body: str | None = None
    exchange = result.exchange
    if exchange is not None:
        request = _request(exchange, redactor)
        if exchange.response_headers is not None:
            response_headers = _headers(exchange.response_headers, redactor)
            response_body = _response_body(exchange, redactor)
    elif argv is not None:
        request = {"argv": [redactor.redact_text(_safe(arg)) for arg in argv]}
    stdout = stderr = None
    if result.output is not None:
        stdout, stderr = (_tail(redactor.redact_text(_safe(text))) for text in result.output)
    return AttemptRow(
        attempt=number,
        started_at=started_at,
        outcome=outcome,
        duration_ms=result.duration * 1000.0,
        error_type=result.error_type,
        message=redactor.redact_text(_safe(result.message)),
        request=request,
        response_status=result.status_code,
        response_headers=response_headers,
        response_body=response_body,
        exit_code=result.exit_code,
        stdout=stdout,
        stderr=stderr,
    )


def _request(exchange: Exchange, redactor: Redactor) -> dict[str, Any]:
    headers = _headers(exchange.request_headers, redactor)
    body = None
    if exchange.request_body is not None:
        body = _body(exchange.request_body, _content_type(headers), redactor, cut=False)
    return {
        "method": exchange.method,
        "url": redactor.redact_url(_safe(exchange.url)),
        "headers": headers,
        "body": body,
    }


def _headers(pairs: Iterable[tuple[str, str]], redactor: Redactor) -> list[list[str]]:
    kept: list[list[str]] = []
    size = 0
    redact = redactor.redact_text
    for name, value in pairs:
        # _safe inline: a dozen headers per attempt, most with no NUL to replace.
        if "\x00" in name:
            name = _safe(name)
        if "\x00" in value:
            value = _safe(value)
        shown = REDACTED if _is_secret_header(redactor, name) else redact(value)
        size += len(name) + len(shown)
        if size > HEADERS_LIMIT:
            kept.append(["...", f"[truncated: headers past {HEADERS_LIMIT} bytes not kept]"])
            break
        kept.append([name, shown])
    return kept


@functools.lru_cache(maxsize=1024)
def _is_secret_header(redactor: Redactor, name: str) -> bool:
    # The same few names on every attempt: the word search is done once per redactor.
    return redactor.is_secret_header(name)


def _response_body(exchange: Exchange, redactor: Redactor) -> str | None:
    data = exchange.response_body
    if data is None:
        return None
    content_type = next(
        (
            value
            for name, value in exchange.response_headers or ()
            if name.lower() == "content-type"
        ),
        None,
    )
    return _body(data, content_type, redactor, cut=exchange.response_cut, response=True)


def _body(
    data: bytes, content_type: str | None, redactor: Redactor, *, cut: bool, response: bool = False
) -> str:
    if not data:
        return ""
    text = data.decode("utf-8", "replace")
    media = (content_type or "").split(";", 1)[0].strip().lower()
    textual = not media or media.startswith(_TEXT_TYPES) or media.endswith(("+json", "+xml"))
    if not textual and text.count("\ufffd") > len(text) // 10:
        more = "more than " if cut else ""
        return f"[{more}{len(data)} bytes of {media or 'binary data'}, not shown]"
    text = redactor.redact_text(_safe(text))
    if response and not cut and (media.endswith("json") or text.lstrip().startswith(("{", "["))):
        text = _redact_json_keys(text, redactor)
    encoded = text.encode("utf-8")
    if len(encoded) <= BODY_LIMIT and not cut:
        return text
    kept = encoded[:BODY_LIMIT].decode("utf-8", "ignore")
    total = f"more than {len(data)}" if cut else str(len(data))
    return f"{kept}\n[truncated: the first {BODY_LIMIT} of {total} bytes are kept]"


def _redact_json_keys(text: str, redactor: Redactor) -> str:
    """A JSON body with the values of secret-looking keys replaced; as it was when none."""
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):  # a hostile answer nests past the parser's depth
        return text
    if not isinstance(parsed, (dict, list)):
        return text
    try:
        cleaned = (
            redactor.redact_mapping(parsed)
            if isinstance(parsed, dict)
            else redactor.redact_mapping({"": parsed})[""]
        )
    except RecursionError:
        return text
    return text if cleaned == parsed else json.dumps(cleaned, ensure_ascii=False)


def _content_type(headers: list[list[str]]) -> str | None:
    return next((value for name, value in headers if name.lower() == "content-type"), None)


def _tail(text: str) -> str:
    # The script's tail is already at most OUTPUT_LIMIT bytes: one that long was cut.
    encoded = text.encode("utf-8")
    if len(encoded) < OUTPUT_LIMIT:
        return text
    return "[...]" + encoded[-OUTPUT_LIMIT:].decode("utf-8", "ignore")


def _safe(text: str) -> str:
    return text.replace("\x00", "\ufffd") if "\x00" in text else text
