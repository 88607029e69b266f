"""A script hook run as the agent's user (the default, `run_as: agent`) is started by root
stages first: `/bin/sh`, which joins the execution's cgroup, then `setpriv`, which drops to the
agent's user. `validate` lets an agent hook's `env:` hold a loader variable (it runs as the
agent, after all): `LD_PRELOAD` naming a library in the agent's workspace, say. Those root
stages must not see it, or the agent's library runs as uid 0.

The attack: a library the agent's user owns (so can rewrite at will) that leaves a marker
named for the uid it was loaded as; a real root `run --user nobody` whose post-start hook
(`run_as` left at its default) sets `LD_PRELOAD` to it. The hook itself, as the agent, may
load it (a marker of the agent's); no process may load it as root.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervisor.supervised import Workspace

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the supervisor as root"),
    pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the library"),
]

LIBRARY = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void loaded(void) {
    const char *dir = getenv("MARKERS");
    char path[4096];
    if (dir == NULL) return;
    snprintf(path, sizeof path, "%s/%s-%d", dir, geteuid() == 0 ? "root" : "agent", (int)getpid());
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);
}
"""


@pytest.fixture
def agent_dir() -> Iterator[Path]:
    """The agent's workspace: its user's, holding the library (which it may rewrite)."""
    path = Path(tempfile.mkdtemp(prefix="olh-agent-lib-"))
    nobody = pwd.getpwnam("nobody")
    source = path / "trace.c"
    source.write_text(LIBRARY)
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(path / "libtrace.so"), str(source)], check=True
    )
    for item in (path, path / "libtrace.so"):
        os.chown(item, nobody.pw_uid, nobody.pw_gid)
        item.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_an_agent_hooks_ld_preload_never_reaches_a_root_stage(
    workspace: Workspace, agent_dir: Path, markers: Path
) -> None:
    library = str(agent_dir / "libtrace.so")
    # A loader variable may hold a credential (git's http.extraHeader): it reaches the script
    # in its environment, never in an argv, which every user may read in /proc.
    header = "Authorization: Bearer canary-git-9d3e"
    env = {
        "LD_PRELOAD": library,
        "MARKERS": str(markers),
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.extraHeader",
        "GIT_CONFIG_VALUE_0": header,
    }
    hook = (
        "  - name: trace-tools\n"
        "    on: [post-start]\n"
        "    blocking: true\n"
        "    timeout: 20s\n"
        "    action:\n"
        "      type: script\n"
        '      command: ["/bin/sh", "-c", "env > \\"$MARKERS/env.txt\\""]\n'
        f"      env: {json.dumps(env)}\n"
    )
    template = workspace.template(hook)
    validated = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "validate", str(template)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert validated.returncode == 0, validated.stdout + validated.stderr  # an agent hook may

    run = workspace.start(template, ["/bin/true"], "--user", "nobody")
    assert run.wait(timeout=60) == 0, run.stderr

    script_env = dict(
        line.split("=", 1) for line in (markers / "env.txt").read_text().splitlines() if "=" in line
    )
    assert script_env["GIT_CONFIG_VALUE_0"] == header
    assert script_env["LD_PRELOAD"] == library
    assert "LIFECYCLE_HOOKS_AFTER_DROP" not in script_env
    loaded = sorted(path.name.split("-")[0] for path in markers.iterdir() if path.name != "env.txt")
    # The hook ran as the agent with its library (so the variable did reach it)...
    assert "agent" in loaded, (loaded, run.stderr)
    # ...and nothing loaded it as root: not the stage that joins the cgroup, not setpriv.
    assert "root" not in loaded, f"LD_PRELOAD of an agent hook was loaded as root: {loaded}"


def test_a_templates_ld_preload_for_the_agent_never_reaches_a_root_stage(
    workspace: Workspace, agent_dir: Path, markers: Path
) -> None:
    """The template's `env:` is the agent's environment too: the launcher that joins the
    agent's cgroup and drops to its user runs as root and must not load it."""
    library = str(agent_dir / "libtrace.so")
    template = workspace.template(
        "  - name: noop\n    on: [post-start]\n    action:\n      type: script\n"
        '      command: ["/bin/true"]\n',
        extra=f"env: {json.dumps({'LD_PRELOAD': library, 'MARKERS': str(markers)})}\n",
    )
    run = workspace.start(template, ["/bin/true"], "--user", "nobody")
    assert run.wait(timeout=60) == 0, run.stderr

    loaded = sorted(path.name.split("-")[0] for path in markers.iterdir())
    assert "agent" in loaded, (loaded, run.stderr)  # the agent has its library
    assert "root" not in loaded, f"the template's LD_PRELOAD was loaded as root: {loaded}"
