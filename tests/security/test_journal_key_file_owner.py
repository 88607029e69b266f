"""A journal key the agent holds seals nothing: the key file must be the supervisor's own.

`LIFECYCLE_HOOKS_JOURNAL_KEY_FILE` is checked to be a regular file of mode 0600 or 0400,
opened without following a link; its owner was not checked. A key file the agent's user owns
(it may read it, and write a key of its own choosing) would let the agent seal a forged row
that `reconcile` then vouches for. A real root `run --user nobody` given such a file must
refuse the key (saying so) and leave its session row unsealed.
"""

from __future__ import annotations

import os
import pwd
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervisor.supervised import Workspace

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to run the supervisor as root"
)


@pytest.fixture
def agents_key() -> Iterator[Path]:
    nobody = pwd.getpwnam("nobody")
    folder = Path(tempfile.mkdtemp(prefix="olh-agent-key-"))
    key = folder / "journal.key"
    key.write_text("a-key-the-agent-chose-0123456789\n")
    key.chmod(0o600)
    for path in (folder, key):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    yield key
    shutil.rmtree(folder, ignore_errors=True)


def test_a_key_file_the_agent_owns_seals_nothing(workspace: Workspace, agents_key: Path) -> None:
    template = workspace.template(
        "  - name: noop\n    on: [post-start]\n    action:\n      type: script\n"
        '      command: ["/bin/true"]\n'
    )
    env = {"LIFECYCLE_HOOKS_JOURNAL_KEY": "", "LIFECYCLE_HOOKS_JOURNAL_KEY_FILE": str(agents_key)}
    run = workspace.start(template, ["/bin/true"], "--user", "nobody", env=env)
    assert run.wait(timeout=60) == 0, run.stderr

    with sqlite3.connect(workspace.journal) as db:
        seals = [row[0] for row in db.execute("SELECT seal FROM sessions")]
    assert seals and not any(seals), f"sealed under the agent's key: {seals}; {run.stderr}"
    assert str(agents_key) in run.stderr
