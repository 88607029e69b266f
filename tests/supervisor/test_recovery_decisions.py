"""Recovery's decisions, without processes: what a claimed session owes, when an earlier run
counts as gone, what a session stores for a recoverer elsewhere (never a secret), and how the
journal URL is read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from otel_lifecycle_hooks.journal import ExecutionRow, Journal, SessionRow, journal_location
from otel_lifecycle_hooks.supervisor import recovery
from otel_lifecycle_hooks.supervisor.recovery import (
    earlier_run_gone,
    owed_events,
    process_namespace,
    session_fields,
)
from otel_lifecycle_hooks.template.loader import load_templates

TEMPLATE = """\
lifecycle_hooks:
  - name: deregister
    on: [pre-stop]
    action:
      type: http
      url: "http://127.0.0.1:9/${REGISTRY_PATH}/${AGENT_SLUG}"
      auth: {type: bearer-token, token_env: REGISTRY_TOKEN}
  - name: drain
    on: [pre-stop]
    action: {type: http, url: "http://127.0.0.1:9/drain"}
  - name: farewell
    on: [session-end]
    action: {type: webhook, url: "http://127.0.0.1:9/${CHANNEL}"}
"""


def template(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "scion-agent.yaml"
    path.write_text(TEMPLATE)
    return load_templates([path])


def session(**fields: object) -> SessionRow:
    values: dict[str, object] = {
        "session_id": "s1", "agent_id": "a1", "agent_name": "agent", "template_files": (),
        "pid": None, "started_at": 1000.0,
    }  # fmt: skip
    values.update(fields)
    return SessionRow(**values)  # type: ignore[arg-type]


def ran(hook: str, event: str) -> ExecutionRow:
    return ExecutionRow(hook=hook, event=event, outcome="success", started_at=0.0)


def test_a_session_killed_in_pre_stop_owes_the_hooks_that_did_not_run_and_session_end(
    tmp_path: Path,
) -> None:
    owed = owed_events(
        template(tmp_path), session(pre_stop_at=10.0, session_end_at=11.0),
        [ran("deregister", "pre-stop")],
    )  # fmt: skip
    assert [(o.event, o.timestamp, [h.name for h in o.hooks]) for o in owed] == [
        ("pre-stop", 10.0, ["drain"]),
        ("session-end", 11.0, ["farewell"]),
    ]


@pytest.mark.parametrize(
    ("outcome", "error_type"),
    [
        ("interrupted", "interrupted"),
        ("failed", "interrupted"),  # an earlier release's run recorded it
        ("timeout", "interrupted"),
        ("interrupted", "Interrupted"),  # an earlier release's shutdown recorded it
    ],
)
def test_a_hook_the_session_journaled_as_interrupted_is_not_owed_again_in_any_form(
    tmp_path: Path, outcome: str, error_type: str
) -> None:
    # It may have reached its target: `replay` re-sends it with its idempotency key, recovery
    # does not fire it a second time. A hook whose row is still `running` stays owed.
    journal = Journal(tmp_path / "journal.sqlite3")
    for row in (
        ExecutionRow(
            "deregister", "pre-stop", outcome, 0.0, session_id="s1", error_type=error_type
        ),
        ExecutionRow("drain", "pre-stop", "running", 0.0, session_id="s1"),
    ):
        journal.record_execution(row)
    assert journal.flush()
    journaled = journal.executions(session_id="s1")
    journal.close()
    assert {(row.hook, row.outcome, row.error_type) for row in journaled} == {
        ("deregister", "interrupted", "interrupted"), ("drain", "running", None),
    }  # fmt: skip
    owed = owed_events(
        template(tmp_path), session(pre_stop_at=10.0, session_end_at=11.0), journaled
    )
    assert [(o.event, [h.name for h in o.hooks]) for o in owed] == [
        ("pre-stop", ["drain"]),
        ("session-end", ["farewell"]),
    ]


def test_a_session_that_ended_without_stopping_owes_no_pre_stop(tmp_path: Path) -> None:
    owed = owed_events(template(tmp_path), session(pre_stop_at=None, session_end_at=11.0), [])
    assert [o.event for o in owed] == ["session-end"]


def test_a_session_that_ran_elsewhere_is_gone_only_once_its_heartbeat_is_stale() -> None:
    elsewhere = session(host="other-machine", heartbeat_at=1000.0, pid=1)
    assert earlier_run_gone(
        elsewhere, here=process_namespace(), now=1030.0, stale_after=60.0,
        require_stale_heartbeat=False,
    )[0] is False  # fmt: skip
    assert earlier_run_gone(
        elsewhere, here=process_namespace(), now=1061.0, stale_after=60.0,
        require_stale_heartbeat=False,
    )[0] is True  # fmt: skip


def test_here_a_live_agent_keeps_its_session_even_with_a_stale_heartbeat() -> None:
    # This very process stands in for the agent; its pid and start time are real.
    from otel_lifecycle_hooks.supervisor.recovery import process_start_time

    here = process_namespace()
    row = session(
        host=here, heartbeat_at=0.0, agent_pid=os.getppid(),
        agent_started_at=process_start_time(os.getppid()),
    )  # fmt: skip
    gone, why = earlier_run_gone(
        row, here=here, now=10_000.0, stale_after=1.0, require_stale_heartbeat=True
    )
    assert (gone, "agent" in why) == (False, True)


def test_reconcile_never_takes_a_session_with_a_fresh_heartbeat() -> None:
    row = session(host=process_namespace(), heartbeat_at=1000.0)
    gone, why = earlier_run_gone(
        row, here=process_namespace(), now=1001.0, stale_after=60.0, require_stale_heartbeat=True
    )
    assert not gone and "heartbeat" in why


def test_a_session_stores_the_non_secret_values_its_template_reads_and_no_secret(
    tmp_path: Path,
) -> None:
    environ = {
        "REGISTRY_PATH": "v1/services", "REGISTRY_TOKEN": "tok-canary-1", "CHANNEL": "ops",
        "UNRELATED": "x", "PATH_WITH_SECRET": "tok-canary-1",
    }  # fmt: skip
    fields = session_fields(template(tmp_path), environ, {"AGENT_SLUG": "agent"})
    assert fields["variables"] == {"CHANNEL": "ops", "REGISTRY_PATH": "v1/services"}
    assert "tok-canary-1" not in repr(fields["variables"]) + repr(fields["metadata"])
    (stored,) = fields["templates"]
    assert stored["text"] == TEMPLATE and len(stored["sha256"]) == 64


def test_one_journal_url_names_a_sqlite_file_or_a_postgres_database(tmp_path: Path) -> None:
    assert journal_location("sqlite:///var/j.db", {}) == Path("/var/j.db")
    assert journal_location("sqlite:////var/j.db", {}) == Path("/var/j.db")
    assert journal_location("sqlite://rel/j.db", {}) == Path("rel/j.db")
    assert journal_location("/var/j.db", {}) == Path("/var/j.db")
    assert journal_location("postgresql://u@db/j", {}) == "postgresql://u@db/j"
    assert journal_location(None, {"OTEL_LIFECYCLE_HOOKS_JOURNAL": "postgres://db/j"}) == (
        "postgres://db/j"
    )
    assert journal_location(None, {"HOME": str(tmp_path)}) == (
        tmp_path / ".local/state/otel-lifecycle-hooks/journal.sqlite3"
    )


def test_a_claim_held_by_a_recoverer_that_died_here_is_taken_over_at_once(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys
    import time

    from otel_lifecycle_hooks.journal import Journal
    from otel_lifecycle_hooks.supervisor.recovery import (
        claimer_name,
        process_start_time,
        recover_orphaned_sessions,
    )

    journal = Journal(tmp_path / "j.sqlite3")
    journal.open_session(
        "lost", agent_id="a1", started_at=time.time() - 50, host=process_namespace()
    )
    journal.begin_event("lost", "post-start", time.time() - 49)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    started = process_start_time(dead.pid)
    dead.wait()
    host, namespace = claimer_name().split(" ")[0], process_namespace()
    first = journal.claim_session("lost", f"{host} {dead.pid} {started} {namespace}", 300.0)
    assert first is not None and first.pre_stop_at is not None
    assert journal.claim_session("lost", "someone else", 300.0) is None  # the lease holds

    fired: list[tuple[str, float]] = []
    recovered = recover_orphaned_sessions(
        journal, "a1", {"AGENT_ID": "a1"},
        lambda hook, event, info, _deadline: fired.append((event.name, event.timestamp)),
        template(tmp_path),
    )  # fmt: skip
    assert recovered == ["lost"]
    assert ("pre-stop", first.pre_stop_at) in fired  # the dead claimer's moments, kept
    assert ("session-end", first.session_end_at) in fired
    assert journal.unfinished_sessions("a1") == []
    journal.close()


def test_a_template_that_writes_a_secret_literally_is_journaled_by_path_and_hash(
    tmp_path: Path,
) -> None:
    """...and a reconciler given that file recovers the session with it, but not once the
    file has changed since."""
    from otel_lifecycle_hooks.supervisor.recovery import other_template, template_digests

    path = tmp_path / "scion-agent.yaml"
    path.write_text(
        "env:\n"
        "  SLACK_WEBHOOK_URL: https://hooks.example.invalid/T0/B0/literal-canary-9\n"
        "lifecycle_hooks:\n"
        "  - name: farewell\n"
        "    on: [session-end]\n"
        '    action: {type: webhook, url: "${SLACK_WEBHOOK_URL}"}\n'
        "  - name: deregister\n"
        "    on: [pre-stop]\n"
        "    action:\n"
        "      type: http\n"
        '      url: "http://127.0.0.1:9/x"\n'
    )
    loaded = load_templates([path])
    fields = session_fields(loaded, {}, {})
    assert "literal-canary" not in repr(fields)
    (entry,) = fields["templates"]
    assert "text" not in entry and entry["path"] == str(path)
    row = session(templates=tuple(fields["templates"]))
    assert other_template(row, template_digests(loaded)) == ""
    path.write_text(path.read_text() + "\n# changed since\n")
    assert "it ran another template" in other_template(row, template_digests(loaded))


def test_the_heartbeat_and_registration_wait_settings_are_durations_with_their_defaults() -> None:
    assert recovery.heartbeat_interval({}) == recovery.DEFAULT_HEARTBEAT
    assert recovery.heartbeat_interval({"LIFECYCLE_HOOKS_HEARTBEAT": "2s"}) == 2.0
    assert recovery.heartbeat_interval({"OTEL_LIFECYCLE_HOOKS_HEARTBEAT": "500ms"}) == 0.5
    assert recovery.heartbeat_interval({"LIFECYCLE_HOOKS_HEARTBEAT": "1ms"}) == 0.05  # floor
    assert recovery.heartbeat_interval({"LIFECYCLE_HOOKS_HEARTBEAT": "soon"}) == 10.0
    assert recovery.registration_wait({}) == recovery.DEFAULT_REGISTRATION_WAIT
    assert recovery.registration_wait({"LIFECYCLE_HOOKS_REGISTRATION_WAIT": "0"}) == 0.0
    assert recovery.registration_wait({"LIFECYCLE_HOOKS_REGISTRATION_WAIT": "-"}) == 30.0
