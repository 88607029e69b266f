"""A loopback stand-in for the GCE metadata server, as google-auth 2.x talks to it.

google-auth reads GCE_METADATA_HOST (host:port for /computeMetadata/v1/...) when
google.auth.compute_engine._metadata is imported, and GCE_METADATA_IP (host:port, its
detection ping at "/") at call time; both must point here before google-auth is imported,
so the tests that use this server run their client in a subprocess.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Self
from urllib.parse import parse_qs, urlsplit

from .loopback import LoopbackServer, reply

_ROOT = "/computeMetadata/v1/"
_FLAVOR = {"Metadata-Flavor": "Google"}


class FakeMetadataServer:
    """Answers the detection ping, project id, default service account info and its token."""

    def __init__(self, *, project_id: str = "test-project", expires_in: int = 3600) -> None:
        self.project_id = project_id
        self.expires_in = expires_in
        self.email = f"agent@{project_id}.iam.gserviceaccount.com"
        self.paths: list[str] = []
        self.token_scopes: list[str] = []
        self.issued: list[str] = []
        self._lock = threading.Lock()
        self.server = LoopbackServer(self._handle)

    @property
    def address(self) -> str:
        return self.server.address

    def __enter__(self) -> Self:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        with self._lock:
            self.paths.append(parts.path)
        # The real server refuses requests without the header (a defence against SSRF).
        if handler.headers.get("Metadata-Flavor") != "Google":
            reply(handler, 403, b"Missing Metadata-Flavor:Google header.", "text/plain", _FLAVOR)
            return
        path = parts.path
        if path == "/":
            reply(handler, 200, b"", "text/plain", _FLAVOR)
        elif path == _ROOT + "project/project-id":
            reply(handler, 200, self.project_id.encode(), "application/text", _FLAVOR)
        elif path == _ROOT + "instance/service-accounts/default/":
            info = {
                "email": self.email,
                "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                "aliases": ["default"],
            }
            reply(handler, 200, json.dumps(info).encode(), "application/json", _FLAVOR)
        elif path == _ROOT + "instance/service-accounts/default/token":
            scopes = parse_qs(parts.query).get("scopes", [""])[0]
            with self._lock:
                token = f"ya29.metadata-{len(self.issued) + 1}"
                self.issued.append(token)
                self.token_scopes.append(scopes)
            body = {"access_token": token, "expires_in": self.expires_in, "token_type": "Bearer"}
            reply(handler, 200, json.dumps(body).encode(), "application/json", _FLAVOR)
        else:
            reply(handler, 404, b"not found", "text/plain", _FLAVOR)
