"""The agent's environment holds none of the supervisor's credentials unless the template shares it.

The supervisor runs as root and the agent as `nobody`, with the operator's environment holding
the journal's location and key, the bearer token a hook's `auth:` reads, a webhook's signing
secret, and a secret-named variable a hook's body reads. The agent dumps the environment it got:
none of those names or values is in it; the one the template lists under `share_with_agent:` is.
What the agent still gets (PATH, its own OTEL_* settings, its metadata) is untouched. A script
hook run as the agent's user (whose environment the agent can read in /proc) inherits no more
than the agent: neither the journal's location and key nor the hooks' credentials, only what its
own `env:` hands it.
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
    "REGISTRY_TOKEN": "canary-bearer-3f9a1c7e",
    "WEBHOOK_SIGNING_SECRET": "whsec_Y2FuYXJ5LXNpZ25pbmctc2VjcmV0LTk4NzY=",
    "DEPLOY_API_KEY": "canary-apikey-8b2d6e0f",
    "LIFECYCLE_HOOKS_JOURNAL_KEY": "canary-journal-key-5a7c9e1b3d",
}
SHARED = {"GITHUB_TOKEN": "canary-shared-ghp-4e6a8c0b"}

HOOKS = """\
  - name: register
    on: [post-start]
    action:
      type: http
      url: "{base}/register"
      auth: {{type: bearer-token, token_env: REGISTRY_TOKEN}}
      body: '{{"key": "${{DEPLOY_API_KEY}}"}}'
  - name: announce
    on: [session-end]
    action:
      type: webhook
      url: "{base}/announce"
      signing_secret_env: WEBHOOK_SIGNING_SECRET
  - name: comment
    on: [session-end]
    action:
      type: http
      url: "{base}/comment"
      auth: {{type: bearer-token, token_env: GITHUB_TOKEN}}
"""


def dumped_environment(
    workspace: Workspace, agent_dir: Path, target: TargetServer, extra: str, more_hooks: str = ""
) -> dict[str, str]:
    base = target.url("").rstrip("/")
    template = workspace.template(HOOKS.format(base=base) + more_hooks, extra=extra)
    dump = agent_dir / "environ.json"
    program = f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"
    run = workspace.start(
        template, ["/usr/bin/python3", "-c", program], "--user", "nobody",
        env={**CREDENTIALS, **SHARED},
    )  # fmt: skip
    assert run.wait(timeout=60) == 0, run.stderr
    environ: dict[str, str] = json.loads(dump.read_text())
    return environ


def test_the_agent_gets_none_of_the_journals_or_the_hooks_credentials(
    workspace: Workspace, agent_dir: Path, target: TargetServer
) -> None:
    environ = dumped_environment(workspace, agent_dir, target, extra="")

    everything = json.dumps(environ)
    for name, value in {**CREDENTIALS, **SHARED}.items():
        assert name not in environ
        assert value not in everything, name
    for name in ("OTEL_LIFECYCLE_HOOKS_JOURNAL", "LIFECYCLE_HOOKS_JOURNAL"):
        assert name not in environ
    # What the agent needs is still there, and the hooks still had their credentials.
    assert environ["SCION_AGENT_NAME"] == "test-agent" and environ["PATH"]
    assert environ["OTEL_LIFECYCLE_HOOKS_SOCKET"]
    [register] = [r for r in target.requests if r.path == "/register"]
    assert register.headers["authorization"] == f"Bearer {CREDENTIALS['REGISTRY_TOKEN']}"


def test_a_script_hook_run_as_the_agents_user_inherits_no_more_than_the_agent(
    workspace: Workspace, agent_dir: Path, target: TargetServer
) -> None:
    dump = agent_dir / "script-environ.json"
    program = f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"
    # A script that needs a credential names it in its own env:, and gets it.
    script = (
        "  - name: dump\n    on: [post-start]\n    blocking: true\n    action:\n"
        f"      type: script\n      command: {json.dumps(['/usr/bin/python3', '-c', program])}\n"
        '      env: {DEPLOY_API_KEY: "${DEPLOY_API_KEY}"}\n'
    )
    dumped_environment(workspace, agent_dir, target, extra="", more_hooks=script)

    environ = json.loads(dump.read_text())
    assert environ["USER"] == "nobody"
    for name in ("LIFECYCLE_HOOKS_JOURNAL_KEY", "OTEL_LIFECYCLE_HOOKS_JOURNAL"):
        assert name not in environ
    everything = json.dumps(environ)
    for name in ("LIFECYCLE_HOOKS_JOURNAL_KEY", "REGISTRY_TOKEN", "WEBHOOK_SIGNING_SECRET"):
        assert CREDENTIALS[name] not in everything, name
    assert SHARED["GITHUB_TOKEN"] not in everything
    assert environ["DEPLOY_API_KEY"] == CREDENTIALS["DEPLOY_API_KEY"]


def test_a_credential_the_template_shares_reaches_the_agent_and_no_other(
    workspace: Workspace, agent_dir: Path, target: TargetServer
) -> None:
    environ = dumped_environment(
        workspace, agent_dir, target, extra="share_with_agent: [GITHUB_TOKEN]\n"
    )

    assert environ["GITHUB_TOKEN"] == SHARED["GITHUB_TOKEN"]
    everything = json.dumps(environ)
    for name, value in CREDENTIALS.items():
        assert value not in everything, name
