"""Which supervisors run, in which phase and activity: what `status` (with no signal) shows.

Each `run` keeps one small JSON file, `<state>/otel-lifecycle-hooks/running/<pid>.json`
(`$XDG_STATE_HOME`, default `~/.local/state`), written with the first phase change its
session records: provisioning when hooks or legacy scripts run before the agent's start, else
the agent's start itself (supervisor/phases.py), rewritten (atomically) when its phase or activity
changes and removed when it ends. A file whose process is gone (a killed supervisor) is
ignored and removed by the next reader.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine.observers import ExecutionWatcher
from ..private_files import is_trusted_directory, open_directory_path, replace_file
from ..terminal import escape_control

if TYPE_CHECKING:
    from ..engine.model import LifecycleEvent


def running_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    state_home = env.get("XDG_STATE_HOME") or str(
        Path(env.get("HOME") or Path.home()) / ".local" / "state"
    )
    return Path(state_home) / "otel-lifecycle-hooks" / "running"


# Lasts only while the agent is spawned, which would wait for its rewrite: ext4 makes a rename
# over an existing file wait for the new file's data (about 0.1 to 0.8 ms here).
_UNWRITTEN_PHASES = ("starting",)


class RunningFile(ExecutionWatcher):
    """This supervisor's entry: its agent, and the phase and activity of the latest event."""

    def __init__(self, metadata: Mapping[str, str], environ: Mapping[str, str] | None = None):
        self.path = running_dir(environ) / f"{os.getpid()}.json"
        self.state: dict[str, Any] = {
            "pid": os.getpid(),
            "agent_name": metadata.get("AGENT_NAME", ""),
            "agent_id": metadata.get("AGENT_ID", ""),
            "started_at": time.time(),
            "phase": "created",
            "activity": "idle",
        }
        # Not written yet: `created` is left at once, for provisioning.

    def event_recorded(self, event: LifecycleEvent) -> None:
        phase = event.fields.get("PHASE") or self.state["phase"]
        activity = event.fields.get("ACTIVITY") or self.state["activity"]
        if (phase, activity) != (self.state["phase"], self.state["activity"]):
            self.state.update(phase=phase, activity=activity)
            if phase not in _UNWRITTEN_PHASES:
                self._write()

    def remove(self) -> None:
        try:
            directory = open_directory_path(self.path.parent)
        except OSError:
            return
        try:
            os.unlink(self.path.name, dir_fd=directory)
        except OSError:
            pass
        finally:
            os.close(directory)

    def _write(self) -> None:
        # The directory may be under a home another user can write (a root supervisor whose
        # HOME is its agent's): reached link by link, and used only when no one else can
        # change it; the file is made under a random name, exclusively, never through a link.
        try:
            directory = open_directory_path(self.path.parent, make=True)
        except OSError:  # status is a convenience: a read-only home must not stop a run
            return
        try:
            if is_trusted_directory(directory):
                data = json.dumps(self.state).encode("utf-8")
                replace_file(directory, self.path.name, data, 0o600)
        except OSError:
            pass
        finally:
            os.close(directory)


def running_supervisors(environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The entries of supervisors whose process still runs, oldest first."""
    entries = []
    directory = running_dir(environ)
    try:
        paths = sorted(directory.glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            pid = int(entry["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not _alive(pid):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        entries.append(entry)
    return sorted(entries, key=lambda entry: float(entry.get("started_at") or 0))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    return True


def describe_running(environ: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(exit code, text) for `status` without a signal: 0 when a supervisor runs, else 1."""
    entries = running_supervisors(environ)
    if not entries:
        return 1, f"no supervisor is running (none registered in {running_dir(environ)})"
    lines = []
    for entry in entries:
        started = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(float(entry["started_at"])))
        lines.append(
            f"supervisor pid {entry['pid']}: agent {escape_control(entry.get('agent_name', ''))}"
            f", phase {escape_control(entry.get('phase', '?'))}"
            f", activity {escape_control(entry.get('activity', '?'))}, since {started}"
        )
    return 0, "\n".join(lines)
