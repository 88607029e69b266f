"""Process confinement by cgroup v2: a group of its own for the agent and for each script
execution, so that ending the group ends every process in it, wherever it went (`setsid`, a
double fork, an empty environment: none of them leaves a cgroup).

Where it applies: this process is root, a cgroup v2 hierarchy is mounted (found in
/proc/self/mountinfo, never assumed) and writable, and `CGROUP_ENV` does not say "off".
Elsewhere `home()` returns None and the callers keep what they did before (process groups,
the supervisor's /proc scan): a process that leaves the agent's session and environment can
then outlive it.

Layout, under the parent (default: `otel-lifecycle-hooks` under this process's own cgroup):

    <parent>/run-<pid>-<start>-<n>/          one per supervisor (n counts them in a process,
                                             0 is the process's own, for script executions)
    <parent>/run-<pid>-<start>-<n>/agent     the agent and all it starts
    <parent>/run-<pid>-<start>-<n>/script-N  one script execution

The process holds an exclusive `flock` on its `run-*` directory for as long as it lives; the
directory is root's and mode 0700, so the confined processes can neither open it to take the
lock nor write any of its files. A process killed outright cannot end its groups: the next
process that confines (the next `run`) and `reconcile` call `sweep_orphans()`, which kills
and removes every `run-*` group under the parent whose lock is free and whose process is gone.
Nothing read from a journal row or from a file the agent can write names a group to kill:
only names of the form this module creates, found under its own parent.

A process is put into its group before it runs any code of its own: it is started through a
root stage (`/bin/sh`) that writes "0" (itself) into the group's `cgroup.procs` and then
execs the rest, which drops to the agent's user (setpriv) where one is named. A confined
process cannot move itself out: that needs write access to the `cgroup.procs` of a group
above it, which are root's.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import itertools
import logging
import os
import re
import shlex
import signal
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger("otel_lifecycle_hooks.confinement")

# "off" (or "0", "false", "no") turns confinement off; a cgroup path (as /proc/self/cgroup
# writes it, from the hierarchy's root, e.g. "/agents") names the parent instead of the default.
CGROUP_ENV = "LIFECYCLE_HOOKS_CGROUP"
DEFAULT_PARENT_NAME = "otel-lifecycle-hooks"
_OFF = frozenset({"off", "0", "false", "no"})
_RUN_NAME = re.compile(r"run-([1-9][0-9]{0,9})-([0-9]{1,20})-([0-9]{1,9})")
_LEAF_NAME = re.compile(r"agent|script-[0-9]{1,20}")
# Path components of a configured parent: plain names only (no "..", no hidden tricks).
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@:+-]{0,127}")

# util-linux's setpriv, at the system's own paths only: never looked up on a PATH that a
# directory the agent can write may be part of.
SETPRIV_PATHS = ("/usr/bin/setpriv", "/bin/setpriv")
SHELL = "/bin/sh"
# The root stage: into the group ("0" is the writer itself), then the rest of the argv. A
# process that cannot join does not run.
_JOIN = 'echo 0 >"$1" || exit 126; shift; exec "$@"'
# How long a removal waits for killed processes to leave their group.
_EMPTY_WAIT = 2.0


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class Hierarchy(NamedTuple):
    """Where the cgroup v2 hierarchy is mounted, and this process's cgroup in it."""

    mount: Path  # the mount point
    root: str  # the cgroup path the mount shows at its mount point ("/" for a whole one)
    own: str  # this process's cgroup path ("0::" in /proc/self/cgroup)

    def directory(self, cgroup_path: str) -> Path | None:
        """The directory of `cgroup_path` under the mount; None when the mount does not show it."""
        root = self.root.rstrip("/")
        if cgroup_path != root and not cgroup_path.startswith(root + "/"):
            return None
        relative = cgroup_path[len(root) :].strip("/")
        return self.mount / relative if relative else self.mount


