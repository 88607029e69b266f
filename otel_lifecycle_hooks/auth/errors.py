"""The one error credential handling raises, and how a failure's reason is made safe to show."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import LifecycleHooksError

# error.type values, so the engine can tell a refused transport from a missing secret.
TRANSPORT_REFUSED = "auth.transport_refused"
# The rendered URL leads elsewhere than the origin the template's own text fixed.
ORIGIN_REFUSED = "auth.origin_refused"
MISSING_SECRET = "auth.missing_secret"
INVALID_SECRET = "auth.invalid_secret"
CREDENTIALS_UNAVAILABLE = "auth.credentials_unavailable"
REFRESH_FAILED = "auth.refresh_failed"

_REASON_LIMIT = 400
_REDACTED = "[REDACTED]"
# Shapes of credentials that may appear in a library's error text even when we never saw them:
# JWTs (assertions, ID tokens), Google access tokens, PEM private keys, bearer values.
# Compiled on the first failure to explain, not by every start-up that imports this module.
_CREDENTIAL_SHAPES = (
    (r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.DOTALL),
    (r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*", 0),
    (r"ya29\.[A-Za-z0-9_.-]+", 0),
    (r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+", 0),
    (
        r"(?i)(\"?(?:access_token|refresh_token|id_token|assertion|private_key|client_secret)\"?\s*[:=]\s*)(\"[^\"]*\"|'[^']*'|[^\s,}&]+)",
        0,
    ),
)


class AuthError(LifecycleHooksError):
    """Credentials for a hook could not be provided; the message says what is wrong and how to
    fix it, and never holds a secret value.

    `error_type` is a stable short code (`auth.missing_secret`, `auth.transport_refused`, ...)
    for span attributes and metrics.
    """

    def __init__(self, message: str, *, error_type: str = CREDENTIALS_UNAVAILABLE) -> None:
        super().__init__(message)
        self.error_type = error_type


def safe_reason(exc: BaseException | str, secrets: Iterable[str] = ()) -> str:
    """`exc`'s text with known secret values and credential-shaped strings removed, shortened.

    Library errors (google-auth's especially) can quote a token endpoint's response, so their text
    is never passed on as it is.
    """
    text = exc if isinstance(exc, str) else (str(exc) or type(exc).__name__)
    # Longest first, so a secret that contains another is removed whole.
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, _REDACTED)
    for pattern, flags in _CREDENTIAL_SHAPES:
        text = re.sub(
            pattern, lambda m: (m.group(1) if m.re.groups else "") + _REDACTED, text, flags=flags
        )
    text = " ".join(text.split())
    if len(text) > _REASON_LIMIT:
        text = text[: _REASON_LIMIT - 3] + "..."
    return text
