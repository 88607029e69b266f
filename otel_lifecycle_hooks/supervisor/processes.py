"""Every process the agent started, wherever it went: the supervisor as a child subreaper.

An agent's tools may leave its process group and session (Gemini CLI runs its shell tool with
`setsid`), and a process whose parent dies is re-parented. With PR_SET_CHILD_SUBREAPER (as tini
and systemd use it) such orphans are re-parented to the supervisor instead of to init, so that
they stay visible under it. `AgentProcesses` follows them:

- `scan()` walks /proc and keeps every process whose ancestry leads to the agent, or that is in
  the agent's session or process group, or that is now the supervisor's child (an orphan) and
  either was seen in the agent's tree before or carries the agent's tag: `AGENT_TAG_ENV`, set
  in the agent's environment and so inherited by what it starts. An orphan that left the
  agent's session and dropped its environment before it was ever seen is not found. Each is
  known by (pid, start time), so that a reused pid is never mistaken for it;
- `reap()` collects those orphans once they exited (zombies the supervisor now owns), and
  every other zombie re-parented to the supervisor (what a script hook left in the background
  and that ended), so that none fills the process table until `run` exits. Each is reaped by
  pid: never `waitpid(-1)`, which would steal the exit status of the supervisor's own children
  (script hooks, the agent itself). A zombie not of the agent's tree is taken only when it
  cannot be one of those children: a process the supervisor started is in the supervisor's
  session or leads a session of its own, and a session is left only by leading a new one, so
  a zombie in a third session was re-parented here (`orphaned_zombies`). One that led a
  session of its own (a hook's `setsid` daemon never seen alive) is left for `run`'s exit;
- `signal(sig)` sends `sig` to every known live one (but those it is told to spare);
- `harness_programs()` names the live ones still in the agent's own process group that are
  not this package's (`hook` clients): programs the harness started itself, such as Codex's
  `notify` of the user's own, which the end of the run leaves to finish (agent_tree.py). A
  tool that detached left the group; one that stayed is spared no longer than the grace
  period, after which everything is killed as before, so staying in the group buys nothing.

The agent child itself gets PR_SET_PDEATHSIG (SIGKILL): if the supervisor is killed outright,
the kernel ends the agent too, so it never runs on unsupervised. A small launcher sets it and
then execs the agent (same pid, and the setting survives the exec): a `preexec_fn` would make
subprocess fork the whole supervisor and run Python in the child, where the at-fork handlers of
libraries with threads (gRPC's exporter) can hang it. The launcher is util-linux's `setpriv
--pdeathsig KILL` followed by `/bin/sh`, which checks that its parent is still the supervisor
and execs the agent (about 1.5 ms); where there is no such `setpriv`, a second interpreter
(`python -S -I`) does the same (about 9 ms, paid by every agent's start).

The scan has a blind spot (an orphan that left the agent's session and environment before
it was seen), and a killed supervisor can scan nothing: where processes can be confined (root
with cgroup v2), the agent also runs in a cgroup of its own that run.py kills whole
(`confinement`); the scan stays for everything else.

Linux only; elsewhere every function here is a no-op that reports it did nothing.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import signal as signals
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_PROC = "/proc"
# How this package's own processes (the `hook` client a harness runs) name it in their argv.
_OUR_PROGRAMS = frozenset({b"otel-lifecycle-hooks", b"otel_lifecycle_hooks"})
# Set in the agent's environment (a value unique to one run): what tells the agent's orphans
# from the supervisor's own children (script hooks), both children of the supervisor.
AGENT_TAG_ENV = "LIFECYCLE_HOOKS_AGENT_TAG"


PR_GET_CHILD_SUBREAPER = 37
_prctl_cache: list[Callable[..., int] | None] = []


def _libc_prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once (None off Linux)."""
    if not _prctl_cache:
        prctl = None
        if sys.platform.startswith("linux"):
            try:
                # The interpreter's own symbols include libc's: no library search at start-up.
                prctl = ctypes.CDLL(None, use_errno=True).prctl
            except (OSError, AttributeError):
                prctl = None
        _prctl_cache.append(prctl)
    return _prctl_cache[0]


def is_subreaper() -> bool:
    prctl = _libc_prctl()
    if prctl is None:
        return False

    flag = ctypes.c_int(0)
    return prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and flag.value != 0


