"""A real PostgreSQL 15 server for the tests (Debian's `postgresql` package).

A fresh data directory in a temporary folder (owned by the `postgres` system user when the
tests run as root: the server refuses to run as root), trust authentication, a loopback port,
its socket in the same folder. Started with `start()`, ready once `pg_isready` answers, stopped
by its process id with `stop()` (and started again on the same data, to test an outage).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

BIN = Path("/usr/lib/postgresql/15/bin")
INSTALLER = Path(__file__).with_name("install_debian_package.sh")
SYSTEM_USER = "postgres"


def ensure_installed() -> None:
    """Run the installer (a no-op when the server's binaries are there)."""
    server = str(BIN / "postgres")
    subprocess.run(["sh", str(INSTALLER), "postgresql", server], check=True, timeout=900)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One server process on 127.0.0.1:`port`, its data in `root`."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="olh-postgres-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._as_user: dict[str, Any] = {}
        if os.geteuid() == 0:
            import pwd

            entry = pwd.getpwnam(SYSTEM_USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self._as_user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        os.chmod(self.root, 0o700)
        self.log = self.root / "server.log"
        subprocess.run(
            [str(BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
             "--no-sync", "-E", "UTF8"],
            check=True, capture_output=True, timeout=120, cwd=self.root, **self._as_user,
        )  # fmt: skip

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        log = open(self.log, "ab")  # noqa: SIM115 - the server's stderr, closed with it
        self.process = subprocess.Popen(
            [str(BIN / "postgres"), "-D", str(self.data), "-k", str(self.root),
             "-c", "listen_addresses=127.0.0.1", "-p", str(self.port),
             "-c", "fsync=off", "-c", "max_connections=300"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.root, **self._as_user,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready = subprocess.run(
                [str(BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                check=False,
                timeout=10,
            )
            if ready.returncode == 0:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"PostgreSQL did not start: {self.log.read_text(errors='replace')}")

    def stop(self) -> None:
        """Fast shutdown (SIGINT) of the server by its pid; SIGKILL if it lingers."""
        if self.process is None:
            return
        interrupt_and_reap(self.process)
        self.process = None

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def interrupt_and_reap(process: subprocess.Popen[bytes]) -> None:
    """Stop a server by its pid: SIGINT (a fast shutdown for PostgreSQL and PgBouncer alike),
    SIGKILL if it lingers, and reap it."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=120)
