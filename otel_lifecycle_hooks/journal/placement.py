"""Whether the agent's user can replace a SQLite journal: the supervisor's check of where it lives.

A journal file the supervisor (root) creates is private (0600), but in a directory the agent's
user can write, the agent moves it aside and puts a file of its own in its place (or plants one
before the first run): every row of it is then the agent's. The check follows the journal's path
up to `/`: its own directory counts if the user may write it at all (sticky or not: it could
create the journal or its `-wal` file first); a directory above it counts if the user owns it
or may write it without the sticky bit (then it may rename what is below). Pure of side effects:
it only reads the file system's metadata.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def _may_write(info: os.stat_result, uid: int, gid: int) -> bool:
    if info.st_uid == uid:
        return True  # its owner may chmod it writable whatever its mode
    if info.st_gid == gid and info.st_mode & stat.S_IWGRP:
        return True
    return bool(info.st_mode & stat.S_IWOTH)


def replaceable_by(journal: Path, uid: int, gid: int) -> Path | None:
    """The first path (the journal file, its directory, or one above) through which the user
    `uid`/`gid` can replace the journal at `journal`; None when there is none."""
    path = Path(os.path.abspath(journal))
    try:
        if path.lstat().st_uid == uid:
            return path
    except OSError:
        pass  # not created yet: its directory decides
    parent = path.parent
    try:
        if _may_write(parent.stat(), uid, gid):
            return parent
    except OSError:
        return None
    for directory in parent.parents:
        try:
            info = directory.stat()
        except OSError:
            return None
        if info.st_uid == uid or (_may_write(info, uid, gid) and not info.st_mode & stat.S_ISVTX):
            return directory
    return None