def _unescape(field: str) -> str:
    """A mountinfo field with its octal escapes (space, tab, newline, backslash) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def find_hierarchy(
    mountinfo: str = "/proc/self/mountinfo", cgroup_file: str = "/proc/self/cgroup"
) -> Hierarchy | None:
    """The cgroup v2 mount that shows this process's own cgroup; None without one."""
    try:
        with open(cgroup_file) as handle:
            own = next((line[3:].rstrip("\n") for line in handle if line.startswith("0::")), None)
        with open(mountinfo) as handle:
            lines = handle.readlines()
    except OSError:
        return None
    if own is None or not own.startswith("/") or own.endswith(" (deleted)"):
        return None
    for line in lines:
        before, separator, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not separator or len(fields) < 5 or not tail or tail[0] != "cgroup2":
            continue
        hierarchy = Hierarchy(Path(_unescape(fields[4])), _unescape(fields[3]), own)
        if hierarchy.directory(own) is not None:
            return hierarchy
    return None


def _parent_path(hierarchy: Hierarchy, environ: Mapping[str, str]) -> str | None:
    """The cgroup path of the parent of every `run-*` group; None when turned off or invalid."""
    configured = environ.get(CGROUP_ENV, "").strip()
    if configured.lower() in _OFF:
        return None
    if not configured:
        return hierarchy.own.rstrip("/") + "/" + DEFAULT_PARENT_NAME
    parts = configured.strip("/").split("/")
    if not configured.startswith("/") or not all(_COMPONENT.fullmatch(p) for p in parts):
        log.warning(
            "%s=%r is not a cgroup path such as /agents (names of letters, digits and _.@:+-):"
            " processes are not confined",
            CGROUP_ENV,
            configured,
        )
        return None
    return "/" + "/".join(parts)


def _process_start(pid: int) -> int | None:
    """The start time of `pid` (clock ticks since boot), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            line = stat.read().decode("ascii", "replace")
        return int(line[line.rfind(")") + 2 :].split()[19])
    except (OSError, IndexError, ValueError):
        return None


class Cgroup:
    """One leaf group: the agent's or a script execution's."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def join_argv(self, argv: Sequence[str]) -> list[str]:
        """`argv` started so that it joins this group before it runs (run it as root)."""
        return [SHELL, "-c", _JOIN, "join", str(self.path / "cgroup.procs"), *argv]

    def pids(self) -> list[int]:
        """The processes in the group now (the group gone: none)."""
        return _pids(self.path)

    def signal(self, signum: int, skip: Collection[int] = ()) -> list[int]:
        """Send `signum` to every process of the group but those of `skip` (signalled once
        already: a second TERM may mean "now" to a program); the pids signalled."""
        sent = []
        for pid in self.pids():
            if pid in skip:
                continue
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                continue
            sent.append(pid)
        return sent

    def kill(self) -> None:
        """SIGKILL every process of the group, and of any group below it."""
        _kill(self.path)

    def remove(self, wait: float = _EMPTY_WAIT, kill: bool = True) -> bool:
        """Kill what is left (unless `kill` is False) and remove the group; False when it
        could not be removed (yet): it still holds processes."""
        return _remove(self.path, wait, kill)


