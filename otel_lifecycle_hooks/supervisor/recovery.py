"""Crash recovery, the seed's orphan reaper: one code path for the next `run` and `reconcile`.

A session that began post-start and never recorded its end belonged to a supervisor that was
killed (SIGKILL, OOM, a node lost): its pre-stop and session-end hooks are still owed, so that no
registration is left behind. Recovery fires them, marked as recovered, exactly once:

- **The same ids.** The moment each owed event began is journaled before any of its hooks is
  sent; that moment is its `${TIMESTAMP}`, so a recovered hook carries the X-Scion-Hook-ID the
  killed session used (or would have used: the claim fixes the moment of an event that never
  began, once, and whoever recovers after a dead claimer reuses it).
- **Only what is owed.** A hook the journal shows ran for that event is not sent again; pre-stop
  is not owed by a session whose session-end had begun (it ended without being stopped).
- **One recoverer.** A session is taken by one atomic UPDATE (`claim_session`); any number of
  reconcilers and runs at once, on SQLite or PostgreSQL, see exactly one winner. A claim lapses
  after `CLAIM_LEASE`, for a recoverer that died half-way.
- **Never a live session.** On the same machine (same boot and pid namespace) the earlier
  supervisor and agent processes are looked up by pid and start time; elsewhere, the session's
  heartbeat must be older than `stale_after`. `reconcile` asks for both. The heartbeat's age
  is measured on the journal's clock (PostgreSQL's own, journal/liveness.py), from the later
  of the heartbeat and the moment the database could be written again after an outage: a
  database that was away, or a machine whose clock is wrong, never makes a live agent look
  dead. The next `run` on the same machine in another pid namespace (a container restarted)
  also knows a supervisor is gone when the lock file it held while it lived (`SessionLock`)
  is held by nobody: it recovers that session at once instead of waiting for its heartbeat to
  grow stale, and says so, or why it leaves a session for later.
- **Never the agent's row.** The agent can write the journal. Requests are rendered from the
  recoverer's template and operator-side metadata only: the next `run` uses its own, and
  recovers only sessions of its own agent id. Where a journal key is set
  (`$LIFECYCLE_HOOKS_JOURNAL_KEY`, journal/seal.py), a session is recovered only if its row's
  seal is right; the claim re-seals it with the moments it fixes. `reconcile` requires it.
- **Owed until delivered.** A hook that fails during recovery is not counted as done: the
  session is not marked recovered and its claim is released, so the next pass (the next `run`
  or `reconcile`) sends it again, with the same id. After `RECOVERY_PASSES` failed passes of a
  hook, and once its `retry: {horizon: ...}` from its event's moment has passed, the session is
  marked recovered anyway, and that is logged as given up.
- **Each event its own budget.** Each owed event of a recovered session gets the whole budget
  (the grace period) of its own, so that a slow pre-stop never starves the session-end.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..engine.model import LifecycleEvent, SessionInfo
from ..journal.base import Journal
from ..journal.liveness import LivenessClock
from ..journal.rows import FAILED_OUTCOMES, RUNNING, SessionRow, as_claimed
from ..journal.seal import seal, unvouched
from ..redact import Redactor, looks_like_secret_name
from ..template.durations import DurationError, parse_duration
from ..template.secrets import secret_names_for
from ..variables import referenced_names

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

RECOVERED_EVENTS = ("pre-stop", "session-end")
# A process that started this long after the session did cannot be its supervisor.
_START_TIME_SLACK = 2.0
# A recoverer that claimed a session and did not mark it recovered within this long is taken
# to have died: the next one recovers it, with the same ids.
CLAIM_LEASE = 300.0
HEARTBEAT_ENV = "OTEL_LIFECYCLE_HOOKS_HEARTBEAT"
# How long post-start's moment (and so the session row before it) waits to be committed to a
# shared journal before its hooks (the registration) are sent anyway, counted and logged.
REGISTRATION_WAIT_ENV = "LIFECYCLE_HOOKS_REGISTRATION_WAIT"
DEFAULT_REGISTRATION_WAIT = 30.0
DEFAULT_HEARTBEAT = 10.0  # seconds between a supervisor's heartbeats
DEFAULT_STALE_AFTER = 60.0  # a heartbeat older than this is a dead supervisor's
# Recovery passes in which an owed hook may fail before its session is given up (marked
# recovered, logged): each pass leaves a failed execution row, so the count survives exits.
RECOVERY_PASSES = 3
# A hook's execution that did not deliver: still owed (a `running` row is one a killed run
# never finished).
_UNDELIVERED = frozenset((RUNNING, *FAILED_OUTCOMES))


def supervisor_alive(pid: int | None, session_started_at: float) -> bool:
    """Whether the process that opened a session still runs. Our own pid is never it: in a
    restarted container the new supervisor gets the old one's pid (often 1)."""
    if not pid or pid == os.getpid():
        return False
    if not _pid_exists(pid):
        return False
    started = process_start_time(pid)
    # A pid that was reused by a process started after the session is not the supervisor.
    return started is None or started <= session_started_at + _START_TIME_SLACK


