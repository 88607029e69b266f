"""A value the journal holds never decides where a request goes, nor which credential it carries.

The journal is written beside the agent, which can rewrite it. `reconcile` fills a session's
journaled variables in, and `replay` (and the page's Redeliver, the same code) and recovery take
the session's journaled metadata; each of them is the agent's to write. The operator's template
here sends its bearer token to `http://${REGISTRY_ADDR}/notify` (or `http://${GROVE_NAME}/...`,
agent metadata): the agent writes the address of its own server (127.0.0.2) into the journal,
as a variable or as metadata. Nothing may reach it, and the token is in no output; where the
operator's side gives no value for the variable, the delivery is refused naming it and the
environment variable that supplies it, nothing is sent and the delivery stays owed.

Everything runs for real: the deliveries through a real engine, `replay` and `reconcile` as
subprocesses, the operator's receiver on 127.0.0.1 and the attacker's on 127.0.0.2."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from otel_lifecycle_hooks.journal import Journal
from tests.reliability.test_reliability_replay import deliver, rows, write_template
from tests.support.journal_key import WITH_KEY, seal_session
from tests.support.target_server import Reply, TargetServer
from tests.ui.processes import environment

TOKEN = "tok-4c1f8a2e9b7d3605"
AGENT_TOKEN = "tok-agents-own-0a9b8c7d"
SESSION = "cccc0000-0000-4000-8000-000000000003"

HOOK = """
- name: notify
  on: [task-completed, session-end]
  action:
    type: http
    method: POST
    url: "http://${{{origin}}}/notify"
    auth: {{type: bearer-token, token_env: NOTIFY_TOKEN}}
    body: '{{"summary": "${{TASK_SUMMARY}}", "region": "${{REGION}}"}}'
"""


def address(server: TargetServer) -> str:
    """`127.0.0.1:PORT`: what the operator's template puts after `http://`."""
    return server.url("/").split("://", 1)[1].rstrip("/")


