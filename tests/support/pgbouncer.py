"""A real PgBouncer (Debian's `pgbouncer` package) in transaction mode in front of the tests'
PostgreSQL server (tests/support/postgres.py), as a large fleet would run it.

Its configuration and log in a temporary folder, trust authentication, a loopback port, run as
the `postgres` system user when the tests run as root (PgBouncer refuses to run as root).
Started with `start()`, ready once it accepts a query, stopped by its process id.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.postgres import (
    INSTALLER,
    SYSTEM_USER,
    PostgresServer,
    _free_port,
    interrupt_and_reap,
)

BINARY = Path("/usr/sbin/pgbouncer")


def ensure_installed() -> None:
    """Run the installer (a no-op when PgBouncer's binary is there)."""
    subprocess.run(["sh", str(INSTALLER), "pgbouncer", str(BINARY)], check=True, timeout=900)


class PgBouncer:
    """PgBouncer on 127.0.0.1:`port`, pooling `pool_size` server connections per database
    and user of `server`, in transaction mode."""

    def __init__(self, server: PostgresServer, pool_size: int) -> None:
        self.server = server
        self.pool_size = pool_size
        self.root = Path(tempfile.mkdtemp(prefix="olh-pgbouncer-"))
        self.port = _free_port()
        self.log = self.root / "pgbouncer.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._as_user: dict[str, Any] = {}
        (self.root / "users.txt").write_text(f'"{SYSTEM_USER}" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={server.port} user={SYSTEM_USER}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.root / 'users.txt'}\n"
            f"pool_mode = transaction\ndefault_pool_size = {pool_size}\n"
            "min_pool_size = 0\nreserve_pool_size = 0\nmax_client_conn = 2000\n"
            f"logfile = {self.log}\n"
        )
        if os.geteuid() == 0:
            import pwd

            entry = pwd.getpwnam(SYSTEM_USER)
            for path in (self.root, *self.root.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            self._as_user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def url(self, database: str) -> str:
        return f"postgresql://{SYSTEM_USER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        import psycopg

        self.process = subprocess.Popen(
            [str(BINARY), str(self.root / "pgbouncer.ini")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd=self.root, **self._as_user,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.url("postgres"), prepare_threshold=None) as db:
                    db.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.1)
        log = self.log.read_text(errors="replace") if self.log.exists() else ""
        raise RuntimeError(f"PgBouncer did not start: {log}")

    def stop(self) -> None:
        if self.process is None:
            return
        interrupt_and_reap(self.process)
        self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
