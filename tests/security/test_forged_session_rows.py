"""A session row the agent forges never sends a request the operator's template did not decide.

The deployment of seed 000: the supervisor runs as root, the agent as `nobody`. The journal is
the agent's to write wherever it can reach it: a SQLite file in a directory the agent owns (it
moves the supervisor's file aside and writes its own), or a PostgreSQL journal whose URL the
agent inherited from the supervisor's environment. The agent forges an unfinished session of
its own agent id whose metadata names another agent (slug, name, grove) and whose variables
carry its text; the operator's template deregisters `DELETE /services/${AGENT_SLUG}` with the
operator's bearer token. Neither the next `run`'s start-up recovery nor `reconcile` may send a
request for the forged session: they act only on rows sealed with the journal key
(LIFECYCLE_HOOKS_JOURNAL_KEY), which the agent never gets, and render from the operator's own
metadata. A genuine session, killed, is still recovered exactly once.

Everything is real: `run` as root with `--user nobody`, the agent's own programs (the system
Python's sqlite3, psql), `reconcile` as a subprocess, the registry on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from otel_lifecycle_hooks.journal import Journal, open_journal
from otel_lifecycle_hooks.journal.schema import SCHEMA_VERSION, statements
from tests.fleet.conftest import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.target_server import TargetServer

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: the supervisor runs as root, the agent as nobody"
)

TOKEN = "tok-registry-5e1d7c9a3b"
KEY = "journal-key-0f6a2d8e4c1b9735"
FORGED = "f0f0f0f0-0000-4000-8000-00000000f0f0"
VICTIM = {"AGENT_SLUG": "victim-agent", "AGENT_NAME": "victim", "GROVE_NAME": "victims-grove"}
SYSTEM_PYTHON = "/usr/bin/python3"  # the agent's own interpreter: nobody cannot reach the venv

HOOKS = """\
  - name: deregister
    on: [pre-stop]
    blocking: true
    timeout: 10s
    action:
      type: http
      method: DELETE
      url: "{base}/services/${{AGENT_SLUG}}"
      auth: {{type: bearer-token, token_env: REGISTRY_TOKEN}}
      body: '{{"grove": "${{GROVE_NAME}}", "name": "${{AGENT_NAME}}", "note": "${{NOTE}}",
        "session": "${{SESSION_ID}}"}}'
  - name: farewell
    on: [session-end]
    timeout: 10s
    action:
      type: http
      method: POST
      url: "{base}/farewell/${{AGENT_SLUG}}"
      auth: {{type: bearer-token, token_env: REGISTRY_TOKEN}}
      body: '{{"grove": "${{GROVE_NAME}}", "session": "${{SESSION_ID}}"}}'
"""

# The agent (system Python, as nobody): writes what it was given into the journal it can
# reach, records which of the supervisor's credentials its environment holds, and exits.
FORGING_AGENT = r"""
import json, os, sqlite3, subprocess, sys, time
plan = json.load(open(sys.argv[1]))
env = dict(os.environ)
json.dump({name: env.get(name, "") for name in plan["look_for"]}, open(plan["seen"], "w"))
row = plan["row"]
row["agent_id"] = env.get("SCION_AGENT_ID", "")
journal = (env.get("LIFECYCLE_HOOKS_JOURNAL") or env.get("OTEL_LIFECYCLE_HOOKS_JOURNAL")
           or plan["journal"])  # a file in its own directory is found without being told
columns = ", ".join(row)
if journal.startswith("postgresql://"):
    values = ", ".join("'" + str(v).replace("'", "''") + "'" for v in row.values())
    subprocess.run(["psql", journal, "-c", f"INSERT INTO sessions ({columns}) VALUES ({values})"],
                   check=False, capture_output=True)
elif journal:
    # Once the supervisor has written its session row (its WAL has frames), the file is
    # moved aside (it is root's, 0600, but in the agent's directory) and replaced.
    for _ in range(600):
        if os.path.exists(journal + "-wal") and os.path.getsize(journal + "-wal") > 0:
            break
        time.sleep(0.05)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(journal + suffix):
            os.rename(journal + suffix, journal + suffix + ".moved")
    db = sqlite3.connect(journal)
    for statement in plan["ddl"]:
        db.execute(statement)
    db.execute(f"PRAGMA user_version = {plan['version']}")
    db.execute(f"INSERT INTO sessions ({columns}) VALUES ({', '.join('?' for _ in row)})",
               list(row.values()))
    db.commit()
    db.close()
