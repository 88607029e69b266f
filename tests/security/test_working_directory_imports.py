"""`python -m otel_lifecycle_hooks run` puts its working directory first on `sys.path`; a root
supervisor's working directory may be the agent's workspace (docs/security.md says so of
script hooks). Whatever the supervisor imports after that moment (the journal's SQLite is
imported at its first use, once the agent has started) is then looked up in the agent's
directory before the standard library: a `sqlite3.py` the agent left there would run as root.

The attack: a workspace `nobody` owns, holding the agent's `sqlite3.py` (it leaves a marker
named for its uid, then loads the real module so that nothing else shows); a real root
`python -m otel_lifecycle_hooks run --user nobody` started in it. No marker of root's.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from tests.supervisor.supervised import Workspace

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to run the supervisor as root"
)

SHADOW = """
import os
with open(os.path.join({markers!r}, "uid-%d" % os.geteuid()), "w"):
    pass
"""


@pytest.fixture
def places(agent_dir: Path, markers: Path) -> dict[str, Path]:
    nobody = pwd.getpwnam("nobody")
    shadow = agent_dir / "sqlite3.py"
    shadow.write_text(SHADOW.format(markers=str(markers)))
    os.chown(shadow, nobody.pw_uid, nobody.pw_gid)
    return {"agent": agent_dir, "markers": markers}


def test_a_module_the_agent_left_in_the_working_directory_is_never_imported_as_root(
    workspace: Workspace, places: dict[str, Path]
) -> None:
    template = workspace.template(
        "  - name: noop\n    on: [post-start]\n    action:\n      type: script\n"
        '      command: ["/bin/true"]\n'
    )
    argv = [
        sys.executable, "-m", "otel_lifecycle_hooks", "run", "--agent-name", "test-agent",
        "--template", str(template), "--user", "nobody", "--", "/bin/true",
    ]  # fmt: skip
    done = subprocess.run(
        argv,
        cwd=places["agent"],
        env=workspace.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    imported = sorted(path.name for path in places["markers"].iterdir())
    assert "uid-0" not in imported, f"root imported the agent's sqlite3.py: {done.stderr}"
    assert done.returncode == 0, done.stderr
    assert workspace.journal.exists(), done.stderr  # the journal was opened: sqlite3 imported
