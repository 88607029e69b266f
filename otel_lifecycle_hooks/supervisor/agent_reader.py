"""Reading a file the agent names, with the agent's rights: the supervisor (often root) never
opens an agent-chosen path with its own.

`tail_reader(identity)` gives the reader the claude dialect calls for a transcript's tail. When
the agent runs as this process's user it is the dialect's own `read_tail`. Otherwise each read
is a short child process (`python -I -S`, no environment, working directory `/`) that drops to
the agent's uid and gid with no supplementary groups (the agent's own identity, as `run`
starts it) before it looks at the path: the kernel, not a check of ours, decides what it may
open. It drops after the interpreter started, not before, because the supervisor's
interpreter need not be one the agent's user may execute; nothing of the agent's is read
until then, and a process that changed its uid cannot be traced by the agent. It opens the path
without blocking, reads only a regular file, and never more than the tail. What it writes back
is treated as the agent's text (it runs as the agent, who could tamper with it): read up to the
bound and no further, within `READ_DEADLINE`.

Cost: one interpreter start per transcript read (measured 17-30 ms on a busy machine); only a
Stop (or SubagentStop, StopFailure) without `last_assistant_message` reads a transcript, and one
at a time (the HTTP route's single delivery thread).
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..harness.dialects.claude import read_tail

# A hang guard: the file may sit on a stalled network or FUSE mount.
READ_DEADLINE = 5.0  # seconds

# The child: argv the uid, the gid, the path and the bound. It becomes the agent, then writes
# "1" or "0" (whether the start was cut) and the tail; it exits 1 when the path is not a
# regular file the agent may read, 2 when it could not become the agent.
_CHILD = r"""
import os, stat, sys
uid, gid = int(sys.argv[1]), int(sys.argv[2])
try:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
except OSError:
    sys.exit(2)
if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
    sys.exit(2)
try:
    fd = os.open(sys.argv[3], os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        sys.exit(1)
    limit = int(sys.argv[4])
    start = max(0, os.lseek(fd, 0, os.SEEK_END) - limit)
    os.lseek(fd, start, os.SEEK_SET)
    out = sys.stdout.buffer
    out.write(b"1" if start else b"0")
    while limit > 0:
        chunk = os.read(fd, min(limit, 65536))
        if not chunk:
            break
        out.write(chunk)
        limit -= len(chunk)
    out.flush()
except OSError:
    sys.exit(1)
"""

TailReader = Callable[[str, int], tuple[bytes, bool] | None]


@dataclass(frozen=True)
class AgentIdentity:
    """Who the agent runs as: its uid and primary gid (no supplementary groups)."""

    uid: int
    gid: int


def tail_reader(identity: AgentIdentity | None) -> TailReader:
    """The transcript reader for an agent running as `identity` (None: as this process)."""
    if identity is None or identity.uid == os.geteuid():
        return read_tail
    if os.geteuid() != 0:
        # Only root can become another user; the agent's files are then not ours to read.
        return _unreadable
    return AsAgentTailReader(identity)


@dataclass(frozen=True)
class AsAgentTailReader:
    """Reads a file's tail in a child process that runs as the agent (see the module)."""

    identity: AgentIdentity
    deadline: float = READ_DEADLINE

    def __call__(self, path: str, tail_bytes: int) -> tuple[bytes, bool] | None:
        """The last `tail_bytes` of `path` as the agent can read it, and whether the start
        was cut; None when the agent may not read it, it is not a regular file, or the child
        failed or overran its deadline."""
        if "\0" in path or tail_bytes < 0:
            return None
        try:
            child = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    _CHILD,
                    str(self.identity.uid),
                    str(self.identity.gid),
                    path,
                    str(tail_bytes),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={},
                cwd="/",
            )
        except OSError:
            return None
        deadline = time.monotonic() + self.deadline
        try:
            output = _read_bounded(child, tail_bytes + 1, deadline)
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return None
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            assert child.stdout is not None
            child.stdout.close()
        if child.returncode != 0 or output[:1] not in (b"0", b"1"):
            return None
        return output[1:], output[:1] == b"1"


def _read_bounded(child: subprocess.Popen[bytes], limit: int, deadline: float) -> bytes:
    """At most `limit` bytes of the child's stdout, until its end or `deadline`."""
    assert child.stdout is not None
    descriptor = child.stdout.fileno()
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        selector.register(descriptor, selectors.EVENT_READ)
        while size < limit:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                return b""  # overran: nothing read counts
            chunk = os.read(descriptor, min(limit - size, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


def _unreadable(path: str, tail_bytes: int) -> None:
    return None
