"""The root supervisor's own state under a `$HOME` the agent can write.

docs/security.md lets the hook log sit in a directory the agent can write (its `$HOME`); the
supervisor's other state defaults to the same home: the `status` file
(`~/.local/state/otel-lifecycle-hooks/running/<pid>.json`) and the local trace files
(`~/.local/state/otel-lifecycle-hooks/traces/`). Root makes those directories (in the agent's
home), and writes the files by path. The agent, which knows the supervisor's pid (its parent),
renames the root-made `.local` away, makes its own in its place, and plants links: at the
status file's temporary name to a root-only file, and at `traces` to a root-only directory.

The privilege rule says the supervisor never follows a path in a directory the agent can
write: the root-only file keeps its text, and nothing appears in the root-only directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervisor.supervised import Workspace, wait_until

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to run the supervisor as root"
)

SYSTEM_PYTHON = "/usr/bin/python3"
CANARY = "root's own text\n"

# The agent, as nobody: argv home, victim file, victim directory, done file.
AGENT = r"""
import os, sys
home, victim, victim_dir, done = sys.argv[1:5]
state = os.path.join(home, ".local", "state", "otel-lifecycle-hooks")
supervisor = os.getppid()
# What root made in our home before we started (its status file is written from the first
# phase on): the home is ours, so the name is ours to move.
# Root may make them again meanwhile (its status is written as its phases change): move each
# away again until ours stand.
for attempt in range(1000):
    try:
        if os.path.lexists(os.path.join(home, ".local")):
            os.rename(os.path.join(home, ".local"), os.path.join(home, f".local-root-{attempt}"))
        os.makedirs(os.path.join(state, "running"))
        os.symlink(victim, os.path.join(state, "running", f"{supervisor}.tmp"))
        os.symlink(victim_dir, os.path.join(state, "traces"))
        break
    except FileExistsError:
        continue
else:
    sys.exit("could not plant the links")
open(done, "w").close()
"""


@pytest.fixture
def places() -> Iterator[dict[str, Path]]:
    """The agent's home and program (nobody's), a root-only directory with a root-only file,
    and a directory where the agent says it is done."""
    nobody = pwd.getpwnam("nobody")
    agent_side = Path(tempfile.mkdtemp(prefix="olh-agent-home-"))
    home = agent_side / "home"
    home.mkdir()
    (agent_side / "agent.py").write_text(AGENT)
    for path in (agent_side, home, agent_side / "agent.py"):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
        path.chmod(0o755)
    root_only = Path(tempfile.mkdtemp(prefix="olh-root-only-"))
    victim = root_only / "secret"
    victim.write_text(CANARY)
    victim.chmod(0o600)
    victim_dir = root_only / "private"
    victim_dir.mkdir(mode=0o700)
    yield {
        "home": home,
        "agent": agent_side / "agent.py",
        "victim": victim,
        "victim_dir": victim_dir,
        "done": agent_side / "done",
    }
    shutil.rmtree(agent_side, ignore_errors=True)
    shutil.rmtree(root_only, ignore_errors=True)


def test_links_the_agent_plants_under_its_home_are_never_followed_by_root(
    workspace: Workspace, places: dict[str, Path]
) -> None:
    template = workspace.template(
        "  - name: noop\n    on: [post-start]\n    action:\n      type: script\n"
        '      command: ["/bin/true"]\n'
    )
    command = [
        SYSTEM_PYTHON, str(places["agent"]), str(places["home"]), str(places["victim"]),
        str(places["victim_dir"]), str(places["done"]),
    ]  # fmt: skip
    # The supervisor's HOME is the agent's (the hook log stays in the workspace); its trace
    # directory is the default one under that home.
    run = workspace.start(
        template,
        command,
        "--user",
        "nobody",
        env={"HOME": str(places["home"]), "OTEL_LIFECYCLE_HOOKS_TRACE_DIR": ""},
    )
    assert run.wait(timeout=60) == 0, run.stderr
    wait_until(places["done"].exists, what="the agent to plant its links")  # it did plant them

    victim = places["victim"].stat()
    written = {
        "the status file's link": places["victim"].read_text() != CANARY
        or (victim.st_uid, victim.st_mode & 0o777) != (0, 0o600),
        "the trace directory's link": any(places["victim_dir"].iterdir()),
    }
    assert not any(written.values()), f"root wrote through the agent's links: {written}"


def test_a_link_on_the_way_to_the_hook_log_is_never_followed_by_root(
    workspace: Workspace, places: dict[str, Path]
) -> None:
    """The hook log under the agent's home, one folder down: the agent (an earlier session
    of it) made that folder a link to a root-only directory."""
    nobody = pwd.getpwnam("nobody")
    logs = places["home"] / "logs"
    logs.symlink_to(places["victim_dir"])
    os.lchown(logs, nobody.pw_uid, nobody.pw_gid)
    template = workspace.template(
        "  - name: noop\n    on: [post-start]\n    action:\n      type: script\n"
        '      command: ["/bin/echo", "a line for the hook log"]\n'
    )
    run = workspace.start(
        template,
        ["/bin/true"],
        "--user",
        "nobody",
        env={"OTEL_LIFECYCLE_HOOKS_LOG": str(logs / "agent.log")},
    )
    assert run.wait(timeout=60) == 0, run.stderr

    assert list(places["victim_dir"].iterdir()) == [], "root wrote the hook log through a link"


def test_the_journal_under_the_agents_home_never_writes_through_a_planted_link(
    workspace: Workspace, places: dict[str, Path]
) -> None:
    """The journal at its default place in that home: the agent (an earlier session of it)
    made the journal's folder its own, the journal's name a link to a file root alone could
    make (in a root-only directory: /etc/ld.so.preload, say, whose whitespace-separated words
    the loader preloads into every program, root's included, and a SQLite file holds the
    agent's text verbatim). `run` warns that the agent can replace the journal; root must
    still make nothing there."""
    nobody = pwd.getpwnam("nobody")
    folder = places["home"] / ".local" / "state" / "otel-lifecycle-hooks"
    folder.mkdir(parents=True)
    made_by_root = places["victim_dir"] / "ld.so.preload"
    (folder / "journal.sqlite3").symlink_to(made_by_root)
    for path in (folder, *folder.parents, *folder.iterdir()):
        if path == places["home"].parent:
            break
        os.lchown(path, nobody.pw_uid, nobody.pw_gid)
    template = workspace.template(
        "  - name: noop\n    on: [post-start]\n    action:\n      type: script\n"
        '      command: ["/bin/true"]\n'
    )
    run = workspace.start(
        template,
        ["/bin/true"],
        "--user",
        "nobody",
        env={"HOME": str(places["home"]), "OTEL_LIFECYCLE_HOOKS_JOURNAL": ""},
    )
    run.wait(timeout=60)

    assert not made_by_root.exists(), (
        f"root made its journal through the agent's link: {run.stderr}"
    )
    assert list(places["victim_dir"].iterdir()) == []
