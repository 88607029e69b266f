"""The supervisor's event socket: a Unix stream socket through which `hook --dialect` and
`status` hand runtime events to the running session (one JSON object per line).

The socket lives in a private directory (mode 0700) so that only the agent's user can feed
events in; its path reaches the child as `OTEL_LIFECYCLE_HOOKS_SOCKET`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

SOCKET_ENV = "OTEL_LIFECYCLE_HOOKS_SOCKET"
MAX_MESSAGE = 8 * 1024 * 1024
# A client that connects and sends nothing is dropped after this long (clients are served one
# at a time, so this bounds how long one stalled client holds up the others).
CLIENT_TIMEOUT = 2.0


class EventServer:
    """Accepts connections on a thread and hands each decoded message to `deliver`, in the
    order the connections were accepted."""

    def __init__(
        self,
        deliver: Callable[[dict[str, Any]], None],
        directory: str | None = None,
        owner: tuple[int, int] | None = None,
    ) -> None:
        """`owner`: (uid, gid) to hand the socket and its directory to, when the agent runs
        as another user than the supervisor (root)."""
        self._deliver = deliver
        self._dir = _private_directory(directory)
        self.path = str(self._dir / "events.sock")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)
        if owner is not None:
            os.chown(self._dir, *owner)
            os.chown(self.path, *owner)
        self._sock.listen(64)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="event-socket", daemon=True)

    def start(self) -> EventServer:
        self._thread.start()
        return self

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            # One at a time, so that events reach the session in the order they were sent
            # (clients write a few lines and close; a stalled one is dropped after a timeout).
            self._serve(conn)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(CLIENT_TIMEOUT)
        buffer = bytearray()
        try:
            with conn:
                while len(buffer) <= MAX_MESSAGE:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buffer += chunk
                    if b"\n" not in chunk:
                        continue
                    # Every complete line at once: splitting one line at a time would copy
                    # the rest of the buffer for each line.
                    *lines, rest = buffer.split(b"\n")
                    buffer = bytearray(rest)
                    for line in lines:
                        self._decode(bytes(line))
                if buffer.strip() and len(buffer) <= MAX_MESSAGE:
                    self._decode(bytes(buffer))
        except (TimeoutError, OSError):
            log.debug("event socket client failed", exc_info=True)

    def _decode(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            log.warning("event socket: a message that is not JSON was ignored")
            return
        if not isinstance(message, dict):
            log.warning("event socket: a message that is not a JSON object was ignored")
            return
        try:
            self._deliver(message)
        except Exception:
            log.exception("event socket: delivering a message failed")

    def close(self) -> None:
        self._stopped.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            os.unlink(self.path)
            os.rmdir(self._dir)
        except OSError:  # something else was left in it (an agent running as its owner)
            import shutil

            shutil.rmtree(self._dir, ignore_errors=True)


def _private_directory(parent: str | None) -> Path:
    """A new directory only we can enter, under `parent` or the temporary directory.

    What `tempfile.mkdtemp` does; importing tempfile (and the shutil, bz2 and lzma it pulls
    in) would cost every `run` about 2 ms.
    """
    base = parent or os.environ.get("TMPDIR") or "/tmp"
    for _ in range(100):
        path = Path(base, f"olh-{random.getrandbits(48):012x}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        os.chmod(path, 0o700)  # whatever the umask
        return path
    raise FileExistsError(f"no free directory name under {base}")
