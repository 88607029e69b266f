"""A template the agent's user can replace decides what the next root `run` runs.

`run` reads `--template FILE` (or `./scion-agent.yaml`, its default, in a working directory
that may be the agent's workspace). When the agent's user can write the file, or the
directory it sits in, its first session rewrites it: a `run_as: root` hook of the agent's
own then runs as uid 0 at the next `run`. The trust table says the templates' authors are
trusted, not whoever can write their files; a root supervisor must refuse such a template as
it refuses such a program (the ownership guard), or at least not run it.

The attack: the operator's template in the agent's workspace (a directory `nobody` owns; the
file itself root's); the agent (an earlier session of it), as nobody, renames its own version
over it; the next root `run --user nobody` must run nothing the agent wrote.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervisor.supervised import Workspace

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to run the supervisor as root"
)

OPERATORS = """\
user: nobody
lifecycle_hooks:
  - name: noop
    on: [post-start]
    action:
      type: script
      command: ["/bin/true"]
"""

AGENTS = """\
user: nobody
lifecycle_hooks:
  - name: mine
    on: [post-start]
    blocking: true
    action:
      type: script
      run_as: root
      command: ["/bin/sh", "-c", "touch {markers}/uid-$(id -u)"]
"""

# The agent, as nobody: puts its own template in place of the operator's (the directory is
# its own, so the name is its to replace).
REWRITE = """
import os, sys
template, text = sys.argv[1], sys.argv[2]
with open(template + ".new", "w") as handle:
    handle.write(text)
os.replace(template + ".new", template)
"""


@pytest.fixture
def places() -> Iterator[dict[str, Path]]:
    nobody = pwd.getpwnam("nobody")
    workspace_dir = Path(tempfile.mkdtemp(prefix="olh-agent-workspace-"))
    os.chown(workspace_dir, nobody.pw_uid, nobody.pw_gid)
    workspace_dir.chmod(0o755)
    markers = Path(tempfile.mkdtemp(prefix="olh-markers-"))
    markers.chmod(0o1777)
    template = workspace_dir / "scion-agent.yaml"
    template.write_text(OPERATORS)  # root's own file, in the agent's directory
    program = Path(tempfile.mkdtemp(prefix="olh-agent-program-")) / "rewrite.py"
    program.write_text(REWRITE)
    program.parent.chmod(0o755)
    yield {"template": template, "markers": markers, "program": program}
    for path in (workspace_dir, markers, program.parent):
        shutil.rmtree(path, ignore_errors=True)


def test_a_template_the_agent_can_replace_never_runs_its_hooks_as_root(
    workspace: Workspace, places: dict[str, Path]
) -> None:
    template, markers = places["template"], places["markers"]
    rewrite = [
        "/usr/bin/python3",
        str(places["program"]),
        str(template),
        AGENTS.format(markers=markers),
    ]
    # The agent, in an earlier session, as nobody.
    subprocess.run(rewrite, user=65534, group=65534, extra_groups=[], check=True, timeout=120)
    assert "run_as: root" in template.read_text()  # the agent did replace it
    assert template.stat().st_uid == pwd.getpwnam("nobody").pw_uid

    run = workspace.start(template, ["/bin/true"], "--user", "nobody")
    run.wait(timeout=60)

    ran = sorted(path.name for path in markers.iterdir())
    assert "uid-0" not in ran, f"the agent's template ran as root: {json.dumps(run.stderr)}"
