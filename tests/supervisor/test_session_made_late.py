"""A session made after the agent's spawn (or at the first event that fires a hook) ends as
one made first would: every way out before the spawn fires the same hooks in the same order,
journals the session, writes its span with its events in order and exits with the same code;
a second stop signal before the engine exists still interrupts; `status` sees the run from
its provisioning."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_lifecycle_hooks.journal import Journal
from otel_lifecycle_hooks.supervisor.options import SupervisorOptions
from otel_lifecycle_hooks.supervisor.run import Supervisor
from otel_lifecycle_hooks.telemetry.tracefile import read_trace_file
from otel_lifecycle_hooks.template.model import Template
from otel_lifecycle_hooks.variables import JOURNAL_KEY_ENV, JOURNAL_KEY_FILE_ENV, JOURNAL_SETTINGS
from tests.supervisor.supervised import (
    Workspace,
    recorded,
    recorder_hook,
    script_hook,
    wait_until,
)
from tests.support.target_server import TargetServer

GRACE = ["--grace-period", "2s"]
SESSION_SPAN = "invoke_agent test-agent"


def legacy_pre_start(workspace: Workspace, seconds: float) -> Path:
    """A seed's legacy pre-start script that marks its start, then waits `seconds` or until
    the file `release` appears beside the mark: the run stays in provisioning meanwhile, with
    no template hook fired (the session not made)."""
    directory = Path(workspace.env["SCION_HOOKS_DIR"])
    directory.mkdir()
    started = workspace.root / "legacy-pre-start-started"
    release = workspace.root / "release"
    script = directory / "pre-start"
    script.write_text(
        f"#!/bin/sh\ntouch {started}\n"
        f"for i in $(seq {int(seconds * 10)}); do [ -e {release} ] && exit 0; sleep 0.1; done\n"
    )
    script.chmod(0o755)
    return started


def session_span(workspace: Workspace) -> dict[str, Any]:
    [trace_file] = workspace.trace_dir.glob("*.jsonl")
    [span] = [s for s in read_trace_file(trace_file) if s["name"] == SESSION_SPAN]
    return span


def span_events(span: dict[str, Any]) -> list[tuple[str, str]]:
    """(event, phase) of each lifecycle event on the session span, in the span's order."""
    return [
        (e["attributes"]["agent.lifecycle.event"], e["attributes"].get("agent.phase", ""))
        for e in span["events"]
    ]


def moments_in_order(span: dict[str, Any]) -> bool:
    moments = [span["start_time_unix_nano"]] + [e["time_unix_nano"] for e in span["events"]]
    return moments == sorted(moments)


def closed_sessions(workspace: Workspace) -> list[tuple[str, int | None]]:
    return [(row.agent_name, row.exit_code) for row in Journal(workspace.journal).sessions()]


def test_a_second_sigterm_during_a_pre_start_with_no_hook_interrupts_session_ends_hooks(
    workspace: Workspace, target_server: TargetServer
) -> None:
    # A second stop signal asks for no further attempts: session-end's hooks are journaled
    # as interrupted, not sent, even when the engine is made after the signals came.
    started = legacy_pre_start(workspace, 3)
    template = workspace.template(recorder_hook(target_server.url("/events"), ["session-end"]))
    agent_started = workspace.root / "agent-started"
    run = workspace.start(template, workspace.agent_command(touch=str(agent_started)), *GRACE)
    wait_until(started.exists, what="the legacy pre-start script to start")

    run.signal(signal.SIGTERM)
    time.sleep(0.5)  # two signals apart: the kernel merges a second one still pending
    run.signal(signal.SIGTERM)
    assert run.wait(timeout=120) == 128 + signal.SIGTERM, run.stderr

    assert not agent_started.exists()
    assert recorded(target_server) == []
    [row] = Journal(workspace.journal).recent("recorder")
    assert row.error_type == "interrupted", row


