"""The journal `run` opens at its first use, not before the agent starts.

Nothing the journal holds decides whether the agent may start: its session row, crash
recovery of earlier runs, the heartbeat and retention come right after the agent's start
(supervisor/journaling.py), and a hook that runs before it (pre-start, a phase change) opens the
journal when it records its execution. What the agent's start no longer waits for: SQLite's
import, the package's journal modules and the file's opening (about 3 ms of each `run`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..journal.base import Journal


class DeferredJournal:
    """Stands for the journal at `explicit` (`--journal`, a URL or any path; None: the
    environment's or the default location): every attribute is the opened journal's, opened
    once, by whichever thread asks first."""

    def __init__(
        self, explicit: str | bytes | os.PathLike[str] | None, environ: Mapping[str, str]
    ) -> None:
        if explicit is not None and not isinstance(explicit, str):
            # Text may be a URL (postgresql://, sqlite:///); any other path is a SQLite file's.
            explicit = Path(os.fsdecode(explicit))
        self._explicit: str | Path | None = explicit or None
        self._environ = environ
        self._journal: Journal | None = None
        self._lock = threading.Lock()

    def opened(self) -> Journal:
        """The journal, opened now if it was not yet."""
        journal = self._journal
        if journal is None:
            with self._lock:
                journal = self._journal
                if journal is None:
                    # At first use, after the agent's start: the journal's modules and SQLite
                    # are about 6 ms (-X importtime) that `run`'s spawn does not wait for.
                    from ..journal import journal_location, open_journal

                    location = journal_location(self._explicit, self._environ)
                    journal = self._journal = open_journal(location)
        return journal

    @property
    def is_open(self) -> bool:
        return self._journal is not None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # probes for special methods (copy, pickle) open nothing
            raise AttributeError(name)
        return getattr(self.opened(), name)

    def close(self) -> None:
        """Close the journal, if it was opened."""
        with self._lock:
            journal = self._journal
        if journal is not None:
            journal.close()