def agent_alive(pid: int | None, started_at: float | None) -> bool:
    """Whether the agent process a session recorded (pid and start time) still runs."""
    if not pid or pid == os.getpid() or not _pid_exists(pid):
        return False
    if started_at is None:
        return True
    now_started = process_start_time(pid)
    # Start times read from /proc agree to a clock tick; a reused pid started later.
    return now_started is None or abs(now_started - started_at) < 0.5


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, under another user
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")  # a zombie is dead, only not reaped yet


def process_start_time(pid: int) -> float | None:
    """When `pid` started (unix seconds), from /proc; None where /proc is not available."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot_line = next(
            line
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, StopIteration):
        return None
    # Field 22 (starttime, in clock ticks since boot) counted after the parenthesised name.
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        ticks = int(fields[19])
        return int(boot_line.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None


def process_namespace() -> str:
    """Where a pid means the same process: this boot of this machine and this pid namespace.
    Two sessions with the same value can look each other's processes up."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return "host:" + socket.gethostname()
    return f"{boot}/{namespace}"


# -- what a session records for its recovery --


def session_fields(
    template: Any, environ: Mapping[str, str], metadata: Mapping[str, str]
) -> dict[str, Any]:
    """The parts of a session row that let another machine recover it: the template files'
    text, the agent metadata, the non-secret environment values the template reads, and
    where its pids mean something. Secrets are never among them: a variable whose value the
    redaction rules would change (a known secret in it, a URL's userinfo, a secret-looking
    query value) is left out, as are secret-named ones."""
    templates: list[dict[str, str]] = []
    names: set[str] = set()
    secrets = secret_names_for(template)
    literals = _literal_secrets(template, secrets)
    for path in getattr(template, "files", ()) or ():
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        entry = {
            "path": os.path.abspath(path),
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        }
        if any(literal in text for literal in literals):
            # A secret written in the file itself never goes to the journal: a recoverer
            # elsewhere reads the file at this path (and checks its hash) instead.
            log.info("template %s holds a literal secret: journaled by path and hash", path)
        else:
            entry["text"] = text
        templates.append(entry)
        names |= referenced_names(text)
    secret_values = {environ[name] for name in secrets if environ.get(name)}
    redactor = Redactor(frozenset(secret_values))
    variables = {
        name: environ[name]
        for name in sorted(names)
        if name in environ
        and name not in secrets
        and not looks_like_secret_name(name)
        and name not in metadata
        and _clean(redactor, environ[name])
    }
    return {
        "templates": templates,
        "metadata": dict(metadata),
        "variables": variables,
        "host": process_namespace(),
    }


_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")


def _clean(redactor: Redactor, value: str) -> bool:
    """Whether the redaction rules leave `value` as it is: as text, and as a URL where it
    holds one (its userinfo and secret-looking query values)."""
    if redactor.redact_text(value) != value:
        return False
    return "://" not in value or redactor.redact_url(value) == value


