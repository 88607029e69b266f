"""The agent's process tree: its spawn (the launcher that makes it die with the supervisor, its
cgroup), the signals sent to it and to whatever it started, the end of what it left running,
and the reaping of its orphans (the supervisor is their child subreaper: processes.py).

What stop and the end reach: the agent's process group, every process the /proc scan follows
(those that left the group or the session), and, where processes can be confined, the agent's
cgroup, killed whole (confinement.py), which holds even what the scan never saw.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import confinement
from ..agent_env import agent_environment
from ..template.model import Template
from ..template.trust import is_loader_variable
from ..variables import METADATA_ENV
from .processes import AGENT_TAG_ENV, AgentProcesses, die_with_parent, is_subreaper, set_subreaper

log = logging.getLogger("otel_lifecycle_hooks.supervisor")


def agent_user_ids(user: str | None) -> tuple[int, int] | None:
    """The uid and gid of `user`, the agent's, when this process runs as root and the agent as
    that user (what must own the event socket; who must not be able to replace the journal);
    None when the agent runs as this process's user."""
    if not user or os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None  # the spawn reports the unknown user
    return entry.pw_uid, entry.pw_gid


def spawn_environment(
    environ: Mapping[str, str],
    template: Template,
    otel_env: Mapping[str, str],
    metadata: Mapping[str, str],
    tag: str,
    traceparent: str | None,
) -> dict[str, str]:
    """The agent's environment: the run's, the template's `env:` and the OTel settings as
    defaults, the agent's tag and trace context, the SCION_* metadata; without what the agent
    must not inherit (the journal's credentials and the hooks' own: agent_env.py)."""
    env = dict(environ)
    for key, value in template.env.items():
        env.setdefault(key, value)
    for key, value in otel_env.items():
        env.setdefault(key, value)
    env[AGENT_TAG_ENV] = tag
    if traceparent:
        env["TRACEPARENT"] = traceparent
    for name, variable in METADATA_ENV.items():
        if metadata.get(name):
            env.setdefault(variable, metadata[name])
    return agent_environment(env, template)


def loaders_after_drop(
    env: dict[str, str], command: Sequence[str]
) -> tuple[dict[str, str], Sequence[str]]:
    """The environment for the root stages that start an agent of another user (the cgroup
    join, the launcher that drops to its user), and the command: the variables that make the
    loader or a shell load code (`LD_PRELOAD` in the template's `env:`) are given to the agent
    after the drop (`confinement.after_drop`), never seen as root."""
    loaders = {k: v for k, v in env.items() if k != "PATH" and is_loader_variable(k)}
    if not loaders:
        return env, command
    command, carrier = confinement.after_drop(command, loaders)
    return {k: v for k, v in env.items() if k not in loaders} | carrier, command


