"""Standard Webhooks signatures (https://www.standardwebhooks.com/).

A receiver verifies `webhook-signature` = `v1,` + base64(HMAC-SHA256(key, "{id}.{ts}.{body}"))
with the shared secret `whsec_<base64 key>`. The message id is derived from the hook's
idempotency key, so every retry of one delivery carries the same `webhook-id` (receivers
deduplicate on it) with a fresh timestamp and signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from .errors import INVALID_SECRET, MISSING_SECRET, AuthError

SECRET_PREFIX = "whsec_"
SIGNATURE_VERSION = "v1"


def parse_secret(secret: str, *, secret_env: str | None = None) -> bytes:
    """The HMAC key inside a `whsec_<base64>` secret.

    Raises `AuthError` when the secret is empty or not in that format; the message names the
    variable (`secret_env`) but never the value.
    """
    where = f"environment variable {secret_env}" if secret_env else "the signing secret"
    secret = secret.strip()
    if not secret:
        raise AuthError(
            f"webhook signing: {where} is unset or empty; set it to the receiver's "
            f"secret ({SECRET_PREFIX}<base64>)",
            error_type=MISSING_SECRET,
        )
    if not secret.startswith(SECRET_PREFIX):
        raise AuthError(
            f"webhook signing: {where} must start with {SECRET_PREFIX} (Standard Webhooks "
            "secret format); copy the secret exactly as the receiver shows it",
            error_type=INVALID_SECRET,
        )
    encoded = secret[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not key:
        raise AuthError(
            f"webhook signing: {where} is not {SECRET_PREFIX} followed by base64; "
            "copy the secret exactly as the receiver shows it",
            error_type=INVALID_SECRET,
        )
    return key


def message_id(idempotency_key: str) -> str:
    """A `webhook-id` that is the same for every attempt of one delivery (`msg_` + 32 hex)."""
    return "msg_" + hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()[:32]


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers for one attempt (timestamp in Unix seconds).

    Raises `AuthError` when `secret` is not a `whsec_<base64>` secret.
    """
    key = parse_secret(secret)
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode('ascii')}",
    }


def sign_request(
    secret: str,
    idempotency_key: str,
    timestamp: int,
    body: bytes,
    *,
    secret_env: str | None = None,
) -> dict[str, str]:
    """Sign one attempt of a delivery: `sign` with the message id of `idempotency_key`.

    `secret_env` (the variable's name) makes a format error say where the secret came from.
    """
    parse_secret(secret, secret_env=secret_env)  # the error names the variable
    return sign(secret, message_id(idempotency_key), timestamp, body)
