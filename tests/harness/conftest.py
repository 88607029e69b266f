"""Shared helpers for the harness tests: payload fixtures and a real Unix socket server."""

from __future__ import annotations

import json
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PAYLOADS = Path(__file__).parent / "payloads"


def payload(dialect: str, name: str) -> dict[str, Any]:
    """A documented payload sample from tests/harness/payloads/<dialect>/<name>.json."""
    return json.loads((PAYLOADS / dialect / f"{name}.json").read_text(encoding="utf-8"))


class LineServer:
    """A Unix stream socket server that records every connection's lines, as the supervisor."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.connections: list[list[bytes]] = []
        self._received = threading.Condition()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            with connection:
                data = b""
                while chunk := connection.recv(65536):
                    data += chunk
            with self._received:
                self.connections.append(data.splitlines(keepends=True))
                self._received.notify_all()

    def wait_for(self, count: int, timeout: float = 60.0) -> list[list[bytes]]:
        """The recorded connections once `count` have arrived (or the timeout passed)."""
        with self._received:
            self._received.wait_for(lambda: len(self.connections) >= count, timeout)
            return list(self.connections)

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def load_payload() -> Any:
    """The `payload(dialect, name)` loader, for tests."""
    return payload


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # A short directory of its own: a Unix socket path must stay under ~100 bytes.
    with tempfile.TemporaryDirectory(prefix="olh-") as directory:
        yield Path(directory)


@pytest.fixture
def line_server(socket_dir: Path) -> Iterator[LineServer]:
    server = LineServer(str(socket_dir / "events.sock"))
    yield server
    server.close()
