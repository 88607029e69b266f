"""A credential a hook sends is the hook's, whatever its variable is called.

The agent's environment leaves out the credentials the hooks name (agent_env.py): an `auth:`'s
`token_env`, a `signing_secret_env`, and variables whose *names* look secret. A template whose
hook carries its credential in the places every redaction already treats as secret, but under
a name without a secret-looking word, must not hand it to the agent either:

- `Authorization: "Bearer ${REGISTRY_PAT}"` (a credential header),
- `X-Api-Key: "${PAGER_ROUTING}"`,
- `http://bot:${BOT_PW}@127.0.0.1:.../` (URL userinfo),
- `?access_token=${GH_PAT}` (a secret query value).

The root supervisor runs the agent as nobody; the agent dumps its environment; none of the
values is in it, and each request still carried its credential.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.supervisor.supervised import Workspace
from tests.support.target_server import TargetServer

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: the supervisor runs as root, the agent as nobody"
)

CREDENTIALS = {
    "REGISTRY_PAT": "canary-pat-6d1e9b2a",
    "PAGER_ROUTING": "canary-routing-0c4f7e3d",
    "BOT_PW": "canary-userinfo-8a5b2c9f",
    "GH_PAT": "canary-query-3e7d1f6a",
}

HOOKS = """\
  - name: register
    on: [post-start]
    blocking: true
    action:
      type: http
      url: "{base}/register"
      headers:
        Authorization: "Bearer ${{REGISTRY_PAT}}"
        X-Api-Key: "${{PAGER_ROUTING}}"
  - name: userinfo
    on: [post-start]
    blocking: true
    action:
      type: http
      url: "http://bot:${{BOT_PW}}@{host}/userinfo"
  - name: query
    on: [post-start]
    blocking: true
    action:
      type: http
      url: "{base}/query?access_token=${{GH_PAT}}"
"""


def test_credentials_in_headers_userinfo_and_query_never_reach_the_agent(
    workspace: Workspace, agent_dir: Path, target: TargetServer
) -> None:
    base = target.url("").rstrip("/")
    host = base.split("://", 1)[1]
    template = workspace.template(HOOKS.format(base=base, host=host))
    dump = agent_dir / "environ.json"
    program = f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"
    run = workspace.start(
        template, ["/usr/bin/python3", "-c", program], "--user", "nobody", env=CREDENTIALS
    )
    assert run.wait(timeout=60) == 0, run.stderr
    everything = json.dumps(json.loads(dump.read_text()))

    leaked = sorted(name for name, value in CREDENTIALS.items() if value in everything)
    assert leaked == [], f"the agent's environment holds the hooks' credentials: {leaked}"
    # The hooks still had them.
    paths = {request.path.split("?")[0]: request for request in target.requests}
    assert paths["/register"].headers["authorization"] == f"Bearer {CREDENTIALS['REGISTRY_PAT']}"
    assert CREDENTIALS["GH_PAT"] in paths["/query"].path
