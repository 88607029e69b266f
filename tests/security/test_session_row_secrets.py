"""A session row's variables hold no secret: the same redaction rules as everywhere else.

The template's body reads a URL variable whose userinfo and `token=` query value are secrets,
and a secret-named variable; the session row (which the agent can read where it can reach the
journal, fleet-wide on PostgreSQL) must hold none of the canaries, in any column, while a plain
variable the hooks read is still journaled for a reconciler."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

from otel_lifecycle_hooks.journal import Journal
from tests.supervisor.supervised import Workspace
from tests.support.target_server import TargetServer

PASSWORD = "canary-userinfo-pw-7c1e"
QUERY_TOKEN = "canary-query-tok-2b9d"
NAMED = "canary-named-secret-5f3a"

HOOK = """\
  - name: notify
    on: [post-start, session-end]
    action:
      type: http
      url: "{url}"
      body: '{{"callback": "${{CALLBACK_URL}}", "mirror": "${{MIRROR_PASSWORD}}",
        "region": "${{REGION}}"}}'
"""


def test_url_userinfo_secret_query_values_and_secret_names_are_not_journaled(
    workspace: Workspace, target: TargetServer
) -> None:
    template = workspace.template(HOOK.format(url=target.url("/notify")))
    env = {
        "CALLBACK_URL": f"https://bot:{PASSWORD}@hooks.example/cb?token={QUERY_TOKEN}&x=1",
        "MIRROR_PASSWORD": NAMED,
        "REGION": "eu-west1",
    }
    run = workspace.start(template, workspace.agent_command(exit=0), env=env)
    assert run.wait(timeout=60) == 0, run.stderr

    with closing(Journal(workspace.journal)) as journal:
        (row,) = journal.sessions()
    assert row.variables == {"REGION": "eu-west1"}
    with closing(sqlite3.connect(workspace.journal)) as db:
        stored = json.dumps([list(r) for r in db.execute("SELECT * FROM sessions")])
    for canary in (PASSWORD, QUERY_TOKEN, NAMED):
        assert canary not in stored, canary
    # The live deliveries still had them: only the journal is kept clean.
    first = json.loads(target.requests[0].body)
    assert PASSWORD in first["callback"] and first["mirror"] == NAMED