"""


@pytest.fixture
def registry() -> Iterator[TargetServer]:
    with TargetServer() as server:
        yield server


def forged_row(template: Path) -> dict[str, object]:
    """What the agent writes: an unfinished session begun an hour ago, its supervisor gone,
    naming the victim in its metadata and carrying its own text in its variables."""
    text = template.read_text()
    an_hour_ago = time.time() - 3600
    return {
        "session_id": FORGED,
        "agent_name": "victim",
        "template_files": json.dumps([str(template)]),
        "templates": json.dumps(
            [{"path": str(template), "sha256": hashlib.sha256(text.encode()).hexdigest()}]
        ),
        "metadata": json.dumps(VICTIM),
        "variables": json.dumps({"NOTE": "forged-note"}),
        "started_at": an_hour_ago,
        "heartbeat_at": an_hour_ago,
        "post_start_at": an_hour_ago,
        "post_started_at": an_hour_ago,
        "host": "",
    }


def forging_agent(
    agent_dir: Path, template: Path, look_for: list[str], journal: str = ""
) -> list[str]:
    program = agent_dir / "forging_agent.py"
    program.write_text(FORGING_AGENT)
    plan = {
        "row": forged_row(template),
        "ddl": [s for _, body in statements("sqlite", 0) for s in body],
        "version": SCHEMA_VERSION,
        "seen": str(agent_dir / "seen.json"),
        "look_for": look_for,
        "journal": journal,
    }
    plan_path = agent_dir / "plan.json"
    plan_path.write_text(json.dumps(plan))
    return [SYSTEM_PYTHON, str(program), str(plan_path)]


def supervise(workspace: Workspace, template: Path, command: list[str], env: dict[str, str]) -> str:
    run = workspace.start(template, command, "--user", "nobody", env=env)
    assert run.wait(timeout=60) == 0, run.stderr
    return run.stderr


def reconcile(
    journal: str, template: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "otel_lifecycle_hooks", "reconcile", "--journal", journal,
            "--template", str(template), "--stale-after", "1s"]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def _database_up_for(url: str) -> float:
    """Seconds since the PostgreSQL server started, on its clock."""
    with psycopg.connect(url) as db:
        row = db.execute(
            "SELECT EXTRACT(EPOCH FROM clock_timestamp() - pg_postmaster_start_time())::float8"
        ).fetchone()
    return float(row[0]) if row else 0.0


def requests_for(registry: TargetServer, session: str) -> list[str]:
    """Each request the registry received for `session` (by its body), as `METHOD path`."""
    return [
        f"{r.method} {r.path}"
        for r in list(registry.requests)
        if json.loads(r.body or b"{}").get("session") == session
    ]


def nothing_shaped_by_the_agent(registry: TargetServer) -> None:
    for request in list(registry.requests):
        body = request.body.decode(errors="replace")
        assert "victim" not in request.path + body, (request.method, request.path, body)
        assert "forged-note" not in body
    assert requests_for(registry, FORGED) == []


def test_a_forged_sqlite_session_row_sends_nothing_from_run_or_reconcile(
    workspace: Workspace, registry: TargetServer, agent_dir: Path
) -> None:
    template = workspace.template(HOOKS.format(base=registry.url("").rstrip("/")))
    template.chmod(0o644)
    journal = agent_dir / "journal.sqlite3"
    env = {
        "OTEL_LIFECYCLE_HOOKS_JOURNAL": str(journal),
        "REGISTRY_TOKEN": TOKEN,
        "LIFECYCLE_HOOKS_JOURNAL_KEY": KEY,
        "SCION_GROVE": "operators-grove",
    }
    first = supervise(
        workspace,
        template,
        forging_agent(agent_dir, template, ["REGISTRY_TOKEN"], str(journal)),
        env,
    )
    # The supervisor said where the danger was.
    assert f"the journal {journal} can be replaced by the agent's user nobody" in first
    # The forgery is in place: the next run reads the agent's file.
    with closing(Journal(journal)) as forged:
        assert forged.session(FORGED) is not None, first

    supervise(workspace, template, [SYSTEM_PYTHON, "-c", "pass"], env)
    done = reconcile(str(journal), template, {**workspace.env, **env})

    nothing_shaped_by_the_agent(registry)
    assert done.returncode == 0, done.stderr
    assert f"left alone: session {FORGED}" in done.stdout
    assert "LIFECYCLE_HOOKS_JOURNAL_KEY" in done.stdout
    assert TOKEN not in done.stdout + done.stderr
    # The agent never held the credential its hooks send.
    assert json.loads((agent_dir / "seen.json").read_text()) == {"REGISTRY_TOKEN": ""}


def test_a_forged_postgresql_session_row_sends_nothing_from_run_or_reconcile(
    workspace: Workspace,
    registry: TargetServer,
    agent_dir: Path,
    postgres_url: str,  # noqa: F811
) -> None:
    template = workspace.template(HOOKS.format(base=registry.url("").rstrip("/")))
    template.chmod(0o644)
    env = {
        "OTEL_LIFECYCLE_HOOKS_JOURNAL": postgres_url,
        "REGISTRY_TOKEN": TOKEN,
        "LIFECYCLE_HOOKS_JOURNAL_KEY": KEY,
        "SCION_GROVE": "operators-grove",
    }
    look_for = ["OTEL_LIFECYCLE_HOOKS_JOURNAL", "LIFECYCLE_HOOKS_JOURNAL_KEY", "REGISTRY_TOKEN"]
    supervise(workspace, template, forging_agent(agent_dir, template, look_for), env)

    # An agent that has the database's password some other way writes the same row.
    row = forged_row(template)
    journal = open_journal(postgres_url)
    try:
        first = journal.sessions(limit=1)[0]
        journal.open_session(
            FORGED, agent_id=first.agent_id, agent_name="victim",
            template_files=[str(template)], started_at=time.time() - 3600,
            templates=json.loads(str(row["templates"])), metadata=VICTIM,
            variables={"NOTE": "forged-note"},
        )  # fmt: skip
        journal.mark_post_start(FORGED, at=time.time() - 3600)
        journal.heartbeat(FORGED, at=time.time() - 3600)
    finally:
        journal.close()

    supervise(workspace, template, [SYSTEM_PYTHON, "-c", "pass"], env)
    # A heartbeat counts from the database's start at the earliest (docs/fleet.md, Liveness):
    # a server started for this test must have run longer than reconcile's --stale-after.
    wait_until(lambda: _database_up_for(postgres_url) > 1.5, what="the database up 1.5 s")
    done = reconcile(postgres_url, template, {**workspace.env, **env})

    nothing_shaped_by_the_agent(registry)
    assert done.returncode == 0, done.stderr
    assert f"left alone: session {FORGED}" in done.stdout
    assert TOKEN not in done.stdout + done.stderr
    # The agent got none of the journal's credentials (nor the key, nor the hooks' token).
    assert json.loads((agent_dir / "seen.json").read_text()) == dict.fromkeys(look_for, "")


def test_a_genuine_killed_session_is_still_recovered_once_with_the_operators_metadata(
    workspace: Workspace, registry: TargetServer, agent_dir: Path
) -> None:
    """The seal does not stop what recovery is for: a SIGKILLed supervisor's session (its row
    sealed) is deregistered by the next run, under the operator's slug and grove."""
    template = workspace.template(HOOKS.format(base=registry.url("").rstrip("/")))
    template.chmod(0o644)
    env = {
        "OTEL_LIFECYCLE_HOOKS_JOURNAL": str(agent_dir / "journal.sqlite3"),
        "REGISTRY_TOKEN": TOKEN,
        "LIFECYCLE_HOOKS_JOURNAL_KEY": KEY,
        "SCION_GROVE": "operators-grove",
    }
    ready = agent_dir / "ready"
    sleeper = f"open({str(ready)!r}, 'w').close(); import time; time.sleep(60)"
    killed = workspace.start(template, [SYSTEM_PYTHON, "-c", sleeper], "--user", "nobody", env=env)
    wait_until(ready.exists, what="the agent to have started")
    wait_until(lambda: _post_started(agent_dir / "journal.sqlite3"), what="post-start journaled")
    killed.signal(signal.SIGKILL)
    killed.wait(timeout=120)
    workspace.cleanup()  # the agent dies with its supervisor; any survivor is ended here

    supervise(workspace, template, [SYSTEM_PYTHON, "-c", "pass"], env)

    deregistered = [r for r in list(registry.requests) if r.method == "DELETE"]
    assert [r.path for r in deregistered] == ["/services/test-agent"]
    assert json.loads(deregistered[0].body)["grove"] == "operators-grove"
    assert deregistered[0].headers["authorization"] == f"Bearer {TOKEN}"


