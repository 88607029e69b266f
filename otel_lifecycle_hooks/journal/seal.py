"""Session rows a recoverer can vouch for: an HMAC under a key the agent never gets.

The journal is written beside the agent: a SQLite file in a directory the agent can write, or a
shared PostgreSQL database. A row the agent forged or edited must not decide what recovery
sends. Every supervisor that holds the journal key (`$LIFECYCLE_HOOKS_JOURNAL_KEY`, or the file
`$LIFECYCLE_HOOKS_JOURNAL_KEY_FILE` names) seals each session row it writes: an HMAC-SHA256 over
what recovery acts on. The key never reaches the agent (supervisor/run.py takes it out of the
agent's environment), so the agent cannot seal a row of its own.

What a seal covers: the session id, agent id and name, the template files and their sha256, the
agent metadata and journaled variables, where its pids mean something (host, pid), when it
started, and the moments of post-start, pre-stop and session-end (the owed events'
`${TIMESTAMP}`, their X-Scion-Hook-ID). It does not cover what changes without the key's holder
being there to re-seal: the heartbeat, the agent's pid and the claim, nor the end and recovered
marks. So the agent can still (a) replay an older sealed state of a row (un-ending a genuine
session of its own), which re-sends that session's owed hooks with the ids they had, from the
operator's template and metadata; (b) make a row look alive or dead. Where the journal is
shared, only a database credential the agent does not have stops (b) for another agent's rows.

Pure functions: no I/O besides reading the key file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import LifecycleHooksError
from ..variables import JOURNAL_KEY_ENV as KEY_ENV
from ..variables import JOURNAL_KEY_FILE_ENV as KEY_FILE_ENV
from .rows import SessionRow

# A key shorter than this is refused: it could be guessed from the rows it sealed.
MIN_KEY_BYTES = 16
_SEAL_VERSION = "v1"


class JournalKeyError(ValueError, LifecycleHooksError):
    """The journal key's setting names something unusable (too short, unreadable, shared)."""


def journal_key(environ: Mapping[str, str]) -> bytes | None:
    """The journal key from `$LIFECYCLE_HOOKS_JOURNAL_KEY`, else from the file
    `$LIFECYCLE_HOOKS_JOURNAL_KEY_FILE` names; None when neither is set. A key file must be
    this process's user's own and readable by its owner only (the agent must not read it)."""
    text = environ.get(KEY_ENV, "")
    if text:
        key = text.strip().encode()
        where = f"${KEY_ENV}"
    elif environ.get(KEY_FILE_ENV):
        path = Path(environ[KEY_FILE_ENV])
        where = f"${KEY_FILE_ENV} ({path})"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise JournalKeyError(f"{where}: cannot open it: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
                raise JournalKeyError(
                    f"{where}: a key file must be a regular file readable by its owner only "
                    f"(mode 0600 or 0400), not {stat.filemode(info.st_mode)}"
                )
            if info.st_uid != os.geteuid():
                # Its owner may read the key, or write one of its own: an agent's user would
                # then seal rows of its choosing.
                raise JournalKeyError(
                    f"{where}: a key file must be this process's user's own (uid "
                    f"{os.geteuid()}), not uid {info.st_uid}'s"
                )
            key = handle.read().strip()
    else:
        return None
    if len(key) < MIN_KEY_BYTES:
        raise JournalKeyError(f"{where}: a journal key must be at least {MIN_KEY_BYTES} bytes")
    return key


def sealed_fields(row: SessionRow) -> dict[str, Any]:
    """What a seal covers, as plain JSON values (the same before and after a database)."""
    return {
        "session_id": row.session_id,
        "agent_id": row.agent_id,
        "agent_name": row.agent_name,
        "template_files": list(row.template_files),
        "templates": [
            [str(entry.get("path", "")), str(entry.get("sha256", ""))] for entry in row.templates
        ],
        "metadata": dict(row.metadata),
        "variables": dict(row.variables),
        "host": row.host,
        "pid": row.pid,
        "started_at": row.started_at,
        "post_start_at": row.post_start_at,
        "pre_stop_at": row.pre_stop_at,
        "session_end_at": row.session_end_at,
    }


def seal(key: bytes, row: SessionRow) -> str:
    """The seal of `row` under `key`."""
    text = json.dumps(sealed_fields(row), sort_keys=True, ensure_ascii=True, allow_nan=False)
    digest = hmac.new(key, text.encode("ascii"), hashlib.sha256).hexdigest()
    return f"{_SEAL_VERSION}:{digest}"


def unvouched(key: bytes | None, row: SessionRow) -> str:
    """Why `row` cannot be vouched for under `key` ("" when its seal is right)."""
    if key is None:
        return (
            f"no journal key is set here, so no row can be vouched for: set {KEY_ENV} (or "
            f"{KEY_FILE_ENV}) to the key the supervisors seal their session rows with"
        )
    if not row.seal:
        return (
            "its row is not sealed (written without the journal key, or not by a supervisor): "
            f"only rows sealed under {KEY_ENV} are recovered"
        )
    if not hmac.compare_digest(row.seal, seal(key, row)):
        return (
            f"its row's seal does not match it under this {KEY_ENV} (edited since a supervisor "
            "wrote it, or sealed with another key)"
        )
    return ""
