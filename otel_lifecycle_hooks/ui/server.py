"""The page's HTTP server: stdlib `ThreadingHTTPServer` on a loopback address.

Routes (every one behind `access.check`):

    GET  /                              the page's shell: no data, served without the token
    GET  /app.js, /app.css              its script and style (likewise)
    GET  /api/settings                  the page's settings (the trace-UI URL template)
    GET  /api/sessions                  the latest sessions
    GET  /api/deliveries?FILTERS        the delivery log: a page of deliveries, newest first,
                                        filtered, searched, and paged by cursor (views.LogQuery)
    GET  /api/hooks/NAME                one hook's figures over its newest deliveries
    GET  /api/sessions/ID/deliveries    a session's deliveries, newest first
    GET  /api/deliveries/ID             one delivery with its attempts
    POST /api/deliveries/ID/redeliver   `replay` of that delivery; the new delivery's row

Every /api/ route needs the token in the `X-Lifecycle-Hooks-Token` header: the page's script
takes it from the printed URL's fragment (`#token=...`, which no browser sends to a server)
and keeps it in sessionStorage. No cookie is ever set. The page polls the view it shows, so a
delivery journaled while it is open appears on its own.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import LifecycleHooksError
from ..journal import views as journal_views
from ..journal.base import Journal
from ..journal.rows import RUNNING
from ..loopback import is_loopback_host
from ..replay import Replayer, restart_ui_advice
from . import access, views

log = logging.getLogger("otel_lifecycle_hooks.ui")

_STATIC_TYPES = {
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}
_SESSION_DELIVERIES = re.compile(r"^/api/sessions/([^/]+)/deliveries$")
_DELIVERY = re.compile(r"^/api/deliveries/([0-9]{1,18})$")
_HOOK = re.compile(r"^/api/hooks/([^/]+)$")
_REDELIVER = re.compile(r"^/api/deliveries/([0-9]{1,18})/redeliver$")
# Seconds a connection may sit idle or half-sent before the server closes it: a local client
# holding connections open (slowloris) must not keep a thread and a descriptor each forever.
IDLE_TIMEOUT = 10.0


class NotLoopback(ValueError, LifecycleHooksError):
    """The page is served on loopback addresses only."""


class PageServer(ThreadingHTTPServer):
    """Serves the journal's page on `host:port` (port 0: any free port) to whoever holds
    `token`. `templates` and `environ` are what redeliveries read, as for `replay`;
    `tracer_provider` / `meter_provider` get their hook spans and metrics (default: global)."""

    daemon_threads = True  # a browser's open connection never holds up shutdown

    def __init__(
        self,
        journal: Journal,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        templates: Sequence[str] = (),
        environ: Mapping[str, str] | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        journal_args: Sequence[str] = (),
        tracer_provider: Any = None,
        meter_provider: Any = None,
        trace_url: str | None = None,
    ) -> None:
        if not is_loopback_host(host) or host.strip().lower().startswith("localhost"):
            # A name would be resolved; only a loopback address literal is bound.
            raise NotLoopback(
                f"--host {host!r}: the page binds a loopback address only (127.0.0.1 or ::1)"
            )
        bare = host.strip("[]")
        if ":" in bare:
            self.address_family = socket.AF_INET6
        self.journal = journal
        self.token = token
        self.trace_url = views.trace_url_template(trace_url) if trace_url else None
        self.idle_timeout = idle_timeout
        self.templates = tuple(templates)
        self.journal_args = tuple(journal_args)  # `ui`'s own --journal, for the advice below
        self.environ = dict(os.environ if environ is None else environ)
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        # One redelivery at a time: a double click must not send a delivery twice.
        self.redeliver_lock = threading.Lock()
        self._files = {
            name: resources.files(__package__).joinpath("static", name).read_bytes()
            for name in ("index.html", "app.js", "app.css")
        }
        super().__init__((bare, port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        host = str(self.server_address[0])
        shown = f"[{host}]" if ":" in host else host
        # In the fragment: never sent to a server, so in no request line, log or Referer.
        return f"http://{shown}:{self.port}/#{access.TOKEN_FRAGMENT}={self.token}"

    def static(self, name: str) -> bytes:
        return self._files[name]


def serve(server: PageServer) -> None:
    """Answer requests until interrupted."""
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: PageServer
    server_version = "otel-lifecycle-hooks-ui"
    sys_version = ""

    def version_string(self) -> str:
        return self.server_version

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.idle_timeout)  # on reads and writes alike

    def log_message(self, format: str, *args: Any) -> None:
        # A token pasted into a query (an old form of the URL) must not reach the log.
        line = (format % args).replace(self.server.token, "[REDACTED]")
        log.debug("%s %s", self.address_string(), line)

    # -- entry points --

    def do_GET(self) -> None:
        self._answer("GET")

    def do_HEAD(self) -> None:
        self._answer("GET", head=True)

    def do_POST(self) -> None:
        self._answer("POST")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_DELETE(self) -> None:
        self._answer("DELETE")

    def do_PATCH(self) -> None:
        self._answer("PATCH")

    def do_OPTIONS(self) -> None:
        # No CORS preflight is ever granted: a cross-origin page cannot send the token header.
        self._answer("OPTIONS")

    # -- dispatch --

    def _answer(self, method: str, head: bool = False) -> None:
        self._head_only = head
        path = urlsplit(self.path).path
        server = self.server
        refusal = access.check(
            method=method,
            path=path,
            host_header=self.headers.get("Host"),
            header_token=self.headers.get(access.TOKEN_HEADER),
            origin=self.headers.get("Origin"),
            port=server.port,
            token=server.token,
        )
        if refusal is not None:
            self._send_json(refusal.status, {"error": refusal.reason})
            return
        try:
            if method == "POST":
                self._post(path)
            else:
                self._get(path)
        except Exception:  # one request's failure never stops the page
            log.exception("ui: %s %s failed", method, path)
            self._send_json(500, {"error": "the server failed to answer; see its log"})

    def _get(self, path: str) -> None:
        server = self.server
        if path == "/":
            self._send(200, server.static("index.html"), "text/html; charset=utf-8")
            return
        if path in _STATIC_TYPES:
            name, content_type = _STATIC_TYPES[path]
            self._send(200, server.static(name), content_type)
            return
        if path == "/api/settings":
            self._send_json(200, {"trace_url": server.trace_url})
            return
        if path == "/api/deliveries":
            try:
                query = views.log_query(self.path)
            except views.BadQuery as exc:
                self._send_json(400, {"error": str(exc)})
                return
            self._send_data(self._log(query), views.LIST_TEXT_LIMIT)
            return
        match = _HOOK.match(path)
        if match:
            self._send_data(self._hook(unquote(match.group(1))), views.LIST_TEXT_LIMIT)
            return
        if path == "/api/sessions":
            self._send_data(self._sessions(), views.LIST_TEXT_LIMIT)
            return
        match = _SESSION_DELIVERIES.match(path)
        if match:
            self._send_data(self._deliveries(unquote(match.group(1))), views.LIST_TEXT_LIMIT)
            return
        match = _DELIVERY.match(path)
        if match:
            found = self._delivery(int(match.group(1)))
            if found is None:
                self._send_json(404, {"error": f"no delivery {match.group(1)} in the journal"})
            else:
                self._send_data(found)
            return
        self._send_json(404, {"error": "no such page"})

    def _post(self, path: str) -> None:
        match = _REDELIVER.match(path)
        if not match:
            self._send_json(404, {"error": "no such action"})
            return
        self._drain_body()
        self._send_data(self._redeliver(int(match.group(1))))

    # -- the data --

    def _sessions(self) -> dict[str, Any]:
        sessions = journal_views.list_sessions(self.server.journal, limit=views.SESSIONS_SHOWN)
        data: dict[str, Any] = {"sessions": [views.session_entry(s) for s in sessions]}
        # Said when a shared database was unavailable and writes wait on this machine: the
        # list may lack them until they are written.
        notice = self.server.journal.backlog()
        if notice:
            data["journal_notice"] = notice
        return data

    def _log(self, query: views.LogQuery) -> dict[str, Any]:
        # One row more than a page says whether another page lies beyond it.
        newer = query.after is not None
        rows = journal_views.list_executions(
            self.server.journal, **query.filters(), before_id=query.before,
            after_id=query.after, oldest_first=newer, limit=views.LOG_PAGE + 1,
        )  # fmt: skip
        more = len(rows) > views.LOG_PAGE
        rows = rows[: views.LOG_PAGE]
        return views.log_page(rows[::-1] if newer else rows, query, more=more)

    def _hook(self, hook: str) -> dict[str, Any]:
        summary = journal_views.hook_summary(self.server.journal, hook, window=views.SUMMARY_WINDOW)
        return views.hook_entry(summary, views.SUMMARY_WINDOW)

    def _deliveries(self, session_id: str) -> dict[str, Any]:
        journal = self.server.journal
        deliveries = journal_views.list_executions(
            journal, session_id, limit=views.DELIVERIES_SHOWN
        )
        replays = views.replays_of(deliveries)
        session = journal.session(session_id)
        over = views.session_over(session)
        return {
            "session": views.session_header(session, deliveries),
            "deliveries": [
                views.delivery_entry(
                    d, replays.get(d["id"], ()), with_request=False, session_over=over
                )
                for d in deliveries
            ],
        }

    def _delivery(self, execution_id: int) -> dict[str, Any] | None:
        journal = self.server.journal
        delivery = journal_views.get_execution(journal, execution_id)
        if delivery is None:
            return None
        siblings = journal_views.list_executions(
            journal, delivery["session_id"] or None, limit=views.DELIVERIES_SHOWN
        )
        replays = views.replays_of(siblings).get(execution_id, [])
        recorded = delivery.pop("attempts")
        delivery["attempts"] = delivery.pop("attempt_count", len(recorded))
        # While it retries, how many attempts it will make is not known yet.
        of_attempts = None if delivery["outcome"] == RUNNING else len(recorded)
        attempts = [views.attempt_entry(attempt, of_attempts) for attempt in recorded]
        session_id = delivery["session_id"] or ""
        session = journal.session(session_id) if session_id else None
        return {
            "session": views.session_name(session),
            "delivery": views.delivery_entry(
                delivery, replays, session_over=views.session_over(session)
            ),
            "outgoing": views.outgoing(delivery.get("request")),
            "curl": views.as_curl(delivery.get("request")),
            "attempts": attempts or [views.summary_attempt(delivery)],
        }

    def _redeliver(self, execution_id: int) -> dict[str, Any]:
        # The very code `replay ID` runs: select nothing of its own, send, journal the new row.
        # Only the templates `ui` was started with render it; without any, the refusal says
        # how to restart the page with the one the journal names.

        server = self.server
        with server.redeliver_lock:
            replayer = Replayer(
                server.journal, templates=list(server.templates), environ=server.environ,
                advice=lambda _row, hint: restart_ui_advice(server.journal_args, hint),
                tracer_provider=server.tracer_provider, meter_provider=server.meter_provider,
            )  # fmt: skip
            try:
                [row] = replayer.select([execution_id])
                outcome = replayer.replay(row)
            finally:
                replayer.close()
        return {"outcome": views.json_ready(outcome.as_dict())}

    # -- sending --

    def _drain_body(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if 0 < length <= 65536:
            self.rfile.read(length)

    def _send_data(self, data: Mapping[str, Any], text_limit: int = views.TEXT_LIMIT) -> None:
        if not self.server.journal.healthy:
            error = "the journal cannot be read; see the server's log"
            notice = self.server.journal.backlog()
            self._send_json(503, {"error": f"{error} ({notice})" if notice else error})
            return
        self._send_json(200, views.bounded(data, text_limit))

    def _send_json(self, status: int, data: Mapping[str, Any]) -> None:
        body = json.dumps(data).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in access.SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        if not self._head_only:
            self.wfile.write(body)
