"""A loopback HTTP/1.1 sink run as its own process, so that a benchmark's figures pay only for
the agent's work, not for the server's CPU and GIL time. Standard library only.

    python loopback_server.py [--close]

It listens on 127.0.0.1 (a free port), prints the port on stdout, and answers every request
`200` with an empty body at once; keep-alive unless `--close` (then it closes each connection
after its answer, so every request needs a new one). One thread serves every connection
through a selector.

Commands, one per line on stdin:

- `expect N`: forget what arrived so far and print `expecting N` (so that the sender knows
  no request it sends from then on is counted against an earlier expectation); once N more
  requests arrived, print
  `arrived <count> <distinct paths> <first arrival> <last arrival>` (arrivals are
  `time.perf_counter()` values: CLOCK_MONOTONIC on Linux, the same clock in every process).
- `count`: print `count <requests since the last expect> <last arrival>` at once (a sender
  that must not outrun its receiver reads its progress so).

End of stdin stops the server.
"""

from __future__ import annotations

import selectors
import socket
import sys
import threading
import time

OK_KEEP_ALIVE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
OK_CLOSE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class Arrivals:
    """What arrived since the last `expect`, and when to say so."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.expected = 0
        self.paths: set[bytes] = set()
        self.count = 0
        self.first = 0.0
        self.last = 0.0

    def expect(self, count: int) -> None:
        with self.lock:
            self.expected, self.count = count, 0
            self.paths.clear()

    def arrived(self, path: bytes, at: float) -> None:
        with self.lock:
            if self.count == 0:
                self.first = at
            self.count += 1
            self.last = at
            self.paths.add(path)
            if self.expected and self.count == self.expected:
                print(
                    f"arrived {self.count} {len(self.paths)} {self.first!r} {self.last!r}",
                    flush=True,
                )


class Connection:
    """One client connection's unparsed bytes and the arrival time of its next request."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.arrived_at = 0.0


def serve(close_connections: bool, arrivals: Arrivals) -> None:
    listener = socket.create_server(("127.0.0.1", 0), backlog=256)
    listener.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    print(listener.getsockname()[1], flush=True)
    answer = OK_CLOSE if close_connections else OK_KEEP_ALIVE
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                client, _ = listener.accept()
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                selector.register(client, selectors.EVENT_READ, Connection(client))
                continue
            connection: Connection = key.data
            try:
                chunk = connection.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                selector.unregister(connection.sock)
                connection.sock.close()
                continue
            if not connection.buffer:
                connection.arrived_at = time.perf_counter()
            connection.buffer += chunk
            if not answer_complete_requests(connection, answer, arrivals, close_connections):
                selector.unregister(connection.sock)
                connection.sock.close()


def answer_complete_requests(
    connection: Connection, answer: bytes, arrivals: Arrivals, close_connections: bool
) -> bool:
    """Answer every whole request in the buffer; False when the connection should close (an
    error, or a request answered when each connection serves one)."""
    while b"\r\n\r\n" in connection.buffer:
        head, _, rest = connection.buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(rest) < length:
            return True  # the body is still on its way
        connection.buffer = rest[length:]
        arrivals.arrived(lines[0].split(b" ")[1], connection.arrived_at)
        try:
            connection.sock.sendall(answer)
        except OSError:
            return False
        if close_connections:
            return False
        connection.arrived_at = time.perf_counter()  # a pipelined request already here
    return True


def read_commands(arrivals: Arrivals) -> None:
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "expect":
            arrivals.expect(int(argument))
            print(f"expecting {int(argument)}", flush=True)
        elif command == "count":
            with arrivals.lock:
                count, last = arrivals.count, arrivals.last
            print(f"count {count} {last!r}", flush=True)


def main() -> None:
    arrivals = Arrivals()
    server = threading.Thread(target=serve, args=("--close" in sys.argv[1:], arrivals), daemon=True)
    server.start()
    read_commands(arrivals)  # returns at end of stdin: the daemon server thread ends with us


if __name__ == "__main__":
    main()
