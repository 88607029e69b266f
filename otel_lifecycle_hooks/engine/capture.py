"""What a hook's answer leaves for the hooks after it: `${HOOK_<NAME>_STATUS}` and
`${HOOK_<NAME>_RESPONSE}` (seed 000's response capture)."""

from __future__ import annotations

import functools

from ..actions.base import AttemptResult
from .model import SessionInfo

# Bound on a captured response body, for ${HOOK_<NAME>_RESPONSE}.
CAPTURE_LIMIT = 64 * 1024


@functools.lru_cache(maxsize=4096)  # a hook's name is the same on every execution
def capture_prefix(hook_name: str) -> str:
    """`register-agent` -> `HOOK_REGISTER_AGENT` (seed 000's `${HOOK_<NAME>_RESPONSE}`)."""
    return "HOOK_" + "".join(c if c.isalnum() else "_" for c in hook_name.upper())


def capture(hook_name: str, session: SessionInfo, result: AttemptResult) -> None:
    """Keep `result`'s status and (bounded) body in `session` for the hooks after this one."""
    prefix = capture_prefix(hook_name)
    values: dict[str, str] = {f"{prefix}_STATUS": str(result.status_code or "")}
    body = result.response_body
    if body is not None:
        values[f"{prefix}_RESPONSE"] = body[:CAPTURE_LIMIT].decode("utf-8", "replace")
    session.capture(values)