def _literal_secrets(template: Any, secret_names: frozenset[str]) -> set[str]:
    """Secret values the template's text holds literally: `env:` values of secret names,
    credential headers and URL passwords written without a variable."""
    literals = {value for name, value in template.env.items() if name in secret_names and value}
    for hook in template.hooks:
        action = hook.action
        for name, value in action.headers.items():
            credential = name.lower() in _CREDENTIAL_HEADERS or looks_like_secret_name(
                name.replace("-", "_")
            )
            if credential and "${" not in value and value.strip():
                literals.add(value.split()[-1])  # the credential, after any "Bearer"
        literals |= {v for k, v in action.env.items() if looks_like_secret_name(k) and v}
        try:
            password = urlsplit(action.url or "").password
        except ValueError:
            password = None
        if password and "${" not in password:
            literals.add(password)
    return {literal for literal in literals if "${" not in literal and len(literal) >= 4}


def heartbeat_interval(environ: Mapping[str, str]) -> float:
    """`$LIFECYCLE_HOOKS_HEARTBEAT` (or the older `$OTEL_LIFECYCLE_HOOKS_HEARTBEAT`), a
    duration, else 10 s."""
    name = HEARTBEAT_ENV.removeprefix("OTEL_")
    text = environ.get(name) or environ.get(HEARTBEAT_ENV)
    return _duration_setting(HEARTBEAT_ENV, text, DEFAULT_HEARTBEAT, floor=0.05)


def registration_wait(environ: Mapping[str, str]) -> float:
    """`$LIFECYCLE_HOOKS_REGISTRATION_WAIT`, a duration (`0` sends at once), else 30 s: how long
    post-start waits for the session row to reach a shared journal."""
    text = environ.get(REGISTRATION_WAIT_ENV)
    if text is not None and text.strip() == "0":
        return 0.0  # the documented "do not wait", which a duration would want as `0s`
    return _duration_setting(REGISTRATION_WAIT_ENV, text, DEFAULT_REGISTRATION_WAIT, floor=0.0)


def _duration_setting(name: str, text: str | None, default: float, floor: float) -> float:
    """A duration setting's seconds (at least `floor`); `default` when unset, or unreadable
    (then said once in the log)."""
    if not text:
        return default
    try:
        return max(floor, parse_duration(text))
    except DurationError as exc:
        log.warning("%s: %s; using %gs", name, exc, default)
        return default


def session_lock_dir(environ: Mapping[str, str]) -> Path:
    """Where supervisors of this machine keep the lock files of their live sessions: under
    the supervisor's own home, which its agent (another user) cannot write."""
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "state" / "otel-lifecycle-hooks" / "live"


def session_lock_path(lock_dir: Path, session_id: str) -> Path:
    """The lock file of `session_id` in `lock_dir`, named by a hash: a session id is the
    journal's text, never a path."""
    return lock_dir / f"{hashlib.sha256(session_id.encode('utf-8')).hexdigest()[:32]}.lock"


