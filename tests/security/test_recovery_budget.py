"""A slow pre-stop never starves the session-end of the same recovered session.

A supervisor is SIGKILLed after post-start; its pre-stop (a blocking deregistration) and its
session-end are owed. The registry never answers the deregistration. The next `run` (grace
period 2s) recovers the session: the pre-stop is cut at its budget, and the session-end still
gets a budget of its own, so the farewell is delivered, with the lost session's id."""

from __future__ import annotations

import json

from tests.security.test_recovery_exactly_once import agent, sigkill
from tests.supervisor.supervised import Workspace, wait_until
from tests.support.target_server import Reply, TargetServer

HOOKS = """\
  - name: deregister
    on: [pre-stop]
    blocking: true
    timeout: 60s
    action:
      type: http
      url: "{base}/deregister"
      body: '{{"session": "${{SESSION_ID}}"}}'
  - name: farewell
    on: [session-end]
    timeout: 10s
    action:
      type: http
      url: "{base}/farewell"
      body: '{{"session": "${{SESSION_ID}}"}}'
  - name: registered
    on: [post-start]
    action:
      type: http
      url: "{base}/register"
      body: '{{"session": "${{SESSION_ID}}"}}'
"""


def sessions(receiver: TargetServer, path: str) -> list[str]:
    return [json.loads(r.body)["session"] for r in list(receiver.requests) if r.path == path]


def test_a_hanging_pre_stop_leaves_the_recovered_session_end_its_own_budget(
    workspace: Workspace, target: TargetServer
) -> None:
    target.always("/deregister", Reply.hang())
    template = workspace.template(HOOKS.format(base=target.url("").rstrip("/")))
    command, pid_file = agent(workspace, "killed")
    killed = workspace.start(template, command)
    [lost] = wait_until(lambda: sessions(target, "/register"), what="the registration")
    sigkill(workspace, killed, pid_file)

    later = workspace.start(template, workspace.agent_command(exit=0), "--grace-period", "2s")
    assert later.wait(timeout=120) == 0, later.stderr

    assert sessions(target, "/deregister") == [lost]  # sent, and cut at its budget
    assert lost in sessions(target, "/farewell"), later.stderr
