"""The journal key the tests' supervisors and reconcilers hold, and sealing a session row a
test wrote itself as a supervisor holding that key would have (journal/seal.py)."""

from __future__ import annotations

from pathlib import Path

from otel_lifecycle_hooks.journal import open_journal
from otel_lifecycle_hooks.journal.seal import seal
from otel_lifecycle_hooks.variables import JOURNAL_KEY_ENV as KEY_ENV

JOURNAL_KEY = "test-journal-key-5c0e9b7a3d1f"
# What a command's environment adds to hold the key.
WITH_KEY = {KEY_ENV: JOURNAL_KEY}


def seal_session(location: str | Path, session_id: str) -> None:
    """Seal the row of `session_id` (which must have begun post-start, or be given its start as
    post-start's moment) under `JOURNAL_KEY`."""
    journal = open_journal(location)
    try:
        row = journal.session(session_id)
        assert row is not None, session_id
        moment = row.post_start_at if row.post_start_at is not None else row.started_at
        sealed = seal(JOURNAL_KEY.encode(), row._replace(post_start_at=moment))
        journal.begin_event(session_id, "post-start", moment, sealed)
    finally:
        journal.close()