def set_subreaper(on: bool) -> bool:
    """Make this process the child subreaper of its descendants (or stop being one); False
    where it cannot."""
    prctl = _libc_prctl()
    if prctl is None:
        return False
    if prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        log.warning("could not set the child subreaper flag: %s", os.strerror(ctypes.get_errno()))
        return False
    return True


# argv: parent pid, uid, gid, groups (comma-separated; "-" for no change of user), the
# program's path, then the command's own argv (argv[0] kept). The user is changed before the
# setting, since a change of credentials clears it.
_LAUNCHER = (
    "import ctypes, os, sys\n"
    "parent, uid, gid, groups, program = sys.argv[1:6]\n"
    "if uid != '-':\n"
    "    os.setgroups([int(g) for g in groups.split(',') if g])\n"
    "    os.setgid(int(gid))\n"
    "    os.setuid(int(uid))\n"
    "ctypes.CDLL(None, use_errno=True)"
    f".prctl({PR_SET_PDEATHSIG}, {int(signals.SIGKILL)}, 0, 0, 0)\n"
    "if os.getppid() != int(parent):\n"
    "    os._exit(1)  # the supervisor died before the setting took: never run unsupervised\n"
    "os.execv(program, sys.argv[6:])\n"
)


# util-linux's setpriv, at the system's own paths only: never looked up on the agent's PATH,
# where a directory the agent can write could hold a `setpriv` of its own (run as root, before
# the agent's user is set, under `--user`).
SETPRIV_PATHS = ("/usr/bin/setpriv", "/bin/setpriv")
_SHELL = "/bin/sh"
# Run by /bin/sh once setpriv has set the signal: a supervisor that died before that would
# never send it, so the agent is not started unless the parent is still the supervisor.
_PARENT_CHECK = '[ "$PPID" = "$1" ] || exit 1; shift; exec "$@"'
_setpriv_cache: list[str | None] = []


def setpriv_launcher(paths: Sequence[str] = SETPRIV_PATHS) -> str | None:
    """The path of a `setpriv` that has `--pdeathsig` (util-linux 2.33 and later), when
    `/bin/sh` is there too; None otherwise. Read once: an older setpriv, or busybox's, is told
    apart by the option's name missing from the program (cheaper than running it)."""
    if paths is SETPRIV_PATHS and _setpriv_cache:
        return _setpriv_cache[0]
    found = None
    if os.access(_SHELL, os.X_OK):
        for path in paths:
            try:
                with open(path, "rb") as program:
                    has_option = b"--pdeathsig" in program.read()
            except OSError:
                continue
            if has_option and os.access(path, os.X_OK):
                found = path
                break
    if paths is SETPRIV_PATHS:
        _setpriv_cache.append(found)
    return found