class SessionLock:
    """A lock file that a supervisor holds (flock) for as long as it lives: the kernel lets it
    go when the process dies, however it dies, whichever pid namespace looks."""

    def __init__(self, lock_dir: Path, session_id: str) -> None:
        self.path = session_lock_path(lock_dir, session_id)
        self._fd: int | None = None
        try:
            lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            hidden = lock_dir / f".{os.getpid()}-{self.path.name}"
            fd = os.open(hidden, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW, 0o600)
            # Locked before it gets the name a prover opens: never seen unheld while we live.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(hidden, self.path)
            self._fd = fd  # not inheritable (PEP 446): no child holds it after we die
        except OSError as exc:
            log.info("no session lock in %s (%s): recovery elsewhere waits for the heartbeat",
                     lock_dir, exc)  # fmt: skip

    def release_name(self) -> None:
        """The session ended: the file goes (the lock itself is held until the process
        exits, so that its end never looks like a death meanwhile)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()


def supervisor_lock_released(lock_dir: Path, session_id: str) -> bool:
    """Whether a supervisor of this machine is proven gone: the lock file of `session_id` is
    there, in a folder only this user writes (nobody else could have put a file there), and
    nobody holds it. False whenever it cannot be told."""
    path = session_lock_path(lock_dir, session_id)
    try:
        folder = os.lstat(lock_dir)
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        private = (
            stat.S_ISDIR(folder.st_mode)
            and folder.st_uid == os.geteuid()
            and not folder.st_mode & 0o022
        )
        if not (private and stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: its supervisor lives
        with contextlib.suppress(OSError):
            path.unlink()  # proven once; a later reader judges by the journal alone
        return True
    finally:
        os.close(fd)


class Heartbeat:
    """Refreshes a session's heartbeat in the journal until stopped (its own daemon thread),
    the first at once; with `lock_dir`, holds the session's lock file meanwhile."""

    def __init__(
        self, journal: Any, session_id: str, interval: float, lock_dir: Path | None = None
    ) -> None:
        self._journal = journal
        self._session_id = session_id
        self._interval = interval
        self._lock = SessionLock(lock_dir, session_id) if lock_dir is not None else None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        # At once: the row's first heartbeat is then on the journal's clock, not ours.
        while True:
            try:
                self._journal.heartbeat(self._session_id)
            except Exception:  # the journal reports its own failures; the beat goes on
                log.debug("heartbeat failed", exc_info=True)
            if self._stopped.wait(self._interval):
                return

    def stop(self) -> None:
        self._stopped.set()
        if self._lock is not None:
            self._lock.release_name()


# -- deciding --


def earlier_run_gone(
    row: Any,
    *,
    here: str,
    now: float,
    stale_after: float,
    require_stale_heartbeat: bool,
    alive_since: float = 0.0,
    lock_released: bool = False,
) -> tuple[bool, str]:
    """Whether the supervisor and agent of `row` are gone, and if not, why it is left alone.
    `now` and `alive_since` are the journal's clock (`LivenessClock`): a heartbeat counts
    from `alive_since` at the earliest, since none could be written before it.
    `lock_released`: its supervisor's lock file on this machine is held by nobody."""
    beat = row.heartbeat_at if row.heartbeat_at is not None else row.started_at
    age = LivenessClock(now, alive_since).age(beat)
    stale = age >= stale_after
    since = (
        f", counted from the journal's return at {alive_since:.0f}" if alive_since > beat else ""
    )
    if require_stale_heartbeat and not stale:
        return False, f"its heartbeat is {age:.0f}s old{since} (stale after {stale_after:g}s)"
    if not row.host or row.host == here:
        if supervisor_alive(row.pid, row.started_at):
            return False, f"its supervisor (pid {row.pid}) still runs"
        if agent_alive(row.agent_pid, row.agent_started_at):
            return False, f"its agent (pid {row.agent_pid}) still runs"
        return True, ""
    if lock_released:
        return True, ""  # its supervisor's lock went with it (and its agent, PDEATHSIG)
    if not stale:
        return False, (
            f"it ran in another pid namespace or machine, its supervisor's lock is not known "
            f"released here, and its heartbeat is {age:.0f}s old{since} "
            f"(stale after {stale_after:g}s)"
        )
    return True, ""


@dataclass(frozen=True, slots=True)
class OwedEvent:
    """One owed event of a claimed session: its moment (`${TIMESTAMP}`) and the hooks still
    to send, in declaration order."""

    event: str
    timestamp: float
    hooks: tuple[Any, ...]


