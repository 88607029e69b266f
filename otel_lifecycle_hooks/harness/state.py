"""The activity state file, for the `hook` command when no supervisor is running.

Each `hook` invocation is a new process, so the tracker's state lives in a small JSON file:
`$LIFECYCLE_HOOKS_STATE`, or `$HOME/.local/state/otel-lifecycle-hooks/activity.json`.
Harnesses run hooks concurrently (Codex launches matching hooks at once), so a read-modify-write
holds an exclusive lock on `<file>.lock`; writes go to a temporary file renamed over the old one,
so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

STATE_ENV = "OTEL_LIFECYCLE_HOOKS_STATE"
STATE_VERSION = 1


def state_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the state file is, from the environment."""
    env = os.environ if environ is None else environ
    explicit = env.get(STATE_ENV.removeprefix("OTEL_")) or env.get(STATE_ENV)
    if explicit:
        return Path(explicit)
    home = Path(env.get("HOME") or Path.home())
    return home / ".local" / "state" / "otel-lifecycle-hooks" / "activity.json"


def load_state(path: Path) -> dict[str, object]:
    """The saved state, or {} when there is none or it cannot be read."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(value, dict) or value.get("v") != STATE_VERSION:
        return {}
    return value


def save_state(path: Path, state: Mapping[str, object]) -> None:
    """Write `state` atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=".activity-", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            json.dump({**state, "v": STATE_VERSION}, out)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the state file's lock: one read-modify-write at a time across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