def _post_started(path: Path) -> bool:
    if not path.exists():
        return False
    with closing(Journal(path)) as journal:
        return any(row.post_started_at for row in journal.sessions())


def test_without_a_journal_key_the_next_run_renders_a_forged_session_from_its_own_metadata(
    workspace: Workspace, registry: TargetServer, agent_dir: Path
) -> None:
    """No key anywhere: the next run still acts only for its own agent id, with its own slug,
    name and grove; `reconcile` recovers nothing and says which setting it needs."""
    workspace.env.pop("LIFECYCLE_HOOKS_JOURNAL_KEY")
    template = workspace.template(HOOKS.format(base=registry.url("").rstrip("/")))
    template.chmod(0o644)
    journal = agent_dir / "journal.sqlite3"
    env = {
        "OTEL_LIFECYCLE_HOOKS_JOURNAL": str(journal),
        "REGISTRY_TOKEN": TOKEN,
        "SCION_GROVE": "operators-grove",
    }
    supervise(workspace, template, forging_agent(agent_dir, template, [], str(journal)), env)
    done = reconcile(str(journal), template, {**workspace.env, **env})
    assert f"left alone: session {FORGED}" in done.stdout
    assert "no journal key is set here" in done.stdout
    assert requests_for(registry, FORGED) == []

    supervise(workspace, template, [SYSTEM_PYTHON, "-c", "pass"], env)

    for request in list(registry.requests):
        body = request.body.decode(errors="replace")
        assert "victim" not in request.path + body and "forged-note" not in body
    assert requests_for(registry, FORGED) == [
        "DELETE /services/test-agent",
        "POST /farewell/test-agent",
    ]
    [deregistration] = [r for r in registry.requests if r.method == "DELETE"]
    assert json.loads(deregistration.body)["grove"] == "operators-grove"
