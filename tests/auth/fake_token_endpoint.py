"""A loopback OAuth 2.0 token endpoint standing in for oauth2.googleapis.com/token.

It VERIFIES what google-auth sends: a service account's RS256 JWT assertion (signature against
the key pair's public key, audience = Google's token endpoint), or an authorized user's refresh
token, and answers with access tokens whose lifetimes the test chooses.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Self
from urllib.parse import parse_qs

from google.auth import jwt

from .loopback import LoopbackServer, read_body, reply

JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
# google-auth addresses service-account assertions to Google's token endpoint whatever the key
# file's token_uri says, and that is the audience Google checks.
ASSERTION_AUDIENCE = "https://oauth2.googleapis.com/token"


class FakeTokenEndpoint:
    """`expires_in` gives each issued token's lifetime in turn (the last one repeats).

    `failure` makes every request fail: "invalid_grant" (400, not retried by google-auth) or
    "500" (retried by google-auth, then given up). A failing answer echoes the request's
    credential back, as a careless server might, so tests can check it is never passed on.
    """

    def __init__(
        self,
        *,
        public_key_pem: bytes | None = None,
        refresh_token: str | None = None,
        subject_token: str | None = None,
        expires_in: tuple[int, ...] = (3600,),
        failure: str | None = None,
        delay: float = 0.0,
    ) -> None:
        self.public_key_pem = public_key_pem
        self.refresh_token = refresh_token
        self.subject_token = subject_token
        self.expires_in = expires_in
        self.failure = failure
        self.delay = delay
        self.requests = 0
        self.issued: list[str] = []
        self.claims: list[dict[str, Any]] = []
        self.rejections: list[str] = []
        self._lock = threading.Lock()
        self.server = LoopbackServer(self._handle)

    @property
    def url(self) -> str:
        return self.server.url + "/token"

    def __enter__(self) -> Self:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        form = {k: v[0] for k, v in parse_qs(read_body(handler).decode()).items()}
        with self._lock:
            self.requests += 1
        if self.delay:
            time.sleep(self.delay)  # lets concurrent callers pile up behind one refresh
        presented = (
            form.get("assertion") or form.get("refresh_token") or form.get("subject_token", "")
        )
        if self.failure == "500":
            reply(handler, 500, json.dumps({"error": "backend_error", "echo": presented}).encode())
            return
        if self.failure == "invalid_grant":
            body = {"error": "invalid_grant", "error_description": f"Invalid grant: {presented}"}
            reply(handler, 400, json.dumps(body).encode())
            return
        problem = self._verify(form)
        if problem:
            with self._lock:
                self.rejections.append(problem)
            reply(
                handler,
                400,
                json.dumps({"error": "invalid_grant", "error_description": problem}).encode(),
            )
            return
        with self._lock:
            number = len(self.issued) + 1
            token = f"ya29.loopback-{number}"
            self.issued.append(token)
            lifetime = self.expires_in[min(number, len(self.expires_in)) - 1]
        answer = {"access_token": token, "expires_in": lifetime, "token_type": "Bearer"}
        if form.get("grant_type") == TOKEN_EXCHANGE_GRANT:
            answer["issued_token_type"] = "urn:ietf:params:oauth:token-type:access_token"
        reply(handler, 200, json.dumps(answer).encode())

    def _verify(self, form: dict[str, str]) -> str | None:
        grant = form.get("grant_type")
        if grant == JWT_GRANT and self.public_key_pem is not None:
            try:
                claims = jwt.decode(
                    form.get("assertion", ""),
                    certs=self.public_key_pem.decode(),
                    audience=ASSERTION_AUDIENCE,
                    clock_skew_in_seconds=30,
                )
            except Exception as exc:  # noqa: BLE001 - any failure is a rejection
                return f"assertion rejected: {type(exc).__name__}: {exc}"
            with self._lock:
                self.claims.append(claims)
            return None
        if grant == "refresh_token" and self.refresh_token is not None:
            return None if form.get("refresh_token") == self.refresh_token else "bad refresh token"
        if grant == TOKEN_EXCHANGE_GRANT and self.subject_token is not None:
            return None if form.get("subject_token") == self.subject_token else "bad subject token"
        return f"unexpected grant_type {grant!r}"