def _pids(path: Path) -> list[int]:
    try:
        return [int(line) for line in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill(path: Path) -> None:
    """cgroup.kill (Linux 5.14 and later) ends the whole subtree at once; without it, the
    subtree is frozen (cgroup.freeze, 5.2 and later: no process forks while it is listed) and
    every process listed is killed until none is left, then thawed so the killed can exit."""
    try:
        with open(path / "cgroup.kill", "w") as handle:
            handle.write("1")
        return
    except FileNotFoundError:
        if not path.is_dir():
            return
    except OSError as exc:
        log.warning("could not kill the processes of cgroup %s: %s", path.name, exc.strerror)
        return
    _kill_each(path)


def _kill_each(path: Path) -> None:
    """What cgroup.kill does, for kernels without it: freeze, kill every listed, thaw."""
    frozen = _write(path / "cgroup.freeze", "1")
    try:
        for _ in range(100):
            pids = _subtree_pids(path)
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
    finally:
        if frozen:
            _write(path / "cgroup.freeze", "0")


def _write(path: Path, text: str) -> bool:
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError:
        return False
    return True


def _remove(path: Path, wait: float, kill: bool = True) -> bool:
    """Kill, then remove `path` and the leaves below it (names of this module's only)."""
    if kill:
        _kill(path)
    deadline = time.monotonic() + wait
    while True:
        try:
            for child in path.iterdir():
                if child.is_dir() and _LEAF_NAME.fullmatch(child.name):
                    _rmdir(child)
            _rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                log.debug("cgroup %s not removed: %s", path, exc.strerror)
                return False
        time.sleep(0.01)  # killed processes take a moment to leave the group


def _rmdir(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.rmdir()


class CgroupHome:
    """This process's `run-*` group: its agent's and its scripts' groups live below it."""

    def __init__(self, hierarchy: Hierarchy, parent: Path, path: Path, lock_fd: int) -> None:
        self.hierarchy = hierarchy
        self.parent = parent
        self.path = path
        self._lock_fd = lock_fd
        self._sequence = itertools.count(1)
        self._closed = False

    @classmethod
    def create(cls, environ: Mapping[str, str]) -> CgroupHome | None:
        """A new group of this process's, made now after the groups of dead processes under
        the same parent are swept; None where processes cannot be confined."""
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            return None
        hierarchy = find_hierarchy()
        if hierarchy is None:
            return None
        parent_path = _parent_path(hierarchy, environ)
        parent = hierarchy.directory(parent_path) if parent_path else None
        start = _process_start(os.getpid())
        if parent is None or start is None:
            return None
        path = parent / f"run-{os.getpid()}-{start}-{next(_homes_made)}"
        try:
            parent.mkdir(mode=0o755, exist_ok=True)
            path.mkdir(mode=0o700)
            # The mode asked of mkdir is masked by the umask: set it outright.
            os.chmod(path, 0o700)
            lock_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            log.debug("no cgroup for this process's children: %s", exc)
            return None
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock_fd)
            return None
        made = cls(hierarchy, parent, path, lock_fd)
        made.sweep_orphans()
        return made

    def leaf(self, name: str | None = None) -> Cgroup | None:
        """A new group below this one: `name` ("agent"), or the next `script-N`."""
        if self._closed:
            return None
        name = name or f"script-{next(self._sequence)}"
        path = self.path / name
        try:
            path.mkdir(mode=0o700)
            os.chmod(path, 0o700)
            # Only a domain group takes a process; under a threaded parent the join would
            # fail and the process would not start: it is then started unconfined instead.
            usable = (path / "cgroup.type").read_text().strip() == "domain"
        except OSError as exc:
            log.debug("could not make cgroup %s: %s", name, exc)
            return None
        if not usable:
            _rmdir(path)
            return None
        return Cgroup(path)

    def close(self) -> None:
        """Kill what is left below this group, remove it, and release its lock."""
        if self._closed:
            return
        self._closed = True
        if not _remove(self.path, _EMPTY_WAIT):
            log.warning("cgroup %s could not be removed: processes remain in it", self.path.name)
        os.close(self._lock_fd)

    def sweep_orphans(self) -> list[str]:
        """Kill and remove the `run-*` groups of processes that died without ending them."""
        return sweep_orphans(self.parent, self.hierarchy)


def sweep_orphans(parent: Path, hierarchy: Hierarchy) -> list[str]:
    """Kill and remove every `run-*` group under `parent` whose owner is gone: its lock is
    free and its pid no longer runs with the start time in its name. Never a group that holds
    this process's own cgroup. Returns the names of the groups removed."""
    removed: list[str] = []
    try:
        names = sorted(entry.name for entry in os.scandir(parent) if entry.is_dir())
    except OSError:
        return removed
    for name in names:
        match = _RUN_NAME.fullmatch(name)
        if match is None:
            continue
        pid, start = int(match.group(1)), int(match.group(2))
        if _process_start(pid) == start:
            continue  # its owner lives (in this pid namespace)
        path = parent / name
        own = hierarchy.directory(hierarchy.own)
        if own is not None and (own == path or path in own.parents):
            continue
        try:
            lock_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock_fd)
            continue  # held: its owner lives (another pid namespace)
        try:
            pids = _subtree_pids(path)
            if _remove(path, _EMPTY_WAIT):
                removed.append(name)
                if pids:
                    log.warning(
                        "killed %d process(es) left by a supervisor that died (cgroup %s)",
                        len(pids),
                        name,
                    )
        finally:
            os.close(lock_fd)
    return removed


