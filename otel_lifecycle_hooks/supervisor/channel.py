"""How the agent's hooks and tools find their supervisor, whatever their harness passes on.

The supervisor hands the agent `$LIFECYCLE_HOOKS_SOCKET` (and, for one release, the older
`$OTEL_LIFECYCLE_HOOKS_SOCKET`, which Claude Code removes from its hooks' environment). For a
harness that passes no variable of ours at all, it also writes a pointer file,
`supervisor-<pid>.json` (mode 0600), under the agent's runtime directory
(`$XDG_RUNTIME_DIR/otel-lifecycle-hooks/`) or else `$HOME/.local/state/otel-lifecycle-hooks/run/`;
`hook` and `status` read the pointer of the nearest supervisor among their ancestors
(`harness.socket_client.find_pointer`), and use its socket only if that very supervisor
serves it. The file is removed when the session ends.

A root supervisor writes these for an agent of another user without ever following a path
the agent can change (private_files.py): the pointer folder is made by the agent's user,
opened link by link and checked to be that user's, and the file is created in it through
the folder's descriptor; the Claude Code settings file stays the supervisor's, in the
socket's directory, which the agent cannot write.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..harness.socket_client import (
    LEGACY_SOCKET_ENV,
    PING_KIND,
    POINTER_VERSION,
    SOCKET_ENV,
    pointer_directories,
    pointer_file_name,
)
from ..private_files import (
    create_file,
    make_directories_as,
    open_agent_directory,
    open_own_directory,
    replace_file,
)
from .server import Reply

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

HTTP_ROUTE_ENV = "LIFECYCLE_HOOKS_HTTP"  # 1: open the HTTP route for any agent; 0: never
HTTP_URL_ENV = "LIFECYCLE_HOOKS_HTTP_URL"
HTTP_TOKEN_ENV = "LIFECYCLE_HOOKS_HTTP_TOKEN"
CLAUDE_SETTINGS_ENV = "LIFECYCLE_HOOKS_CLAUDE_SETTINGS"
CLAUDE_SETTINGS_NAME = "claude-settings.json"


def wants_http_route(
    command: Sequence[str], metadata: Mapping[str, str], environ: Mapping[str, str]
) -> bool:
    """Whether a session opens the loopback HTTP route: for Claude Code (the template's
    `harness: claude`, or a `claude` command), or when $LIFECYCLE_HOOKS_HTTP says so. Other
    sessions do without it: it costs every `run` an HTTP server and a token."""
    chosen = environ.get(HTTP_ROUTE_ENV, "").strip().lower()
    if chosen in ("0", "false", "no", "off"):
        return False
    if chosen in ("1", "true", "yes", "on"):
        return True
    if metadata.get("HARNESS_NAME", "").lower() in ("claude", "claude-code"):
        return True
    return bool(command) and os.path.basename(command[0]) == "claude"


class SessionChannel:
    """The routes into one session: the delivery function the Unix socket and the HTTP route
    share (it counts what arrives, for `harness doctor`), the variables and the pointer file;
    `close` takes the HTTP route and the file away."""

    def __init__(
        self,
        deliver: Callable[[dict[str, Any]], None],
        owner: tuple[int, int] | None = None,
        http: bool = False,
        refuse: Callable[[str], None] | None = None,
        ask: Callable[[dict[str, Any], Reply], None] | None = None,
        fail_closed: Callable[[str], bool] | None = None,
    ) -> None:
        """`deliver`: the supervisor's own delivery function; `ask`: its delivery of a
        message whose sender waits for an answer (server.Reply). `owner`: (uid, gid) of the agent
        when it runs as another user. `http`: also open the loopback HTTP route. `refuse`:
        counts what the HTTP route refuses (the supervisor's ingress counter).
        `fail_closed(event)`: whether the template has a fail-closed gate at a lifecycle
        event, the HTTP route's answer when no decision comes in time."""
        self._supervisor_deliver = deliver
        self._supervisor_ask = ask
        self._fail_closed = fail_closed
        self._owner = owner
        self._refuse = refuse
        self._want_http = http
        self._received = 0
        self._count_lock = threading.Lock()
        self.socket_path = ""
        # The pointer folder's descriptor and the file's name: removed through it at close.
        self._pointer: tuple[int, str] | None = None
        self._http: Any = None

    def deliver(self, message: dict[str, Any]) -> None:
        """Hand one message to the supervisor (a `ping` only counts: doctor's probe)."""
        with self._count_lock:
            self._received += 1
        if message.get("kind") == PING_KIND:
            return
        self._supervisor_deliver(message)

    def ask(self, message: dict[str, Any], reply: Reply) -> None:
        """Hand one message whose sender waits for its gates' decision on `reply`."""
        if self._supervisor_ask is None or message.get("kind") == PING_KIND:
            reply.close()
            self.deliver(message)
            return
        with self._count_lock:
            self._received += 1
        self._supervisor_ask(message, reply)

    def received(self) -> int:
        with self._count_lock:
            return self._received

    def open(self, socket_path: str, child_env: Mapping[str, str]) -> dict[str, str]:
        """Open the HTTP route (if any: listening, read once `serve` is called), write the
        pointer file; the variables for the agent."""
        self.socket_path = socket_path
        variables = {SOCKET_ENV: socket_path, LEGACY_SOCKET_ENV: socket_path}
        pointer: dict[str, Any] = {"v": POINTER_VERSION, "pid": os.getpid(), "socket": socket_path}
        if self._want_http:
            try:
                # Claude Code's HTTP route only: about 4 ms before the spawn (-X importtime).
                from .ingest_http import HttpIngest

                self._http = HttpIngest(
                    self.deliver,
                    self.received,
                    agent=self._owner,
                    refuse=self._refuse,
                    ask=self.ask if self._supervisor_ask is not None else None,
                    fail_closed=self._fail_closed,
                )
            except OSError as exc:
                log.warning("HTTP event route not started: %s", exc.strerror or exc)
            else:
                variables[HTTP_URL_ENV] = self._http.url
                variables[HTTP_TOKEN_ENV] = self._http.token
                pointer["http_url"] = self._http.url
                pointer["http_token"] = self._http.token
                settings = self._write_claude_settings()
                if settings is not None:
                    variables[CLAUDE_SETTINGS_ENV] = str(settings)
                    pointer["claude_settings"] = str(settings)
        self._write_pointer(child_env, pointer)
        return variables

    def serve(self) -> None:
        """Start reading the HTTP route, if it is open: once the agent is started (its three
        threads, which the spawn would wait for while they start; bench_startup's seed line)."""
        if self._http is not None:
            self._http.start()

    def close(self) -> None:
        """Remove the pointer file (through the descriptor of the folder it was written in)
        and stop the HTTP route."""
        if self._pointer is not None:
            folder, name = self._pointer
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
            os.close(folder)
            self._pointer = None
        if self._http is not None:
            self._http.close()
            self._http = None

    def _write_claude_settings(self) -> Path | None:
        """A Claude Code settings file whose hooks post to this session's HTTP route, beside
        the socket (in the supervisor's private directory): `claude --settings "$..."`.

        The agent only reads it, and it holds no secret (the token travels as a variable):
        it stays the supervisor's, 0644, in a directory the agent can go through but not
        change."""
        from ..harness.claude_hooks import http_hooks_settings  # as above (about 0.1 ms)

        path = Path(self.socket_path).with_name(CLAUDE_SETTINGS_NAME)
        text = json.dumps(http_hooks_settings(self._http.url), indent=2)
        try:
            folder = open_own_directory(str(path.parent))
            try:
                create_file(folder, path.name, text.encode("utf-8"), 0o644)
            finally:
                os.close(folder)
        except OSError as exc:
            log.warning("Claude Code settings for the HTTP route not written: %s", exc)
            return None
        return path

    def _write_pointer(self, child_env: Mapping[str, str], pointer: dict[str, Any]) -> None:
        """The pointer file, in the first of the agent's pointer folders that can have it."""
        data = json.dumps(pointer).encode("utf-8")
        name = pointer_file_name(os.getpid())
        for folder in pointer_directories(child_env):
            try:
                descriptor = self._pointer_folder(folder)
            except OSError as exc:
                log.debug("pointer file not written under %s: %s", folder, exc)
                continue
            try:
                replace_file(descriptor, name, data, 0o600, self._owner)
            except OSError as exc:
                os.close(descriptor)
                log.debug("pointer file not written under %s: %s", folder, exc)
                continue
            self._pointer = (descriptor, name)
            return
        log.warning("no pointer file written: hooks find the supervisor by variable only")

    def _pointer_folder(self, folder: str) -> int:
        """A descriptor of the pointer folder, made where missing.

        For an agent of this process's own user, made as that user. For another user's
        agent (the supervisor is root), the folder is the agent's, in the agent's space: a
        missing one is made by the agent's user (`make_directories_as`), and it is used only
        if, resolved, it is a directory of that user's (`open_agent_directory`)."""
        if self._owner is None:
            os.makedirs(folder, 0o700, exist_ok=True)
            return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        uid, gid = self._owner
        try:
            return open_agent_directory(folder, uid)
        except FileNotFoundError:
            make_directories_as(folder, uid, gid)
        return open_agent_directory(folder, uid)