def command(
    name: str, journal: Path, env: dict[str, str], *options: str
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "otel_lifecycle_hooks", name, "--journal", str(journal)]
    if name == "reconcile":
        argv += ["--stale-after", "1s"]
    return subprocess.run(
        [*argv, *options],
        env={**env, **WITH_KEY},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def forge_session(
    journal_path: Path,
    template: Path,
    *,
    variables: dict[str, str] | None = None,
    metadata: dict[str, str] | None = None,
) -> None:
    """An unfinished session of the operator's template (its sha256), begun post-start an hour
    ago, its supervisor gone: what `run` journals, with what the agent wrote into it (and
    sealed: a supervisor's own values, or a row written before the key was taken from the
    agent)."""
    text = template.read_text()
    journal = Journal(journal_path)
    try:
        journal.open_session(
            SESSION, agent_id="agent-r", agent_name="test-agent",
            template_files=[str(template)], started_at=time.time() - 3600,
            templates=[{"path": str(template), "sha256": hashlib.sha256(text.encode()).hexdigest(),
                        "text": text}],
            metadata={"AGENT_ID": "agent-r", "AGENT_NAME": "test-agent", **(metadata or {})},
            variables=variables or {},
        )  # fmt: skip
        journal.mark_post_start(SESSION, at=time.time() - 3600)
    finally:
        journal.close()
    # Sealed, as its supervisor would have: what is tested is what a sealed row may decide.
    seal_session(journal_path, SESSION)


def recovered_at(journal_path: Path) -> float | None:
    journal = Journal(journal_path)
    try:
        row = journal.session(SESSION)
    finally:
        journal.close()
    assert row is not None
    return row.recovered_at


# -- reconcile -------------------------------------------------------------------------------


def test_a_journaled_variable_never_fills_the_host_reconcile_sends_the_token_to(
    tmp_path: Path, target: TargetServer, attacker: TargetServer
) -> None:
    template = write_template(tmp_path, HOOK.format(origin="REGISTRY_ADDR"))
    journal = tmp_path / "journal.sqlite3"
    forge_session(
        journal, template, variables={"REGISTRY_ADDR": address(attacker), "REGION": "eu-west1"}
    )
    env = environment(tmp_path, journal, NOTIFY_TOKEN=TOKEN)

    # The reconciler does not set REGISTRY_ADDR: the journal's value is not used.
    refused = command("reconcile", journal, env, "--template", str(template))

    assert attacker.requests == [] and target.requests == []
    assert refused.returncode == 0, refused.stderr
    assert "left alone: session cccc0000" in refused.stdout
    assert "REGISTRY_ADDR" in refused.stdout and "environment" in refused.stdout
    assert TOKEN not in refused.stdout + refused.stderr
    assert recovered_at(journal) is None  # still owed, for a reconcile that sets it

    # Given by the operator, the owed session-end goes to the operator's receiver; the
    # journaled REGION, a body value, is the delivery's content and still fills it.
    given = command(
        "reconcile", journal, {**env, "REGISTRY_ADDR": address(target)}, "--template", str(template)
    )
    assert given.returncode == 0, given.stderr
    assert "recovered: session cccc0000" in given.stdout
    assert attacker.requests == []
    [sent] = target.requests
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert json.loads(sent.body)["region"] == "eu-west1"
    assert TOKEN not in given.stdout + given.stderr


def test_journaled_metadata_never_beats_the_reconcilers_environment_for_the_host(
    tmp_path: Path, target: TargetServer, attacker: TargetServer
) -> None:
    """Metadata is looked up before the environment: a metadata entry the agent adds under the
    name of the template's host variable would otherwise win over the operator's own value."""
    template = write_template(tmp_path, HOOK.format(origin="REGISTRY_ADDR"))
    journal = tmp_path / "journal.sqlite3"
    forge_session(journal, template, metadata={"REGISTRY_ADDR": address(attacker)})
    env = environment(tmp_path, journal, NOTIFY_TOKEN=TOKEN, REGISTRY_ADDR=address(target))

    done = command("reconcile", journal, env, "--template", str(template))

    assert done.returncode == 0, done.stderr
    assert attacker.requests == []
    [sent] = target.requests
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in done.stdout + done.stderr


def test_agent_metadata_in_the_host_comes_from_the_reconcilers_scion_variables(
    tmp_path: Path, target: TargetServer, attacker: TargetServer
) -> None:
    template = write_template(tmp_path, HOOK.format(origin="GROVE_NAME"))
    journal = tmp_path / "journal.sqlite3"
    forge_session(journal, template, metadata={"GROVE_NAME": address(attacker)})
    env = environment(tmp_path, journal, NOTIFY_TOKEN=TOKEN)

    refused = command("reconcile", journal, env, "--template", str(template))
    assert attacker.requests == [] and target.requests == []
    assert "left alone: session cccc0000" in refused.stdout
    assert "GROVE_NAME" in refused.stdout and "SCION_GROVE" in refused.stdout
    assert recovered_at(journal) is None

    given = command(
        "reconcile", journal, {**env, "SCION_GROVE": address(target)}, "--template", str(template)
    )
    assert given.returncode == 0, given.stderr
    assert attacker.requests == []
    [sent] = target.requests
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"


def test_a_journaled_credential_is_never_attached(
    tmp_path: Path, target: TargetServer, attacker: TargetServer
) -> None:
    """The agent journals a token of its own under the name the template's auth reads: a
    reconciler without it must not authenticate the operator's request as the agent."""
    template = write_template(tmp_path, HOOK.format(origin="REGISTRY_ADDR"))
    journal = tmp_path / "journal.sqlite3"
    forge_session(journal, template, variables={"NOTIFY_TOKEN": AGENT_TOKEN})
    env = environment(tmp_path, journal, REGISTRY_ADDR=address(target))

    done = command("reconcile", journal, env, "--template", str(template))

    assert done.returncode == 0, done.stderr
    assert attacker.requests == [] and target.requests == []
    # Refused for want of the operator's own token, as a live delivery would be.
    [refused] = rows(journal)
    assert (refused.outcome, refused.error_type) == ("refused", "auth.missing_secret")
    assert AGENT_TOKEN not in done.stdout + done.stderr


def test_a_journaled_exporter_endpoint_never_takes_the_reconcilers_telemetry_headers(
    tmp_path: Path, target: TargetServer, attacker: TargetServer
) -> None:
    """OTEL_* settings are the reconciler's own: a journaled OTLP endpoint would carry the
    exporter's credential header to the agent's server."""
    template = write_template(tmp_path, HOOK.format(origin="REGISTRY_ADDR"))
    journal = tmp_path / "journal.sqlite3"
    forge_session(
        journal, template,
        variables={"OTEL_EXPORTER_OTLP_ENDPOINT": attacker.url(""),
                   "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
    )  # fmt: skip
    env = environment(
        tmp_path, journal, NOTIFY_TOKEN=TOKEN, REGISTRY_ADDR=address(target),
        OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer {TOKEN}",
    )  # fmt: skip

    done = command("reconcile", journal, env, "--template", str(template))

    assert done.returncode == 0, done.stderr
    assert len(target.requests) == 1
    assert attacker.requests == []


# -- replay and Redeliver --------------------------------------------------------------------


def failed_delivery(tmp_path: Path, target: TargetServer, origin: str) -> tuple[Path, Path, int]:
    """The operator's template, and a journal holding one failed delivery of it."""
    template = write_template(tmp_path, HOOK.format(origin=origin))
    journal = tmp_path / "journal.sqlite3"
    target.on("/notify", Reply(503))
    environ = {"NOTIFY_TOKEN": TOKEN, "REGISTRY_ADDR": address(target), "REGION": "eu-west1"}
    if origin == "GROVE_NAME":
        environ["GROVE_NAME"] = address(target)
    deliver(template, journal, environ=environ)
    target.wait_for(1)
    [failed] = [row for row in rows(journal) if row.replayed_from is None]
    assert failed.id is not None and failed.outcome != "success"
    return template, journal, int(failed.id)


def steer(journal: Path, attacker: TargetServer, metadata: dict[str, str]) -> None:
    """What the agent writes: the session's metadata, and the failed row's url pointed at its
    own server to match."""
    with sqlite3.connect(journal) as db:
        for session_id, text in db.execute("SELECT session_id, metadata FROM sessions").fetchall():
            db.execute(
                "UPDATE sessions SET metadata = ? WHERE session_id = ?",
                (json.dumps({**json.loads(text or "{}"), **metadata}), session_id),
            )
        for row_id, text in db.execute("SELECT id, request FROM executions").fetchall():
            request = json.loads(text)
            request["url"] = attacker.url("/notify")
            db.execute(
                "UPDATE executions SET request = ? WHERE id = ?", (json.dumps(request), row_id)
            )


def test_journaled_metadata_never_chooses_the_host_a_replay_sends_the_token_to(
    tmp_path: Path, target: TargetServer, attacker: TargetServer
) -> None:
    template, journal, failed = failed_delivery(tmp_path, target, "REGISTRY_ADDR")
    steer(journal, attacker, {"REGISTRY_ADDR": address(attacker)})
    env = environment(tmp_path, journal, NOTIFY_TOKEN=TOKEN, REGISTRY_ADDR=address(target))

    done = command("replay", journal, env, str(failed), "--template", str(template))

    assert attacker.requests == []
    assert len(target.requests) == 1  # the original failed delivery only
    assert done.returncode == 1 and "Nothing was sent" in done.stdout
    assert TOKEN not in done.stdout + done.stderr


def test_a_replay_whose_host_variable_the_operator_does_not_set_is_refused_naming_it(
    tmp_path: Path, target: TargetServer, attacker: TargetServer
) -> None:
    template, journal, failed = failed_delivery(tmp_path, target, "REGISTRY_ADDR")
    steer(journal, attacker, {"REGISTRY_ADDR": address(attacker)})
    env = environment(tmp_path, journal, NOTIFY_TOKEN=TOKEN)

    done = command("replay", journal, env, str(failed), "--template", str(template))

    assert attacker.requests == [] and len(target.requests) == 1
    assert done.returncode == 1
    assert "${REGISTRY_ADDR}" in done.stdout and "environment" in done.stdout
    assert "Nothing was sent" in done.stdout
    assert TOKEN not in done.stdout + done.stderr
    # Kept: the same row replays once the operator gives the value (the url the agent wrote
    # is not the operator's, so that is still refused rather than sent there).
    assert [row.id for row in rows(journal) if row.replayed_from is None] == [failed]


def test_agent_metadata_in_a_replays_host_must_come_from_the_operators_scion_variables(
    tmp_path: Path, target: TargetServer, attacker: TargetServer
) -> None:
    template, journal, failed = failed_delivery(tmp_path, target, "GROVE_NAME")
    steer(journal, attacker, {"GROVE_NAME": address(attacker)})
    env = environment(tmp_path, journal, NOTIFY_TOKEN=TOKEN)

    refused = command("replay", journal, env, str(failed), "--template", str(template))
    assert attacker.requests == [] and len(target.requests) == 1
    assert refused.returncode == 1
    assert "${GROVE_NAME}" in refused.stdout and "SCION_GROVE" in refused.stdout

    # With the operator's value, the row the agent pointed elsewhere is not one the
    # template makes there: refused, and still nothing reaches the agent's server.
    given = command(
        "replay", journal, {**env, "SCION_GROVE": address(target)}, str(failed),
        "--template", str(template),
    )  # fmt: skip
    assert attacker.requests == [] and len(target.requests) == 1
    assert given.returncode == 1 and "template's origin (http://127.0.0.1)" in given.stdout
    assert TOKEN not in refused.stdout + refused.stderr + given.stdout + given.stderr


# -- which names decide, on templates as the operator writes them ----------------------------

CHAINED = """
env:
  REGISTRY: "http://${REGISTRY_ADDR}"
  NOTIFY_PATH: "/v1/${REGION}"
lifecycle_hooks:
  - name: notify
    on: [session-end]
    action:
      type: http
      url: "${REGISTRY}${NOTIFY_PATH}"
      body: '{"region": "${REGION}"}'
  - name: cleanup
    on: [session-end]
    action:
      type: script
      command: ["${CLEANUP_TOOL}", "--grove", "${GROVE_ID}"]
"""


def test_names_that_build_the_origin_through_env_and_a_scripts_command_are_the_operators(
    tmp_path: Path,
) -> None:
    from otel_lifecycle_hooks.engine.destination import (
        destination_names,
        journaled_metadata,
        journaled_variables,
        unsupplied,
    )
    from otel_lifecycle_hooks.template.loader import load_templates

    path = tmp_path / "chained.yaml"
    path.write_text(CHAINED)
    template = load_templates([path])
    [notify, cleanup] = template.hooks

    assert {"REGISTRY", "REGISTRY_ADDR", "CLEANUP_TOOL", "GROVE_ID"} <= destination_names(template)
    assert "REGION" not in destination_names(template)  # only in the path and the body
    assert [u.name for u in unsupplied(notify, template, {}, {})] == ["REGISTRY_ADDR"]
    # The operator setting the entry itself, or the value it is built from, supplies it.
    assert unsupplied(notify, template, {"REGISTRY": "http://127.0.0.1:9"}, {}) == []
    assert unsupplied(notify, template, {"REGISTRY_ADDR": "127.0.0.1:9"}, {}) == []
    assert [u.name for u in unsupplied(cleanup, template, {}, {"GROVE_ID": "g1"})] == [
        "CLEANUP_TOOL"
    ]

    journaled = {
        "REGISTRY_ADDR": "127.0.0.2:9", "REGISTRY": "http://127.0.0.2:9", "REGION": "eu-west1",
        "CLEANUP_TOOL": "/tmp/evil", "PATH": "/tmp/evil-bin", "UNREAD": "x",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.2:9",
    }  # fmt: skip
    assert journaled_variables(journaled, template) == {"REGION": "eu-west1"}
    assert journaled_metadata(
        {"AGENT_NAME": "a", "GROVE_ID": "agents-grove"}, {"GROVE_ID": "operators-grove"}, template
    ) == {"AGENT_NAME": "a", "GROVE_ID": "operators-grove"}
    assert journaled_metadata({"GROVE_ID": "agents-grove"}, {}, template) == {}


def test_redeliver_on_the_page_refuses_a_host_only_the_journal_gives(
    tmp_path: Path, target: TargetServer, attacker: TargetServer
) -> None:
    """The page's Redeliver runs replay's code with the environment `ui` was started in."""
    from tests.security.test_replay_trusts_operator_templates import redeliver
    from tests.ui.processes import start_ui

    template, journal, failed = failed_delivery(tmp_path, target, "GROVE_NAME")
    steer(journal, attacker, {"GROVE_NAME": address(attacker)})
    page = start_ui(
        environment(tmp_path, journal, NOTIFY_TOKEN=TOKEN),
        "--journal", str(journal), "--template", str(template),
    )  # fmt: skip
    try:
        outcome = redeliver(page, failed)
    finally:
        page.stop()

    assert outcome["outcome"] == "refused"
    assert "${GROVE_NAME}" in str(outcome["message"]) and "SCION_GROVE" in str(outcome["message"])
    assert TOKEN not in json.dumps(outcome)
    assert attacker.requests == [] and len(target.requests) == 1


def test_journaled_metadata_for_host_and_port_never_takes_a_replay_to_the_agent(
    tmp_path: Path, target: TargetServer, attacker: TargetServer
) -> None:
    """Host and port each a variable the operator sets: journaled metadata under both names
    (looked up before the environment) with the row's url pointed to match would make the
    template's own rendering agree with the steered row."""
    hook = HOOK.replace("${{{origin}}}", "${{REGISTRY_HOST}}:${{REGISTRY_PORT}}")
    template = write_template(tmp_path, hook.format())
    journal = tmp_path / "journal.sqlite3"
    target.on("/notify", Reply(503))
    port = address(target).split(":")[1]
    deliver(
        template, journal,
        environ={"NOTIFY_TOKEN": TOKEN, "REGISTRY_HOST": "127.0.0.1", "REGISTRY_PORT": port},
    )  # fmt: skip
    target.wait_for(1)
    [failed] = [row.id for row in rows(journal) if row.replayed_from is None]
    host, attacker_port = address(attacker).split(":")
    steer(journal, attacker, {"REGISTRY_HOST": host, "REGISTRY_PORT": attacker_port})
    env = environment(
        tmp_path, journal, NOTIFY_TOKEN=TOKEN, REGISTRY_HOST="127.0.0.1", REGISTRY_PORT=port
    )

    done = command("replay", journal, env, str(failed), "--template", str(template))

    assert attacker.requests == []
    assert len(target.requests) == 1
    assert done.returncode == 1 and "template's origin (http://127.0.0.1)" in done.stdout
    assert TOKEN not in done.stdout + done.stderr
