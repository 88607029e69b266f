"""Run a command on a pseudo-terminal and read what it writes there, as a user's screen shows
it: for what a command does only on a terminal (colour, its width, holding lines while an
interactive agent owns the screen)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_on_a_terminal(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: Path | None = None,
    columns: int | None = None,
    stdin: bool = False,
    stderr: bool = True,
    new_session: bool = False,
    timeout: float = 60.0,
) -> tuple[int, str]:
    """`argv`'s exit code and its screen: its stdout (and stderr, and stdin if asked) on one
    terminal of `columns` columns (the pty's default size when None), read until it exits;
    "\\r\\n" reads as "\\n"."""
    controller, terminal = pty.openpty()
    if columns is not None:
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    try:
        process = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=terminal if stdin else subprocess.DEVNULL,
            stdout=terminal,
            stderr=terminal if stderr else subprocess.DEVNULL,
            start_new_session=new_session,
        )
        os.close(terminal)
        terminal = -1
        output = b""
        while True:
            ready, _, _ = select.select([controller], [], [], timeout)
            if not ready:
                process.kill()
                process.wait(timeout=120)
                raise AssertionError(f"no output and no exit; so far {output!r}")
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            output += chunk
        code = process.wait(timeout=120)
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    return code, output.decode(errors="replace").replace("\r\n", "\n")
