"""What `harness install` changed, kept so that `harness uninstall` gives it back exactly.

For every file an install writes, a record keeps the file's text before the first install
(None: there was no file), the text install wrote, and the folders it had to create. At
uninstall, a file still holding exactly what install wrote gets its old text back byte for
byte (or is removed, with the folders install created, when it did not exist); a file the user
changed since is edited structurally instead (harness/install.py). Records live in the
installing user's own state folder, readable by that user alone (a settings file may hold
credentials), one JSON file per configuration file, named by a hash of its path.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

RECORDS = Path(".local") / "state" / "otel-lifecycle-hooks" / "installed"


@dataclass(frozen=True)
class InstalledFile:
    """One configuration file as an install left it."""

    path: str
    before: str | None  # the text before the first install; None: no file
    after: str  # the text install wrote
    created: tuple[str, ...]  # folders install made for it, outermost first


def record_path(home: Path, path: Path) -> Path:
    name = hashlib.sha256(str(path.absolute()).encode("utf-8")).hexdigest()[:32]
    return home / RECORDS / f"{name}.json"


def missing_folders(path: Path) -> list[Path]:
    """The folders above `path` that do not exist yet, outermost first."""
    missing: list[Path] = []
    folder = path.absolute().parent
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    return missing[::-1]


def read(home: Path, path: Path) -> InstalledFile | None:
    """The record of `path`, None when there is none (or it cannot be read as one)."""
    try:
        value = json.loads(record_path(home, path).read_text(encoding="utf-8"))
        return InstalledFile(
            path=str(value["path"]),
            before=value["before"] if isinstance(value["before"], str) else None,
            after=str(value["after"]),
            created=tuple(str(folder) for folder in value["created"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write(home: Path, record: InstalledFile) -> None:
    """Keep `record` (mode 0600). The folders made for the records are noted in the record
    itself, so that the last uninstall removes them too."""
    target = record_path(home, Path(record.path))
    made = [str(folder) for folder in missing_folders(target)]
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    value = {
        "path": record.path,
        "before": record.before,
        "after": record.after,
        "created": [*record.created, *made],
    }
    descriptor = os.open(
        target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(value, handle)


def forget(home: Path, records: list[InstalledFile]) -> None:
    """Remove `records`, then every folder they note that is empty now, innermost first
    (after all of them: two files of one install may share a folder it made)."""
    for record in records:
        with contextlib.suppress(FileNotFoundError):
            record_path(home, Path(record.path)).unlink()
    folders = {folder for record in records for folder in record.created}
    for folder in sorted(folders, key=len, reverse=True):
        with contextlib.suppress(OSError):  # not empty (anything of the user's), or gone
            os.rmdir(folder)
