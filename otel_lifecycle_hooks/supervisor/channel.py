"""How the agent's hooks and tools find their supervisor, whatever their harness passes on.

The supervisor hands the agent `$LIFECYCLE_HOOKS_SOCKET` (and, for one release, the older
`$OTEL_LIFECYCLE_HOOKS_SOCKET`, which Claude Code removes from its hooks' environment). For a
harness that passes no variable of ours at all, it also writes a pointer file,
`supervisor-<pid>.json` (mode 0600), under the agent's runtime directory
(`$XDG_RUNTIME_DIR/otel-lifecycle-hooks/`) or else `$HOME/.local/state/otel-lifecycle-hooks/run/`;
`hook` and `status` read the pointer of the nearest supervisor among their ancestors
(`harness.socket_client.find_pointer`). The file is removed when the session ends.
"""

from __future__ import annotations

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

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

HTTP_ROUTE_ENV = "LIFECYCLE_HOOKS_HTTP"  # 1: open the HTTP route for any agent; 0: never
HTTP_URL_ENV = "LIFECYCLE_HOOKS_HTTP_URL"
HTTP_TOKEN_ENV = "LIFECYCLE_HOOKS_HTTP_TOKEN"
CLAUDE_SETTINGS_ENV = "LIFECYCLE_HOOKS_CLAUDE_SETTINGS"


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
    ) -> None:
        """`deliver`: the supervisor's own delivery function. `owner`: (uid, gid) of the agent
        when it runs as another user. `http`: also open the loopback HTTP route. `refuse`:
        counts what the HTTP route refuses (the supervisor's ingress counter)."""
        self._supervisor_deliver = deliver
        self._owner = owner
        self._refuse = refuse
        self._want_http = http
        self._received = 0
        self._count_lock = threading.Lock()
        self.socket_path = ""
        self._pointer: Path | None = None
        self._http: Any = None

    def deliver(self, message: dict[str, Any]) -> None:
        """Hand one message to the supervisor (a `ping` only counts: doctor's probe)."""
        with self._count_lock:
            self._received += 1
        if message.get("kind") == PING_KIND:
            return
        self._supervisor_deliver(message)

    def received(self) -> int:
        with self._count_lock:
            return self._received

    def open(self, socket_path: str, child_env: Mapping[str, str]) -> dict[str, str]:
        """Start the HTTP route (if any), write the pointer file; the variables for the agent."""
        self.socket_path = socket_path
        variables = {SOCKET_ENV: socket_path, LEGACY_SOCKET_ENV: socket_path}
        pointer: dict[str, Any] = {"v": POINTER_VERSION, "pid": os.getpid(), "socket": socket_path}
        if self._want_http:
            try:
                from .ingest_http import HttpIngest

                self._http = HttpIngest(
                    self.deliver, self.received, agent=self._owner, refuse=self._refuse
                ).start()
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
        self._pointer = self._write_pointer(child_env, pointer)
        return variables

    def close(self) -> None:
        if self._pointer is not None:
            try:
                self._pointer.unlink()
            except OSError:
                pass
            self._pointer = None
        if self._http is not None:
            self._http.close()
            self._http = None

    def _write_claude_settings(self) -> Path | None:
        """A Claude Code settings file whose hooks post to this session's HTTP route, beside
        the socket (in the supervisor's private directory): `claude --settings "$..."`."""
        from ..harness.claude_hooks import http_hooks_settings

        path = Path(self.socket_path).with_name("claude-settings.json")
        try:
            _write_private(path, json.dumps(http_hooks_settings(self._http.url), indent=2))
            if self._owner is not None:
                os.chown(path, *self._owner)
        except OSError as exc:
            log.warning("Claude Code settings for the HTTP route not written: %s", exc)
            return None
        return path

    def _write_pointer(self, child_env: Mapping[str, str], pointer: dict[str, Any]) -> Path | None:
        text = json.dumps(pointer)
        for folder in pointer_directories(child_env):
            try:
                directory = _private_folder(Path(folder), self._owner)
                path = directory / pointer_file_name(os.getpid())
                _write_private(path, text)
                if self._owner is not None:
                    os.chown(path, *self._owner)
                return path
            except OSError as exc:
                log.debug("pointer file not written under %s: %s", folder, exc)
        log.warning("no pointer file written: hooks find the supervisor by variable only")
        return None


def _private_folder(folder: Path, owner: tuple[int, int] | None) -> Path:
    """`folder`, created 0700 where missing; no component below an existing directory may be
    a symbolic link (the agent owns these folders, and the supervisor may be root)."""
    base = folder
    missing: list[str] = []
    while not base.exists():
        missing.append(base.name)
        base = base.parent
    # Where the existing part ends, every component we go through must be a real directory.
    descriptor = os.open(base.resolve(), os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in reversed(missing):
            try:
                os.mkdir(name, 0o700, dir_fd=descriptor)
                if owner is not None:
                    os.chown(name, *owner, dir_fd=descriptor, follow_symlinks=False)
            except FileExistsError:
                pass
            child = os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=descriptor
            )
            os.close(descriptor)
            descriptor = child
    finally:
        os.close(descriptor)
    resolved = base.resolve().joinpath(*reversed(missing))
    if owner is not None:
        # Root writing for another user: only into folders that user owns and can reach.
        for checked in (resolved, resolved.parent):
            if checked.stat().st_uid != owner[0]:
                raise PermissionError(f"{checked} is not owned by the agent's user")
    return resolved


def _write_private(path: Path, text: str) -> None:
    """Write `text` to a new file at `path`, mode 0600, never through a link planted there."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.unlink()
    except FileNotFoundError:
        pass
    descriptor = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
    )
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)