def test_status_shows_a_run_in_provisioning_while_a_legacy_pre_start_script_runs(
    workspace: Workspace,
) -> None:
    started = legacy_pre_start(workspace, 30)
    template = workspace.template(recorder_hook("http://127.0.0.1:9/events", ["post-start"]))
    run = workspace.start(template, workspace.agent_command(exit=0))
    wait_until(started.exists, what="the legacy pre-start script to start")

    status = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "status"],
        env=workspace.env,
        cwd=workspace.root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    (workspace.root / "release").touch()
    assert run.wait(timeout=120) == 0, run.stderr
    assert f"supervisor pid {run.process.pid}: agent test-agent, phase provisioning" in (
        status.stdout
    ), (status.stdout, status.stderr)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_stop_signal_during_a_pre_start_with_no_hook_ends_the_session_as_a_stop_would(
    workspace: Workspace, target_server: TargetServer, signum: int
) -> None:
    started = legacy_pre_start(workspace, 2)
    template = workspace.template(
        recorder_hook(target_server.url("/events"), ["pre-stop", "session-end"])
    )
    run = workspace.start(template, workspace.agent_command(exit=0), *GRACE)
    wait_until(started.exists, what="the legacy pre-start script to start")

    run.signal(signum)
    assert run.wait(timeout=120) == 128 + signum, run.stderr

    assert [(e["EVENT"], e["PHASE"]) for e in recorded(target_server)] == [
        ("pre-stop", "stopping"),
        ("session-end", "stopped"),
    ]
    span = session_span(workspace)
    assert span_events(span) == [
        ("phase-change", "provisioning"),
        ("pre-start", "provisioning"),
        ("phase-change", "stopping"),
        ("pre-stop", "stopping"),
        ("phase-change", "stopped"),
        ("session-end", "stopped"),
    ]
    assert moments_in_order(span)
    assert closed_sessions(workspace) == [("test-agent", 128 + signum)]


@pytest.mark.parametrize("events", [["error"], ["session-end"], ["phase-change"]])
def test_a_command_not_found_fires_its_hooks_and_writes_the_whole_session(
    workspace: Workspace, target_server: TargetServer, events: list[str]
) -> None:
    template = workspace.template(recorder_hook(target_server.url("/events"), events))
    run = workspace.start(template, [str(workspace.root / "no-such-agent")])
    assert run.wait(timeout=120) == 127, run.stderr

    fired = [(e["EVENT"], e["PHASE"]) for e in recorded(target_server)]
    expected = {
        "error": [("error", "error")],
        "session-end": [("session-end", "error")],
        "phase-change": [
            ("phase-change", "provisioning"),
            ("phase-change", "starting"),
            ("phase-change", "error"),
        ],
    }[events[0]]
    assert fired == expected
    span = session_span(workspace)
    assert span_events(span) == [
        ("phase-change", "provisioning"),
        ("pre-start", "provisioning"),
        ("phase-change", "starting"),
        ("phase-change", "error"),
        ("error", "error"),
        ("session-end", "error"),
    ]
    assert moments_in_order(span)
    assert closed_sessions(workspace) == [("test-agent", 127)]


