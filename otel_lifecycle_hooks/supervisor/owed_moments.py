"""The moments of a session's owed events (post-start, pre-stop, session-end), journaled before
any of their hooks is sent. A moment is its hooks' ${TIMESTAMP}, from which their
X-Scion-Hook-IDs derive, so that a recoverer that sends them again (recovery.py) sends the same
ids. With a journal key, each moment extends the seal of the session's row (journal/seal.py).

Two cases keep a moment other than now: a recoverer that claimed the session while this
supervisor was taken for dead fixed it first (the journal keeps the first), and a journal that
did not take it (a full disk) makes a later claim derive it (journal.rows.unjournaled_moments).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ..engine.session import AgentSession
from ..journal.rows import SessionRow, unjournaled_moments
from ..journal.seal import JournalKeyError, journal_key, seal
from ..variables import JOURNAL_KEY_ENV, JOURNAL_KEY_FILE_ENV
from .deferred import DeferredJournal
from .recovery import registration_wait

if TYPE_CHECKING:
    from typing import TypeAlias

    from ..journal.base import Journal

    # What the engine journals to: a backend, or the stand-in that opens it at first use.
    JournalLike: TypeAlias = Journal

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

T = TypeVar("T")

# The session row's column holding the moment a claim fixes, by owed event.
_CLAIMED_COLUMNS = {"pre-stop": "pre_stop_at", "session-end": "session_end_at"}


def _with_first_moment(row: SessionRow, event: str, moment: float) -> SessionRow:
    """`row` with `moment` as `event`'s, unless it holds one (the journal keeps the first)."""
    if event == "post-start":
        return row if row.post_start_at is not None else row._replace(post_start_at=moment)
    if event == "pre-stop":
        return row if row.pre_stop_at is not None else row._replace(pre_stop_at=moment)
    return row if row.session_end_at is not None else row._replace(session_end_at=moment)


def journal_call(
    journal: JournalLike | None, method: str, call: Callable[[JournalLike], T]
) -> T | None:
    """`call(journal)` (the journal's `method`); None without a journal, and a failure logged,
    never raised: the journal is a record, not a dependency."""
    if journal is None:
        return None
    try:
        return call(journal)
    except Exception:
        log.exception("journal %s failed", method)
        return None


def journal_losses(journal: JournalLike | None, recovery_failed: int = 0) -> dict[str, int]:
    """`journal`'s loss counts (none until it is opened) and the owed hooks of earlier runs
    that failed in recovery: what `agent.lifecycle.journal.losses` reports."""
    counts: dict[str, int] = {}
    opened = not isinstance(journal, DeferredJournal) or journal.is_open
    if journal is not None and opened:
        counts.update(journal.stats())
    counts["recovery_failed"] = recovery_failed
    return counts


def read_journal_key(environ: Mapping[str, str]) -> bytes | None:
    """The journal key (journal/seal.py); a key setting that cannot be used is reported and
    the session's row left unsealed (no recoverer will act on it)."""
    if not (environ.get(JOURNAL_KEY_ENV) or environ.get(JOURNAL_KEY_FILE_ENV)):
        return None
    try:
        return journal_key(environ)
    except JournalKeyError as exc:
        log.error("%s; this session's row is not sealed, so it will not be recovered", exc)
        return None


