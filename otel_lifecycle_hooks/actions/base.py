"""What one attempt of an action produced: the engine's policies decide what happens next."""

from __future__ import annotations

from typing import Literal, NamedTuple

# How an attempt ended, before any policy is applied.
#   ok         2xx, or exit code 0
#   permanent  4xx (not 429), a redirect, a script exiting non-zero, a missing executable
#   transient  5xx, 429, connection errors
#   timeout    the attempt ran past its timeout
AttemptKind = Literal["ok", "permanent", "transient", "timeout"]


class Exchange(NamedTuple):
    """One HTTP request as it was sent and what came back, raw: it may hold secrets and
    whatever the endpoint chose to answer. The engine redacts and bounds it before it is
    journaled (engine/attempt_log.py); nothing else reads it."""

    method: str
    url: str
    request_headers: tuple[tuple[str, str], ...]
    request_body: bytes | None
    response_headers: tuple[tuple[str, str], ...] | None = None
    response_body: bytes | None = None  # the first bytes read, at most the action's bound
    response_cut: bool = False  # the body was longer than what was read


class AttemptResult(NamedTuple):
    kind: AttemptKind
    duration: float  # seconds
    status_code: int | None = None  # HTTP status
    exit_code: int | None = None  # script exit code
    error_type: str | None = None  # e.g. "http.503", "ConnectError", "timeout", "exit.1"
    message: str = ""  # short human-readable reason; never holds a secret
    retry_after: float | None = None  # seconds, from a Retry-After header
    response_body: bytes | None = None  # bounded excerpt (JSON or text), for response capture
    response_content_type: str | None = None
    # The action had nothing to do for this event (an in-process executor without the method).
    skipped: bool = False
    # For the delivery history: the HTTP exchange, raw (see Exchange), and a script's
    # (stdout, stderr) tails.
    exchange: Exchange | None = None
    output: tuple[str, str] | None = None
    # A gate's answer as its system gave it, (verdict, reason): a host-protocol script's
    # `deny`, the-loop's refusal (engine/gates.py reads HTTP bodies and stdout itself).
    decision: tuple[str, str] | None = None

    @property
    def ok(self) -> bool:
        return self.kind == "ok"
