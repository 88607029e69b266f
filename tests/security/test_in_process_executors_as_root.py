"""the-loop's in-process Python executors (seed 002, `path:`) run inside the supervisor: as
root, when the supervisor is root. The ownership guard "applies to anything that would run as
uid 0"; an executor file the agent's user can write is the agent's code.

The attack: the operator's the-loop file (root's, in root's directory) names a policy in the
agent's workspace (a directory `nobody` owns, the file `nobody`'s: the agent may rewrite it).
A real root `run --user nobody`; the policy, if imported, leaves a marker named for its uid.
No marker of root's may appear.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from tests.supervisor.supervised import Workspace

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to run the supervisor as root"
)

POLICY = """
import os

with open(os.path.join({markers!r}, "uid-%d" % os.geteuid()), "w"):
    pass


class HousePolicy:
    def session_spawn(self, context):
        return None
"""


@pytest.fixture
def places(agent_dir: Path, markers: Path) -> dict[str, Path]:
    nobody = pwd.getpwnam("nobody")
    policy = agent_dir / "policy.py"
    policy.write_text(POLICY.format(markers=str(markers)))
    os.chown(policy, nobody.pw_uid, nobody.pw_gid)
    return {"policy": policy, "markers": markers}


def test_an_executor_file_the_agent_can_write_is_never_imported_as_root(
    workspace: Workspace, places: dict[str, Path]
) -> None:
    config = workspace.root / "the-loop.yaml"
    config.write_text(
        f"hooks:\n  - name: house-policy\n    path: {places['policy']}\n    on: [session_spawn]\n"
    )
    run = workspace.start(config, ["/bin/true"], "--user", "nobody")
    run.wait(timeout=60)

    imported = sorted(path.name for path in places["markers"].iterdir())
    assert "uid-0" not in imported, f"root imported the agent's executor file: {run.stderr}"
    # The hook did fire: it was refused, saying why.
    assert "refusing to load it" in workspace.hook_log.read_text(), run.stderr