def owed_events(template: Any, row: Any, journaled: Iterable[Any]) -> list[OwedEvent]:
    """What recovery sends for a claimed session: for each owed event whose moment is fixed,
    the template's hooks of that event that the journal shows no execution of."""
    ran = _delivered(journaled, template)
    moments = {"pre-stop": row.pre_stop_at, "session-end": row.session_end_at}
    owed: list[OwedEvent] = []
    for event in RECOVERED_EVENTS:
        moment = moments[event]
        if moment is None:
            continue
        hooks = tuple(h for h in template.hooks_for(event) if (event, h.name) not in ran)
        owed.append(OwedEvent(event, moment, hooks))
    return owed


def owed_hooks(template: Any, row: Any, journaled: Iterable[Any]) -> list[Any]:
    """The hooks a claim of `row` may send, whether or not their moment is fixed yet: the
    template's pre-stop hooks (unless the session's session-end had begun without them) and
    session-end hooks that the journal shows no finished execution of."""
    ran = _delivered(journaled, template)
    pre_stop_owed = row.pre_stop_at is not None or row.session_end_at is None
    return [
        hook
        for event in RECOVERED_EVENTS
        if event != "pre-stop" or pre_stop_owed
        for hook in template.hooks_for(event)
        if (event, hook.name) not in ran
    ]


def _delivered(journaled: Iterable[Any], template: Any) -> set[tuple[str, str]]:
    """(event, hook) of each execution that settled its hook: one that delivered, or one the
    session itself ran to failure (kept for `replay`), unless the hook asks for a retry
    horizon. A row still running, and a failure during recovery, leave the hook owed."""
    horizon = {hook.name for hook in template.hooks if getattr(hook, "retry_horizon", None)}
    return {
        (e.event, e.hook)
        for e in journaled
        if e.outcome not in _UNDELIVERED
        or (e.outcome != RUNNING and not getattr(e, "recovered", False) and e.hook not in horizon)
    }


# -- doing --


@dataclass(frozen=True, slots=True)
class Recovery:
    """What one recovery of a claimed session did: the owed events, the hooks sent, and
    which of them did not deliver."""

    session_id: str
    agent_id: str
    owed: list[OwedEvent]
    fired: list[str]  # "event/hook" of each hook sent
    failed: tuple[str, ...] = ()  # "event/hook" of each hook sent that did not deliver
    gave_up: bool = False  # failed for RECOVERY_PASSES passes: marked recovered anyway


# Runs one hook for an event of a session, before a monotonic deadline (None: its own timeout).
RunHook = Callable[[Any, LifecycleEvent, SessionInfo, float | None], object]


def recover_session(
    journal: Journal,
    row: SessionRow,
    run_hook: RunHook,
    template: Any,
    metadata: Mapping[str, str],
    budget: float | None = None,
) -> Recovery:
    """Send the owed hooks of a session this caller claimed (each through `run_hook`, which
    journals it), then mark it recovered. `metadata` is what the hooks render with: the
    caller's operator-side metadata, never the row's unvouched one. Each owed event has
    `budget` seconds of its own (None: each hook its timeout)."""
    metadata = {**metadata, "SESSION_ID": row.session_id}
    journaled = journal.executions(session_id=row.session_id)
    owed = owed_events(template, row, journaled)
    info = SessionInfo(session_id=row.session_id, metadata=metadata)
    fired: list[str] = []
    failed: list[str] = []
    # When each failed hook may be given up: its event's moment plus its retry horizon.
    retried_until: list[float] = []
    for item in owed:
        event = LifecycleEvent(
            name=item.event,
            fields={
                "PHASE": "stopping" if item.event == "pre-stop" else "stopped",
                "RECOVERED": "true",
            },
            timestamp=item.timestamp,
            recovered=True,
        )
        deadline = None if budget is None else time.monotonic() + budget
        for hook in item.hooks:
            result = run_hook(hook, event, info, deadline)
            fired.append(f"{item.event}/{hook.name}")
            if getattr(result, "outcome", None) in _UNDELIVERED:
                failed.append(f"{item.event}/{hook.name}")
                retried_until.append(item.timestamp + (getattr(hook, "retry_horizon", 0) or 0))
    if not failed:
        journal.mark_recovered(row.session_id)
        return Recovery(row.session_id, row.agent_id, owed, fired)
    passes = _failed_passes(journaled, failed) + 1  # this pass's rows may not be read back yet
    if passes >= RECOVERY_PASSES and time.time() >= max(retried_until):
        log.error(
            "session %s: owed hooks %s failed in %d recovery passes; given up, marked"
            " recovered (see `history --session %s`)",
            _printable(row.session_id), ", ".join(failed), passes, _printable(row.session_id),
        )  # fmt: skip
        journal.mark_recovered(row.session_id)
        return Recovery(row.session_id, row.agent_id, owed, fired, tuple(failed), gave_up=True)
    log.warning(
        "session %s: owed hooks %s failed in recovery (pass %d; given up after %d passes%s);"
        " it stays owed for the next pass",
        _printable(row.session_id), ", ".join(failed), passes, RECOVERY_PASSES,
        _until(max(retried_until)),
    )  # fmt: skip
    journal.release_claim(row.session_id, row.claimed_by or claimer_name())
    return Recovery(row.session_id, row.agent_id, owed, fired, tuple(failed))


