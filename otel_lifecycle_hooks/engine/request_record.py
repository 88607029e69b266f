"""The rendered request as the journal keeps it: redacted, so that `replay` can send it again
(adding back at send time what is secret)."""

from __future__ import annotations

from typing import Any

from ..redact import Redactor
from ..render import RenderedCommand, RenderedRequest
from ..template.model import HookSpec


def request_record(
    hook: HookSpec, rendered: RenderedRequest | RenderedCommand | None, redactor: Redactor
) -> dict[str, Any]:
    """What `hook` sent (or ran), secrets taken out by `redactor`; for an action that
    renders nothing, the executor it calls."""
    if rendered is None:
        return {
            "executor": hook.action.module or hook.action.path,
            "attribute": hook.action.executor,
        }
    if isinstance(rendered, RenderedRequest):
        return {
            "method": rendered.method,
            "url": redactor.redact_url(rendered.url),
            "headers": redactor.redact_headers(dict(rendered.headers)),
            "body": redactor.redact_text(rendered.body.decode("utf-8", "replace"))
            if rendered.body
            else None,
            # What a replay must add again at send time (secrets are never stored).
            "auth": hook.action.auth.type,
            "signed": bool(hook.action.signing_secret_env),
        }
    return {
        "argv": [redactor.redact_text(a) for a in rendered.argv],
        "env": {k: redactor.redact_text(v) for k, v in rendered.env.items()},
    }
