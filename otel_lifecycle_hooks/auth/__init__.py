"""Credentials for hooks: GCP (ADC, service accounts), bearer tokens, API keys, signed webhooks.

The engine asks `Credentials.headers_for(auth, url, environ)` once per HTTP attempt; every
strategy refuses to send credentials anywhere but https or loopback (`check_transport`).

Names are imported on first use: every HTTP attempt checks its transport, but only a hook that
uses auth or signing pays for the strategies and their token cache (about 3 ms of `run`'s
start before its agent's spawn, -X importtime).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .credentials import Credentials
    from .errors import AuthError
    from .guard import check_transport, is_loopback_host
    from .signing import message_id, sign, sign_request
    from .static import auth_header_names

# name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    "AuthError": "errors",
    "Credentials": "credentials",
    "auth_header_names": "static",
    "check_transport": "guard",
    "is_loopback_host": "guard",
    "message_id": "signing",
    "sign": "signing",
    "sign_request": "signing",
}

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


def __getattr__(name: str) -> object:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module_name}", __name__), name)
    # Kept as the module's own attribute: every HTTP attempt's `from ..auth import ...` then
    # finds it without coming back here (four import look-ups per delivery otherwise).
    globals()[name] = value
    return value