def _until(moment: float) -> str:
    """The clause naming when a retry horizon ends, while it is still to come; else ""."""
    if moment <= time.time():
        return ""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))
    return f" and once its retry horizon ends at {stamp}"


def _failed_passes(journaled: Iterable[Any], failed: Sequence[str]) -> int:
    """How many earlier recovery passes each of `failed` hooks failed in (the most of them)."""
    counts: dict[str, int] = {}
    for e in journaled:
        label = f"{e.event}/{e.hook}"
        if getattr(e, "recovered", False) and e.outcome in FAILED_OUTCOMES and label in failed:
            counts[label] = counts.get(label, 0) + 1
    return max(counts.values(), default=0)


def claimer_name() -> str:
    """Who claims: where pids mean something, this pid and its start time."""
    pid = os.getpid()
    return f"{socket.gethostname()} {pid} {process_start_time(pid)} {process_namespace()}"


def claimer_gone(claimed_by: str | None, here: str) -> bool:
    """Whether the recoverer that holds a claim is a process of this machine that is gone."""
    if not claimed_by:
        return False
    parts = claimed_by.split(" ", 3)
    if len(parts) != 4 or parts[3] != here:
        return False
    try:
        pid = int(parts[1])
        started = None if parts[2] == "None" else float(parts[2])
    except ValueError:
        return False
    return not agent_alive(pid, started)


def claim_vouched(
    journal: Any,
    row: SessionRow,
    key: bytes | None,
    here: str,
    *,
    require_seal: bool,
    now: float | None = None,
) -> tuple[SessionRow | None, str]:
    """Claim `row` for recovery if it can be vouched for: (the claimed row, "") when this
    caller won it; (None, why) when its seal is missing or wrong (with `key`, or always when
    `require_seal`); (None, "") when another recoverer has it. The claim re-seals the row with
    the moments it fixes, and what it returns is checked against that seal. `now`: the
    journal's clock (its lease is judged on it), else this machine's."""
    now = time.time() if now is None else now
    if key is None and not require_seal:
        return _claim(journal, row, here, now, None), ""
    why = unvouched(key, row)
    if why or key is None:  # without a key every row is refused, with its reason
        return None, why
    claimed = _claim(journal, row, here, now, seal(key, as_claimed(row, now)))
    if claimed is None:
        return None, ""  # another run or reconciler has it
    why = unvouched(key, claimed)
    if why:  # changed between its reading and the claim: it stays claimed, nothing is sent
        return None, why
    return claimed, ""


def _claim(
    journal: Any, row: SessionRow, here: str, now: float, new_seal: str | None
) -> SessionRow | None:
    steal = row.claimed_by if claimer_gone(row.claimed_by, here) else None
    claimed: SessionRow | None = journal.claim_session(
        row.session_id, claimer_name(), CLAIM_LEASE, now, steal_from=steal, seal=new_seal
    )
    return claimed