def _subtree_pids(path: Path) -> list[int]:
    groups = [path]
    with contextlib.suppress(OSError):
        groups += [p for p in path.iterdir() if p.is_dir()]
    return [pid for group in groups for pid in _pids(group)]


def sweep_orphaned_groups(environ: Mapping[str, str] | None = None) -> list[str]:
    """`sweep_orphans` under the parent `environ` names (default: this process's), without
    making a group of this process's own: for `reconcile`. Root only; elsewhere nothing."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return []
    hierarchy = find_hierarchy()
    if hierarchy is None:
        return []
    parent_path = _parent_path(hierarchy, os.environ if environ is None else environ)
    parent = hierarchy.directory(parent_path) if parent_path else None
    return sweep_orphans(parent, hierarchy) if parent is not None else []


# The variables the root stages must not see travel to the stage after the drop in this one
# variable (not one the loader or a shell reads), as `export` lines, never in an argv, which
# every user may read in /proc (GIT_CONFIG_VALUE_0 may hold a credential).
AFTER_DROP_ENV = "LIFECYCLE_HOOKS_AFTER_DROP"
_AFTER_DROP = f'eval "${AFTER_DROP_ENV}"; unset {AFTER_DROP_ENV}; exec "$@"'
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def after_drop(
    argv: Sequence[str], assignments: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """`argv` for the part of a command that runs after the drop to the agent's user, with
    `assignments` put into its environment there, and the variable that carries them to it.

    The root stages before it (the cgroup join, setpriv) must never see a variable that makes
    the loader or a shell load code (LD_PRELOAD naming the agent's library would run it as
    root), yet an agent's own hook may set one for itself: `/bin/sh`, as the agent, exports
    them and execs `argv`. A name that is not a shell identifier (`BASH_FUNC_x%%`) cannot be
    exported by it and is left out, with a warning."""
    if not assignments:
        return list(argv), {}
    lines = []
    for name, value in assignments.items():
        if _IDENTIFIER.fullmatch(name):
            lines.append(f"export {name}={shlex.quote(value)}")
        else:
            log.warning("%s is not passed to the agent's process (not a shell name)", name)
    return [SHELL, "-c", _AFTER_DROP, "sh", *argv], {AFTER_DROP_ENV: "\n".join(lines)}


def find_setpriv() -> str | None:
    """The system's setpriv, to drop to another user after joining a group; None without."""
    return next((p for p in SETPRIV_PATHS if os.access(p, os.X_OK)), None)


_homes_made = itertools.count(0)
_home_lock = threading.Lock()
_home: list[CgroupHome | None] = []
_close_registered: list[bool] = []


def home(environ: Mapping[str, str] | None = None) -> CgroupHome | None:
    """This process's group for script executions, made at the first call; None where
    processes cannot be confined. A supervisor makes one of its own (`CgroupHome.create`)."""
    with _home_lock:
        if not _home:
            made = CgroupHome.create(os.environ if environ is None else environ)
            if made is not None and not _close_registered:
                # What scripts left running in it ends with this process, as `run` ends.
                atexit.register(close_home)
                _close_registered.append(True)
            _home.append(made)
        return _home[0]


def close_home() -> None:
    """End this process's group for scripts (at exit); a later `home()` makes a new one."""
    with _home_lock:
        if _home and _home[0] is not None:
            _home[0].close()
        _home.clear()