class AgentTree:
    """The agent process and every process it started, from its spawn to the last reap."""

    def __init__(self, environ: Mapping[str, str], on_exit: Callable[[int], None]) -> None:
        self._environ = environ
        self._on_exit = on_exit  # called from a thread with the agent's exit code
        # In the agent's environment: what tells its orphans from the supervisor's children.
        self.tag = f"{os.getpid()}-{uuid.uuid4().hex[:16]}"
        self.child: subprocess.Popen[bytes] | None = None
        self.started = time.monotonic()
        self.died_of: int | None = None  # the signal the agent died of, if any
        self._processes: AgentProcesses | None = None  # set once the agent is started
        # The agent's cgroup, where processes can be confined (confinement.py): what stop and
        # the end kill whole, wherever the agent's processes went.
        self._group: confinement.Cgroup | None = None
        self._cgroups: confinement.CgroupHome | None = None
        self._made_subreaper = False  # this run made the process a subreaper: undo at the end

    # -- the start --

    def become_subreaper(self) -> None:
        """Orphans of the agent's tools come to this process, not to init, so that stop can
        reach them."""
        if not is_subreaper():
            self._made_subreaper = set_subreaper(True)

    def spawn(
        self,
        command: Sequence[str],
        env: dict[str, str],
        identity: Mapping[str, Any],
        *,
        other_user: bool,
    ) -> int:
        """Start the agent in a session of its own; its pid. Raises OSError when it cannot
        start. `identity`: Popen's user options for an agent of `other_user`."""
        if other_user:
            env, command = loaders_after_drop(env, command)
        # The agent dies with a killed supervisor, instead of running on unsupervised.
        argv, identity = die_with_parent(command, env, identity)
        group = self._confine(identity)
        if group is not None:
            # Joined as root, before the launcher drops to the agent's user and before any of
            # the agent's own code runs: nothing it starts is ever outside the group.
            argv = group.join_argv(argv)
        self.child = subprocess.Popen(argv, env=env, start_new_session=True, **identity)
        self.started = time.monotonic()
        return self.child.pid

    def follow(self) -> None:
        """Start following the agent's processes, and waiting for its exit on a thread."""
        assert self.child is not None
        self._processes = AgentProcesses(self.child.pid, self.tag)
        self._processes.scan()
        threading.Thread(target=self._wait, name="child-wait", daemon=True).start()

    def _confine(self, identity: Mapping[str, Any]) -> confinement.Cgroup | None:
        """The agent's cgroup (made now, after the groups of dead supervisors are swept); None
        where processes cannot be confined, or where the user would be changed by Popen
        itself (no launcher), after the stage that joins the group would have run as root."""
        if identity:
            return None
        self._cgroups = confinement.CgroupHome.create(self._environ)
        if self._cgroups is not None:
            self._group = self._cgroups.leaf("agent")
        return self._group

    def _wait(self) -> None:
        assert self.child is not None
        code = self.child.wait()
        if code < 0:
            self.died_of = -code
        # A shell's convention: 128 + N for a process that died of signal N.
        self._on_exit(code if code >= 0 else 128 - code)

    # -- signals --

    @property
    def running(self) -> bool:
        """Whether the agent itself was started and has not exited."""
        return self.child is not None and self.child.poll() is None

    def forward(self, signum: int) -> None:
        """Send `signum` to the agent's group, and (but SIGHUP) to every process it started."""
        if self.running:
            self._signal_group(signum)
        sent: list[int] = []
        if signum != signal.SIGHUP and self._processes is not None:
            # Those that left the agent's group or session (setsid) are signalled one by one.
            sent = self._processes.signal(signum)
        if signum != signal.SIGHUP and self._group is not None:
            # And those the scan never saw; none twice (the group's were signalled above).
            self._group.signal(signum, skip=self._signalled_already(sent))

    def stop(self, deadline: float) -> None:
        """TERM, the agent's exit awaited until `deadline`, then KILL."""
        self.forward(signal.SIGTERM)
        while self.running and time.monotonic() < deadline:
            time.sleep(0.05)
        self.kill()

    def kill(self) -> None:
        """KILL the agent and everything of it still running (the grace period is spent)."""
        if self.running:
            log.warning("grace period spent: killing the agent")
            self._signal_group(signal.SIGKILL)
        if self._processes is not None and self._processes.signal(signal.SIGKILL):
            log.warning("grace period spent: killed the processes the agent left")
        if self._group is not None:
            self._group.kill()  # also those that left its session and its tag

    def kill_now(self) -> None:
        """KILL the agent's group and cgroup at once, without a word (a second stop signal)."""
        if self.running:
            self._signal_group(signal.SIGKILL)
        if self._group is not None:
            self._group.kill()

    def _signal_group(self, signum: int) -> None:
        assert self.child is not None
        try:
            os.killpg(self.child.pid, signum)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(signum)

    def _signalled_already(self, sent: Sequence[int]) -> set[int]:
        """`sent`, the agent, and the members of its process group (a killpg reached them)."""
        skip = set(sent)
        if self.child is not None:
            skip.add(self.child.pid)
            if self._processes is not None:
                skip.update(p.pid for p in self._processes.scan() if p.pgid == self.child.pid)
        return skip

    # -- the end --

    def end_leftovers(self, deadline: float, *, terminate: bool) -> None:
        """After the agent exited: TERM what it left running (when `terminate`: no stop sent
        TERM already), KILL it at `deadline`, and reap it, so that nothing the agent started
        outlives `run`. A program the harness started itself (Codex's `notify` of the user's
        own, still in the agent's process group) is not sent TERM: it may finish until
        `deadline`, and is killed there with the rest."""
        if self._processes is None:
            return
        group = self._group
        if terminate:
            spared = self._processes.harness_programs()
            signalled = self._processes.signal(signal.SIGTERM, spare=spared)
            if group is not None:
                skip = self._signalled_already(signalled) | set(spared)
                signalled += group.signal(signal.SIGTERM, skip=skip)
            if signalled:
                log.warning("the agent exited and left processes running: stopping them")
        while self._leftovers() and time.monotonic() < deadline:
            self.reap_orphans()
            time.sleep(0.05)
        in_group = group.pids() if group is not None else []
        if self._processes.signal(signal.SIGKILL) or in_group:
            log.warning("grace period spent: killed the processes the agent left")
        if group is not None:
            group.kill()
        for _ in range(100):  # a killed process takes a moment to become a zombie
            self.reap_orphans(in_group)
            if not self._leftovers():
                break
            time.sleep(0.01)
        self.reap_orphans(in_group)  # one that became a zombie after the last reap above

    def senders_running(self) -> bool:
        """Whether a `hook` of this package's that the agent started still runs: after the
        agent's exit, its event may still be on its way."""
        return self._processes is not None and bool(self._processes.our_programs())

    def _leftovers(self) -> bool:
        """Whether any process of the agent's still runs (a zombie has ended)."""
        if self._processes is not None and self._processes.alive():
            return True
        group = self._group
        # Zombies leave their cgroup: what it lists still runs (the agent itself included,
        # while Popen has not reaped it).
        agent_pid = self.child.pid if self.child is not None else None
        return group is not None and any(pid != agent_pid for pid in group.pids())

    def reap_orphans(self, pids: Sequence[int] = ()) -> None:
        """Collect the agent's exited orphans: those the scan knows, and `pids` (processes of
        the agent's cgroup, which the scan may never have seen)."""
        if self._processes is not None:
            self._processes.reap()
            self._processes.reap_pids(pids)

    def stop_being_subreaper(self) -> None:
        """Undo `become_subreaper` (the process may live on: a library caller, a test)."""
        if self._made_subreaper:
            set_subreaper(False)

    def release_cgroups(self) -> None:
        """Remove the agent's cgroups, once nothing of it runs: nothing of it outlives the run."""
        if self._cgroups is not None:
            self._cgroups.close()
