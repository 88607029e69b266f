"""What one attempt of an action produced: the engine's policies decide what happens next."""

from __future__ import annotations

from typing import Literal, NamedTuple

# How an attempt ended, before any policy is applied.
#   ok         2xx, or exit code 0
#   permanent  4xx (not 429), a redirect, a script exiting non-zero, a missing executable
#   transient  5xx, 429, connection errors
#   timeout    the attempt ran past its timeout
AttemptKind = Literal["ok", "permanent", "transient", "timeout"]


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

    @property
    def ok(self) -> bool:
        return self.kind == "ok"