class OwedMoments:
    """Each owed event's moment, as the journal keeps it, and the row's seal that covers it."""

    def __init__(
        self,
        journal: JournalLike | None,
        session: AgentSession,
        environ: Mapping[str, str],
    ) -> None:
        self._journal = journal
        self._session = session
        self._environ = environ
        # The key this run seals its session row with (read with the row, after the agent's
        # start), and the row as this run wrote it: the seal is computed from what the run
        # knows, never from what it reads back.
        self._key: bytes | None = None
        self._sealed_row: SessionRow | None = None
        # This session's row as read at its first of pre-stop and session-end, when a
        # recoverer had claimed it; see _claimed_moment.
        self._claim_read = False
        self._claimed_row: SessionRow | None = None
        # The owed events' moments the journal took, by event (see _unjournaled_moment).
        self._journaled: dict[str, float] = {}
        # What the journal could not make durable in time (reported in the run's summary).
        self.durability_notes: list[str] = []

    @property
    def key(self) -> bytes | None:
        """The journal key, once the session's row was sealed with it."""
        return self._key

    def seal_row(self, key: bytes | None, row: dict[str, Any]) -> None:
        """Seal the session's new `row` (its "seal") with `key`, when there is one."""
        self._key = key
        if key is None:
            return
        self._sealed_row = SessionRow(
            session_id=row["session_id"],
            agent_id=row["agent_id"],
            agent_name=row["agent_name"],
            template_files=tuple(row["template_files"]),
            pid=row["pid"],
            started_at=row["started_at"],
            templates=tuple(row["templates"]),
            metadata=row["metadata"],
            variables=row["variables"],
            host=row["host"],
        )
        row["seal"] = seal(key, self._sealed_row)

    def begin(self, event: str, moment: float) -> float:
        """The moment owed `event` begins (`moment`, unless a claim fixed another), journaled
        with the row's new seal before any of its hooks is sent; the moments recovery would
        derive from it are kept from later events."""
        info = self._session.info
        moment = self._claimed_moment(event, moment)
        sealed_before = self._sealed_row
        sealed = self._seal_moment(event, moment)
        session_id = self._session.session_id
        if event == "post-start":
            kept = self._begin_registration(moment, sealed)
        else:
            kept = journal_call(
                self._journal,
                "begin_event",
                lambda journal: journal.begin_event(session_id, event, moment, sealed),
            )
        if self._journal is not None and not kept:
            # Not journaled (a full disk): the moment a recoverer's claim will fix instead,
            # so that what it sends later carries the ids sent now.
            self._sealed_row = sealed_before
            return info.keep_moment(self._unjournaled_moment(event, moment))
        self._journaled[event] = moment
        # The moments recovery would derive from this one (journal.rows.unjournaled_moments:
        # a microsecond on for pre-stop, two for session-end) go to no other event.
        reserved = 0.000002 if event == "post-start" else 0.000001
        info.keep_moment(moment + reserved)
        return moment

    def _seal_moment(self, event: str, moment: float) -> str | None:
        """The session row's seal once `event` began at `moment` (None: this run seals not)."""
        if self._key is None or self._sealed_row is None:
            return None

        self._sealed_row = _with_first_moment(self._sealed_row, event, moment)
        return seal(self._key, self._sealed_row)

    def _unjournaled_moment(self, event: str, moment: float) -> float:
        """The moment of owed `event` when it could not be journaled: the one a claim fixes
        from the row (journal.rows.unjournaled_moments), which holds this run's journaled
        post-start and pre-stop moments. Post-start's own is `moment`: a session whose row
        lacks it is never recovered."""
        post_start = self._journaled.get("post-start")
        if event not in _CLAIMED_COLUMNS or post_start is None:
            return moment
        pre_stop, session_end = unjournaled_moments(
            post_start, self._journaled.get("pre-stop"), moment
        )
        log.warning(
            "the journal did not take the moment %s began: its hooks carry the moment "
            "recovery would fix for it, so that a recovered delivery keeps their ids", event,
        )  # fmt: skip
        return pre_stop if event == "pre-stop" else session_end

    def _claimed_moment(self, event: str, moment: float) -> float:
        """The moment a recoverer's claim fixed for `event` (pre-stop, session-end) while this
        supervisor was taken for dead (a frozen node, a long SIGSTOP), else `moment`: the
        journal keeps the first moment, and the hooks must carry the X-Scion-Hook-ID it gives,
        the one the recoverer sent. Read once, when the first of those events begins."""
        column = _CLAIMED_COLUMNS.get(event)
        if column is None or self._journal is None:
            return moment
        if not self._claim_read:
            self._claim_read = True
            session_id = self._session.session_id
            row = journal_call(
                self._journal, "session", lambda journal: journal.session(session_id)
            )
            if row is not None and row.claimed_by:
                self._claimed_row = row
                if self._sealed_row is not None:
                    # The claim re-sealed the row with both moments: this run's seals cover
                    # them too.
                    self._sealed_row = self._sealed_row._replace(
                        pre_stop_at=self._sealed_row.pre_stop_at or row.pre_stop_at,
                        session_end_at=self._sealed_row.session_end_at or row.session_end_at,
                    )
        if self._claimed_row is None:
            return moment
        claimed: float | None = getattr(self._claimed_row, column)
        if claimed is None:
            return moment
        log.warning(
            "session %s was claimed for recovery by %s while this supervisor was taken for "
            "dead: its %s hooks keep the moment the claim fixed (%s), and so their ids",
            self._session.session_id, self._claimed_row.claimed_by, event, claimed,
        )  # fmt: skip
        return self._session.info.keep_moment(claimed)

    def _begin_registration(self, moment: float, sealed: str | None) -> bool | None:
        """post-start's moment, and the session row before it, reach the journal before its
        hooks (a registration) are sent, so that a reconciler can find the session: waited
        for up to $LIFECYCLE_HOOKS_REGISTRATION_WAIT even while a shared database refuses.
        Past that the hooks go, and the row kept only on this disk is counted and reported.
        What begin_event returns: whether the moment is the journal's."""
        session_id = self._session.session_id
        wait = registration_wait(self._environ)
        unconfirmed = journal_losses(self._journal).get("unconfirmed", 0)
        kept: bool | None = journal_call(
            self._journal,
            "begin_event",
            lambda journal: journal.begin_event(
                session_id, "post-start", moment, sealed, wait=wait
            ),
        )
        if journal_losses(self._journal).get("unconfirmed", 0) > unconfirmed:
            self.durability_notes.append(
                f"session {session_id}'s row was not in the journal when post-start's hooks"
                f" were sent (waited {wait:g}s); it is kept in the local spill file"
            )
        return kept
