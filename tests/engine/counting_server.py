"""A real keep-alive HTTP/1.1 server on 127.0.0.1 that counts the TCP connections it accepts.

One thread serves every connection through a selector, so the server adds one thread to the
process however many connections the client opens (a test counting the engine's threads
sees the engine's). It keeps every request's path and body in arrival order, and the
process's thread count when each arrived. A path in `hang` is read and never answered until
the server stops.
"""

from __future__ import annotations

import selectors
import socket
import threading
from dataclasses import dataclass
from typing import Self


@dataclass(frozen=True)
class Arrival:
    path: str
    body: bytes
    threads: int  # threading.active_count() when it arrived
    headers: dict[str, str]  # names in lower case
    connection: int  # which accepted connection it came on (1 for the first)


class CountingServer:
    def __init__(self, hang: tuple[str, ...] = ()) -> None:
        self.hang = hang
        self.accepted = 0
        self.arrivals: list[Arrival] = []
        self._numbers: dict[socket.socket, int] = {}
        self._lock = threading.Condition()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._stop_reader, self._stop_writer = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="counting-server", daemon=True)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_writer.send(b"x")
        self._thread.join(10)
        self._listener.close()
        self._stop_writer.close()

    def wait_for(self, count: int, timeout: float = 60.0) -> list[Arrival]:
        """Every arrival so far, once there are at least `count` (a hang check, not timing)."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.arrivals) >= count, timeout):
                raise AssertionError(f"{len(self.arrivals)} of {count} requests arrived")
            return list(self.arrivals)

    def _serve(self) -> None:
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._stop_reader, selectors.EVENT_READ, "stop")
        buffers: dict[socket.socket, bytes] = {}
        try:
            while True:
                for key, _ in self._selector.select():
                    if key.data == "stop":
                        return
                    if key.data == "accept":
                        self._accept(buffers)
                        continue
                    connection: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        chunk = connection.recv(65536)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        self._selector.unregister(connection)
                        buffers.pop(connection, None)
                        connection.close()
                        continue
                    buffers[connection] = self._answer(connection, buffers[connection] + chunk)
        finally:
            for connection in buffers:
                connection.close()
            self._selector.close()
            self._stop_reader.close()

    def _accept(self, buffers: dict[socket.socket, bytes]) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except BlockingIOError:
                return
            connection.setblocking(True)
            with self._lock:
                self.accepted += 1
                self._numbers[connection] = self.accepted
            buffers[connection] = b""
            self._selector.register(connection, selectors.EVENT_READ, "read")

    def _answer(self, connection: socket.socket, buffer: bytes) -> bytes:
        """Answer every complete request in `buffer`; return what is left of it."""
        while b"\r\n\r\n" in buffer:
            head, _, rest = buffer.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower().decode()] = value.strip().decode()
            length = int(headers.get("content-length", 0))
            if len(rest) < length:
                return buffer
            body, buffer = rest[:length], rest[length:]
            path = lines[0].split(b" ")[1].decode()
            with self._lock:
                self.arrivals.append(
                    Arrival(
                        path,
                        body,
                        threading.active_count(),
                        headers,
                        self._numbers[connection],
                    )
                )
                self._lock.notify_all()
            if path not in self.hang:
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        return buffer