def test_a_failing_pre_start_hook_ends_the_session_with_its_span_and_exit_1(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = workspace.template(
        script_hook("provision", ["pre-start"], ["false"], blocking="true", on_error="fail")
        + recorder_hook(target_server.url("/events"), ["error", "session-end"])
    )
    agent_started = workspace.root / "agent-started"
    run = workspace.start(template, workspace.agent_command(touch=str(agent_started)))
    assert run.wait(timeout=120) == 1, run.stderr

    assert not agent_started.exists()
    assert [e["EVENT"] for e in recorded(target_server)] == ["error", "session-end"]
    span = session_span(workspace)
    assert [name for name, _ in span_events(span)] == [
        "phase-change",
        "pre-start",
        "phase-change",
        "error",
        "session-end",
    ]
    assert moments_in_order(span)
    assert closed_sessions(workspace) == [("test-agent", 1)]


@pytest.mark.parametrize("where", ["environment", "template"])
def test_with_the_sdk_disabled_the_agent_gets_the_traceparent_main_gives(
    workspace: Workspace, where: str
) -> None:
    agent_env = workspace.root / "agent-env.json"
    extra = "env:\n  OTEL_SDK_DISABLED: 'true'\n" if where == "template" else ""
    template = workspace.template(recorder_hook("http://127.0.0.1:9/x", ["post-start"]), extra)
    env = {"OTEL_SDK_DISABLED": "true"} if where == "environment" else {}
    run = workspace.start(
        template, workspace.agent_command(env_file=str(agent_env), exit=0), env=env
    )
    assert run.wait(timeout=120) == 0, run.stderr
    traceparent = json.loads(agent_env.read_text())["TRACEPARENT"]
    if where == "environment":
        assert traceparent == ""  # no span, no parent to give
    else:
        assert traceparent.startswith("00-") and traceparent[-2:] in ("01", "03"), traceparent


@pytest.mark.parametrize(
    "otel",
    [
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
        {"OTEL_TRACES_SAMPLER": "always_on"},
        {"OTEL_TRACES_SAMPLER": " ParentBased_Always_On "},
        {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1"},
        {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"},
        {"OTEL_TRACES_SAMPLER": "no-such-sampler"},
    ],
    ids=["otlp", "always_on", "spelled", "ratio-1", "ratio-0", "unknown"],
)
def test_the_agents_traceparent_is_its_session_spans_whatever_the_exporter_and_sampler(
    workspace: Workspace, target_server: TargetServer, otel: dict[str, str]
) -> None:
    # The hook's request carries the session's trace (its span is the session span's child).
    agent_env = workspace.root / "agent-env.json"
    template = workspace.template(recorder_hook(target_server.url("/events"), ["post-start"]))
    run = workspace.start(
        template, workspace.agent_command(env_file=str(agent_env), exit=0), env=otel
    )
    assert run.wait(timeout=120) == 0, run.stderr

    traceparent = json.loads(agent_env.read_text())["TRACEPARENT"]
    # One delivery; on a busy machine an attempt may time out and be retried, in one trace.
    requests = list(target_server.requests)
    assert requests
    [trace_id] = {request.headers["traceparent"].split("-")[1] for request in requests}
    assert traceparent.split("-")[1] == trace_id
    sampled = otel.get("OTEL_TRACES_SAMPLER_ARG") != "0"
    assert traceparent.endswith("-03" if sampled else "-02"), traceparent
    [row] = Journal(workspace.journal).recent("recorder")
    assert row.trace_id == trace_id
    if "OTEL_TRACES_EXPORTER" not in otel and sampled:
        span = session_span(workspace)
        assert traceparent == f"00-{span['trace_id']}-{span['span_id']}-03"


def test_history_lists_a_late_made_sessions_hooks_under_its_session(
    workspace: Workspace, target_server: TargetServer
) -> None:
    template = workspace.template(recorder_hook(target_server.url("/events"), ["post-start"]))
    run = workspace.start(template, workspace.agent_command(exit=0))
    assert run.wait(timeout=120) == 0, run.stderr

    [session] = Journal(workspace.journal).sessions()
    assert session.exit_code == 0 and session.agent_pid is not None
    assert session.started_at <= session.post_started_at <= session.ended_at  # type: ignore[operator]
    history = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "history", "--session", session.session_id],
        env=workspace.env,
        cwd=workspace.root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert history.returncode == 0, history.stderr
    [line] = [line for line in history.stdout.splitlines() if "recorder" in line]
    assert "post-start" in line, history.stdout


def test_a_sampler_in_the_templates_env_decides_the_agents_flags_too(
    workspace: Workspace, target_server: TargetServer
) -> None:
    agent_env = workspace.root / "agent-env.json"
    template = workspace.template(
        recorder_hook(target_server.url("/events"), ["post-start"]),
        "env:\n  OTEL_TRACES_SAMPLER: always_off\n",
    )
    run = workspace.start(template, workspace.agent_command(env_file=str(agent_env), exit=0))
    assert run.wait(timeout=120) == 0, run.stderr

    traceparent = json.loads(agent_env.read_text())["TRACEPARENT"]
    # One delivery; on a busy machine an attempt may time out and be retried, in one trace.
    trace_ids = {request.headers["traceparent"].split("-")[1] for request in target_server.requests}
    assert trace_ids == {traceparent.split("-")[1]}
    assert traceparent.endswith("-02"), traceparent


def test_a_library_caller_running_an_agent_inside_its_own_span_gets_a_child_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `Supervisor` is public: called under a span of the caller's, the session span is its
    # child, and the agent is given that child's ids.
    for name in (*JOURNAL_SETTINGS, JOURNAL_KEY_ENV, JOURNAL_KEY_FILE_ENV):
        if name in os.environ:  # the run takes them out of the process environment
            monkeypatch.setenv(name, os.environ[name])
    given = tmp_path / "traceparent"
    code = f"import os; open({str(given)!r}, 'w').write(os.environ.get('TRACEPARENT', ''))"
    options = SupervisorOptions(
        command=[sys.executable, "-c", code],
        template=Template(),
        environ={
            "HOME": str(tmp_path),
            "PATH": os.environ.get("PATH", ""),
            "OTEL_LIFECYCLE_HOOKS_TRACE_DIR": str(tmp_path / "traces"),
            "OTEL_METRICS_EXPORTER": "none",
            "SCION_HOOKS_DIR": str(tmp_path / "no-legacy-hooks"),
        },
        journal=False,
        hook_log=str(tmp_path / "hooks.log"),
        metadata={"AGENT_NAME": "library-agent"},
    )
    caller = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    with trace.use_span(NonRecordingSpan(caller)):
        assert Supervisor(options).run() == 0

    [trace_file] = (tmp_path / "traces").glob("*.jsonl")
    [span] = [s for s in read_trace_file(trace_file) if s["name"] == "invoke_agent library-agent"]
    assert span["trace_id"] == f"{caller.trace_id:032x}"
    assert given.read_text() == f"00-{span['trace_id']}-{span['span_id']}-01"
