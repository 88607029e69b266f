"""A session row's seal (journal/seal.py): an HMAC under the journal key over what recovery acts
on. A right seal vouches for a row; any edit of what it covers, an older seal of the same row,
another key, a row without one (written before version 4, or by the agent) and a recoverer
without the key are each refused with the reason, naming the setting."""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest

from otel_lifecycle_hooks.journal import Journal
from otel_lifecycle_hooks.journal.rows import SessionRow, as_claimed, unjournaled_moments
from otel_lifecycle_hooks.journal.seal import JournalKeyError, journal_key, seal, unvouched

KEY = b"a-journal-key-of-enough-bytes"
STARTED = 1_700_000_000.25


def genuine(journal: Journal, key: bytes = KEY) -> SessionRow:
    """A session row as a supervisor holding `key` writes it: opened sealed, then post-start
    begun with the seal extended to its moment."""
    row = SessionRow(
        session_id="s1", agent_id="a1", agent_name="agent", template_files=("/t.yaml",),
        pid=41, started_at=STARTED, templates=({"path": "/t.yaml", "sha256": "ab" * 32},),
        metadata={"AGENT_SLUG": "agent", "GROVE_NAME": "grove"}, variables={"REGION": "eu"},
        host="boot/ns",
    )  # fmt: skip
    journal.open_session(
        row.session_id, agent_id=row.agent_id, agent_name=row.agent_name,
        template_files=row.template_files, pid=row.pid, started_at=row.started_at,
        templates=row.templates, metadata=row.metadata, variables=row.variables, host=row.host,
        seal=seal(key, row),
    )  # fmt: skip
    begun = row._replace(post_start_at=STARTED + 1.5)
    journal.begin_event("s1", "post-start", STARTED + 1.5, seal(key, begun))
    stored = journal.session("s1")
    assert stored is not None
    return stored


def edit(path: Path, sql: str, *values: object) -> None:
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(sql, values)


def read(path: Path) -> SessionRow:
    """The journal's one session row."""
    with closing(Journal(path)) as journal:
        (row,) = journal.sessions()
    return row


def test_a_row_its_supervisor_sealed_is_vouched_for_after_the_database(tmp_path: Path) -> None:
    with closing(Journal(tmp_path / "j.sqlite3")) as journal:
        row = genuine(journal)
    assert row.seal and unvouched(KEY, row) == ""


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("metadata", '{"AGENT_SLUG": "victim", "GROVE_NAME": "grove"}'),
        ("variables", '{"REGION": "forged"}'),
        ("agent_id", "another-agent"),
        ("session_id", "s2"),
        ("templates", '[{"path": "/t.yaml", "sha256": "' + "cd" * 32 + '"}]'),
        ("post_start_at", STARTED + 99),
        ("pre_stop_at", STARTED + 5),
        ("host", ""),
    ],
)
def test_an_edit_of_what_the_seal_covers_is_refused(
    tmp_path: Path, column: str, value: object
) -> None:
    path = tmp_path / "j.sqlite3"
    with closing(Journal(path)) as journal:
        genuine(journal)
    edit(path, f"UPDATE sessions SET {column} = ?", value)

    assert "does not match" in unvouched(KEY, read(path))


def test_an_older_seal_of_the_same_row_is_refused_once_a_moment_was_added(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    with closing(Journal(path)) as journal:
        old_seal = genuine(journal).seal
        moved = read(path)._replace(pre_stop_at=STARTED + 7)
        journal.begin_event("s1", "pre-stop", STARTED + 7, seal(KEY, moved))
    assert unvouched(KEY, read(path)) == ""
    # The agent puts back the seal it saw before pre-stop began, and takes pre-stop's moment
    # out (to have pre-stop sent again with an id of a later claim's choosing): refused.
    edit(path, "UPDATE sessions SET seal = ?, pre_stop_at = NULL", "forged" + str(old_seal))
    assert "does not match" in unvouched(KEY, read(path))
    edit(path, "UPDATE sessions SET seal = ?", old_seal)
    assert unvouched(KEY, read(path)) == ""  # its exact earlier state: documented, same ids


def test_another_key_no_seal_and_no_key_are_each_refused_naming_the_setting(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.sqlite3"
    with closing(Journal(path)) as journal:
        row = genuine(journal)
        journal.open_session("unsealed", agent_id="a1", started_at=STARTED)
        unsealed = journal.session("unsealed")  # as the agent, or a version-3 journal, wrote
    assert unsealed is not None and unsealed.seal is None

    assert "does not match" in unvouched(b"another-key-of-enough-bytes", row)
    assert "not sealed" in unvouched(KEY, unsealed)
    assert "LIFECYCLE_HOOKS_JOURNAL_KEY" in unvouched(KEY, unsealed)
    assert "LIFECYCLE_HOOKS_JOURNAL_KEY" in unvouched(None, row)


def test_a_claim_seals_the_moments_it_fixes_in_the_same_statement(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    with closing(Journal(path)) as journal:
        row = genuine(journal)
        now = time.time()
        claimed = journal.claim_session(
            "s1", "me", 300.0, now, seal=seal(KEY, as_claimed(row, now))
        )
    # The moments the claim's SQL fixed are the very doubles a supervisor that could not
    # journal its own would take (and the claimer sealed).
    assert claimed is not None
    fixed = unjournaled_moments(row.post_start_at, None, now)
    assert (claimed.pre_stop_at, claimed.session_end_at) == fixed
    assert unvouched(KEY, claimed) == "" and unvouched(KEY, read(path)) == ""


def test_the_key_comes_from_the_variable_or_an_owner_only_file(tmp_path: Path) -> None:
    assert journal_key({}) is None
    assert journal_key({"LIFECYCLE_HOOKS_JOURNAL_KEY": KEY.decode()}) == KEY
    with pytest.raises(JournalKeyError, match="at least 16 bytes"):
        journal_key({"LIFECYCLE_HOOKS_JOURNAL_KEY": "short"})
    key_file = tmp_path / "journal.key"
    key_file.write_bytes(KEY + b"\n")
    key_file.chmod(0o600)
    assert journal_key({"LIFECYCLE_HOOKS_JOURNAL_KEY_FILE": str(key_file)}) == KEY
    key_file.chmod(0o644)
    with pytest.raises(JournalKeyError, match="readable by its owner only"):
        journal_key({"LIFECYCLE_HOOKS_JOURNAL_KEY_FILE": str(key_file)})
    link = tmp_path / "link.key"
    os.symlink(key_file, link)
    with pytest.raises(JournalKeyError, match="cannot open"):
        journal_key({"LIFECYCLE_HOOKS_JOURNAL_KEY_FILE": str(link)})