def recover_orphaned_sessions(
    journal: Any,
    agent_id: str,
    metadata: Mapping[str, str],
    run_hook: RunHook,
    template: Any,
    *,
    key: bytes | None = None,
    budget: float | None = None,
    stale_after: float = DEFAULT_STALE_AFTER,
    lock_dir: Path | None = None,
    failures: list[str] | None = None,
) -> list[str]:
    """The next `run`'s recovery of `agent_id`'s orphaned sessions, rendered from this run's
    template and `metadata` (never the rows'); with a journal `key`, only sessions whose
    rows are sealed under it. A session of another pid namespace is recovered at once when
    its supervisor's lock file in `lock_dir` is held by nobody. Each session left for later
    is logged with why. Returns the ids of the sessions whose owed hooks all delivered (or
    were given up); each owed hook that failed is appended to `failures`."""
    recovered: list[str] = []
    if journal is None:
        return recovered
    here = process_namespace()
    rows = journal.unfinished_sessions(agent_id)
    clock = journal.liveness_clock() if rows else None
    for row in rows:
        if clock is None:
            log.warning(
                "session %s of an earlier run left for later: the journal %s cannot tell its "
                "heartbeat's age now; `reconcile` or the next run recovers it",
                _printable(row.session_id), journal.path,
            )  # fmt: skip
            continue
        released = (
            lock_dir is not None
            and bool(row.host)
            and row.host != here
            and supervisor_lock_released(lock_dir, row.session_id)
        )
        gone, why = earlier_run_gone(
            row, here=here, now=clock.now, stale_after=stale_after,
            require_stale_heartbeat=False, alive_since=clock.alive_since,
            lock_released=released,
        )  # fmt: skip
        if not gone:
            log.warning(
                "session %s of an earlier run left for later: %s; `reconcile` or the next run "
                "recovers it once it is gone",
                _printable(row.session_id), why,
            )  # fmt: skip
            continue
        claimed, refused = claim_vouched(journal, row, key, here, require_seal=False, now=clock.now)
        if refused:
            log.warning(
                "session %s of an earlier run left alone, nothing sent: %s",
                _printable(row.session_id), refused,
            )  # fmt: skip
            continue
        if claimed is None:
            continue  # another run or reconciler has it
        log.warning("recovering session %s of an earlier run that was killed", row.session_id)
        done = recover_session(journal, claimed, run_hook, template, metadata, budget)
        if failures is not None:
            failures.extend(f"{row.session_id} {label}" for label in done.failed)
        if not done.failed or done.gave_up:
            recovered.append(row.session_id)
    return recovered


def template_digests(template: Any) -> tuple[str, ...]:
    """The sha256 of each of the template's files, parent first, as `session_fields`
    journals them: what tells which sessions ran it."""
    digests: list[str] = []
    for path in getattr(template, "files", ()) or ():
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            digests.append("")
            continue
        digests.append(hashlib.sha256(text.encode("utf-8")).hexdigest())
    return tuple(digests)


def other_template(row: Any, digests: Sequence[str]) -> str:
    """Why `row`'s session did not run the template whose files hash to `digests` ("" when
    it did). The journal's hashes only choose the sessions a named template recovers: the
    agent may have written them, so nothing else of its template is read."""
    journaled = tuple(str(entry.get("sha256", "")) for entry in row.templates or ())
    if journaled == tuple(digests):
        return ""
    named = [str(entry.get("path", "?")) for entry in row.templates or ()] or list(
        row.template_files or ()
    )
    shown = ", ".join("".join(c if c.isprintable() else "?" for c in p)[:300] for p in named[:8])
    return (
        f"it ran another template ({shown or 'none journaled'}); recover it with "
        "--template naming that one"
    )


def _printable(text: str) -> str:
    """`text` as a log line may show it: the journal's text is the agent's to write."""
    return "".join(c if c.isprintable() else "?" for c in text)[:200]
