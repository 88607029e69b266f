"""Credentials for hooks: GCP (ADC, service accounts), bearer tokens, API keys, signed webhooks.

The engine asks `Credentials.headers_for(auth, url, environ)` once per HTTP attempt; every
strategy refuses to send credentials anywhere but https or loopback (`check_transport`).
"""

from .credentials import Credentials
from .errors import AuthError
from .guard import check_transport, is_loopback_host
from .signing import message_id, sign, sign_request
from .static import auth_header_names

__all__ = [
    "AuthError",
    "Credentials",
    "auth_header_names",
    "check_transport",
    "is_loopback_host",
    "message_id",
    "sign",
    "sign_request",
]