def die_with_parent(
    command: Sequence[str],
    env: Mapping[str, str],
    identity: Mapping[str, Any] | None = None,
    setpriv: str | bool = True,
) -> tuple[list[str], dict[str, Any]]:
    """`command` started so that it is killed when this process dies, and the Popen options
    that go with it. Where the platform has PR_SET_PDEATHSIG: through the launcher, which also
    takes over `identity` (Popen's `user`, `group`, `extra_groups`); else as it is, with
    `identity` for Popen. The program is looked up here, on the `PATH` of `env` (as subprocess
    does), so that a missing one fails as it would without the launcher: `FileNotFoundError`
    or `PermissionError`, raised before anything starts. `setpriv`: True to use the system's
    when it has the option, a path to use that one, False for the Python launcher."""
    identity = dict(identity or {})
    if _libc_prctl() is None or not command or not sys.executable:
        return list(command), identity
    program = command[0]
    found = _find_program(program, env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    uid, gid = identity.pop("user", None), identity.pop("group", None)
    groups = identity.pop("extra_groups", None) or ()
    launcher_path = setpriv_launcher() if setpriv is True else setpriv or None
    if launcher_path is not None:
        argv = [launcher_path, "--pdeathsig", "KILL"]
        if uid is not None:
            # setpriv changes the user before it sets the signal (a change clears it).
            argv += ["--reuid", str(uid), "--regid", str(gid if gid is not None else os.getgid())]
            argv += ["--groups", ",".join(map(str, groups))] if groups else ["--clear-groups"]
        # The command as given (its argv[0] kept), found by the shell on the same PATH; with
        # no PATH in `env`, where it was found here.
        program = command[0] if "PATH" in env else found
        checked = [_SHELL, "-c", _PARENT_CHECK, "launcher", str(os.getpid())]
        return [*argv, "--", *checked, program, *command[1:]], identity
    user = (
        ["-", "-", ""]
        if uid is None
        else [
            str(uid),
            str(gid if gid is not None else os.getgid()),
            ",".join(str(g) for g in groups),
        ]
    )
    # -S and -I: no site packages and no PYTHON* variables, for a few milliseconds' start.
    launcher = [sys.executable, "-S", "-I", "-c", _LAUNCHER, str(os.getpid()), *user, found]
    return [*launcher, *command], identity


def _find_program(program: str, path: str) -> str | None:
    """Where execvp would find `program` on `path`, as `shutil.which` would: before the agent's
    spawn, where importing shutil (with bz2 and lzma) cost about 3 ms of CPU (15 paired runs of
    `python -c 'import os, subprocess[, shutil]'`, medians 46 and 43 ms on a loaded machine;
    tests/supervisor/test_supervisor_startup.py keeps it out)."""
    if os.sep in program:
        return program if os.path.exists(program) else None
    candidates = [os.path.join(d or os.curdir, program) for d in path.split(os.pathsep)]
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return next((c for c in candidates if os.path.exists(c)), None)


def _collect(pid: int) -> bool:
    """Reap `pid` if it has exited as this process's child; whether it was reaped."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class ProcessInfo(NamedTuple):
    """One line of /proc/<pid>/stat: what tells whose process it is."""

    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int
    start: int  # clock ticks after boot: with the pid, names one process across pid reuse

    @property
    def key(self) -> tuple[int, int]:
        """The process's identity: a reused pid has another start time."""
        return (self.pid, self.start)


def read_stat(pid: int, proc: str = _PROC) -> ProcessInfo | None:
    """The process's /proc stat, or None when it is gone or unreadable."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as stat:
            line = stat.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name is in parentheses and may itself hold spaces or parentheses.
    fields = line[line.rfind(")") + 2 :].split()
    try:
        return ProcessInfo(
            pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
        )
    except (IndexError, ValueError):
        return None


def all_processes(proc: str = _PROC) -> Iterator[ProcessInfo]:
    try:
        names = os.listdir(proc)
    except OSError:
        return
    for name in names:
        if name.isdigit():
            info = read_stat(int(name), proc)
            if info is not None:
                yield info


def agent_tree(
    agent_pid: int,
    supervisor_pid: int,
    known: set[tuple[int, int]],
    processes: list[ProcessInfo],
    tagged: frozenset[int] = frozenset(),
) -> list[ProcessInfo]:
    """The processes of `processes` that belong to the agent (see the module's docstring).

    Pure: `processes` is one snapshot of /proc, `known` the keys seen in the agent's tree so
    far, `tagged` the supervisor's children that carry the agent's tag. The agent itself is
    included while it is listed.
    """
    children: dict[int, list[ProcessInfo]] = {}
    for process in processes:
        children.setdefault(process.ppid, []).append(process)
    roots = [
        p
        for p in processes
        if p.pid == agent_pid
        or p.sid == agent_pid
        or p.pgid == agent_pid
        or (p.ppid == supervisor_pid and (p.key in known or p.pid in tagged))
    ]
    found: dict[int, ProcessInfo] = {}
    stack = list(roots)
    while stack:
        process = stack.pop()
        if process.pid in found or process.pid == supervisor_pid:
            continue
        found[process.pid] = process
        stack.extend(children.get(process.pid, []))
    return list(found.values())


def orphaned_zombies(
    supervisor_pid: int, supervisor_sid: int, processes: list[ProcessInfo]
) -> list[ProcessInfo]:
    """The zombies of `processes` re-parented to the supervisor that it cannot have started
    itself: in a session that is neither its own nor one they lead (see the module's
    docstring). Reaping them steals no exit status a `Popen` of this process waits for."""
    return [
        p
        for p in processes
        if p.state == "Z"
        and p.ppid == supervisor_pid
        and p.sid != supervisor_sid
        and p.sid != p.pid
    ]


class AgentProcesses:
    """The agent's processes as the supervisor last saw them (Linux /proc)."""

    def __init__(self, agent_pid: int, tag: str, proc: str = _PROC) -> None:
        self.agent_pid = agent_pid
        self.supervisor_pid = os.getpid()
        self._supervisor_sid = os.getsid(0)
        self._tag = f"{AGENT_TAG_ENV}={tag}".encode()
        self._proc = proc
        self.known: set[tuple[int, int]] = set()

    def scan(self) -> list[ProcessInfo]:
        """The agent's processes now, remembered for later scans."""
        return self._tree(list(all_processes(self._proc)))

    def _tree(self, processes: list[ProcessInfo]) -> list[ProcessInfo]:
        """The agent's processes among `processes` (one snapshot), remembered."""
        unknown_children = [
            p.pid
            for p in processes
            if p.ppid == self.supervisor_pid and p.pid != self.agent_pid and p.key not in self.known
        ]
        tagged = frozenset(pid for pid in unknown_children if self._carries_tag(pid))
        tree = agent_tree(self.agent_pid, self.supervisor_pid, self.known, processes, tagged)
        self.known.update(p.key for p in tree)
        return tree

    def _carries_tag(self, pid: int) -> bool:
        try:
            with open(f"{self._proc}/{pid}/environ", "rb") as environ:
                return self._tag in environ.read().split(b"\0")
        except OSError:
            return False

    def reap(self) -> int:
        """Collect the agent's exited orphans that are now this process's children, and the
        other zombies re-parented here (a script hook's background child)."""
        processes = list(all_processes(self._proc))
        zombies = {
            p.pid: p
            for p in self._tree(processes)
            if p.state == "Z"
            and p.ppid == self.supervisor_pid
            and p.pid != self.agent_pid  # the agent is its own Popen's to wait for
        }
        for orphan in orphaned_zombies(self.supervisor_pid, self._supervisor_sid, processes):
            zombies.setdefault(orphan.pid, orphan)
        return sum(_collect(pid) for pid in zombies if pid != self.agent_pid)

    def reap_pids(self, pids: Sequence[int]) -> int:
        """Collect those of `pids` that exited as this process's children (the agent's
        processes that its cgroup listed, found there rather than by the scan)."""
        reaped = 0
        for pid in pids:
            if pid == self.agent_pid:
                continue  # its Popen's to wait for
            info = read_stat(pid, self._proc)
            if info is not None and info.state == "Z" and info.ppid == self.supervisor_pid:
                reaped += _collect(pid)
        return reaped

    def signal(self, signum: int, spare: Collection[int] = ()) -> list[int]:
        """Send `signum` to every live process of the agent but the agent itself (its group
        is signalled by the caller) and those of `spare`; returns the pids signalled."""
        sent = []
        for process in self.scan():
            if process.pid == self.agent_pid or process.state == "Z" or process.pid in spare:
                continue
            try:
                os.kill(process.pid, signum)
            except (ProcessLookupError, PermissionError):
                continue
            sent.append(process.pid)
        return sent

    def harness_programs(self) -> list[int]:
        """Pids of the live processes still in the agent's process group, but the agent and
        this package's own: what the harness started itself (see the module's docstring)."""
        return [
            p.pid
            for p in self.scan()
            if p.pgid == self.agent_pid
            and p.pid != self.agent_pid
            and p.state != "Z"
            and not self._is_ours(p.pid)
        ]

    def _is_ours(self, pid: int) -> bool:
        try:
            with open(f"{self._proc}/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
        except OSError:
            return False
        return any(os.path.basename(arg) in _OUR_PROGRAMS for arg in argv)

    def our_programs(self) -> list[int]:
        """Pids of this package's own programs still running in the agent's tree: a `hook`
        the harness started, with an event on its way to the supervisor."""
        return [
            p.pid
            for p in self.scan()
            if p.state != "Z" and p.pid != self.agent_pid and self._is_ours(p.pid)
        ]

    def alive(self) -> list[int]:
        """Pids of the agent's processes that have not exited (zombies excluded)."""
        return [p.pid for p in self.scan() if p.state != "Z" and p.pid != self.agent_pid]
