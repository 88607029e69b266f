"""What `run` costs at start-up: a supervised agent with a blocking HTTP hook and no exporter
configured imports only what it uses, and its stable agent id is still uuid5's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from otel_lifecycle_hooks.supervisor.options import SupervisorOptions
from otel_lifecycle_hooks.supervisor.run import agent_metadata
from otel_lifecycle_hooks.telemetry.tracefile import read_trace_file
from otel_lifecycle_hooks.template.model import Template
from tests.supervisor.supervised import Workspace, recorded, recorder_hook
from tests.support.target_server import TargetServer

# Imported by `run` only when a template, an exporter or a harness needs them.
NOT_FOR_A_PLAIN_RUN = (
    "opentelemetry.sdk.metrics",  # no metrics exporter: the API's no-op meter provider
    "hashlib",  # no auth, no signing, no journal key before the agent's spawn
    "otel_lifecycle_hooks.auth.credentials",  # no `auth:` on the hook
    "otel_lifecycle_hooks.auth.signing",
    "otel_lifecycle_hooks.template.condition",  # no `condition:`
    "otel_lifecycle_hooks.harness.activity",  # the agent reported no activity
    "otel_lifecycle_hooks.actions.script",  # no script hook, no legacy hook directory
    "difflib",  # the template has no mistake to suggest a fix for
    "tempfile",  # the event socket's directory is made without it (nor shutil, bz2, lzma)
    "shutil",
    "opentelemetry.propagate",  # no propagator configured: trace context written directly
    "encodings.idna",  # an ASCII host name is resolved as bytes
)

# Runs `run` in-process and writes the modules it imported, once it has finished.
RUNNER = textwrap.dedent(
    """
    import gc, json, sys
    from otel_lifecycle_hooks.cli.main import main
    code = main(sys.argv[2:])
    report = {
        "modules": sorted(sys.modules),
        "gc_enabled": gc.isenabled(),
        "frozen": gc.get_freeze_count(),
    }
    with open(sys.argv[1], "w") as handle:
        json.dump(report, handle)
    sys.exit(code)
    """
)


def test_a_plain_run_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    with TargetServer() as server:
        template = tmp_path / "scion-agent.yaml"
        template.write_text(
            "lifecycle_hooks:\n"
            "  - name: register\n"
            "    on: [post-start]\n"
            "    blocking: true\n"
            "    action:\n"
            "      type: http\n"
            "      method: POST\n"
            f'      url: "{server.url("/register")}"\n'
            '      body: \'{"agent": "${AGENT_NAME}"}\'\n'
        )
        modules_file = tmp_path / "modules.json"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))},
            "HOME": str(tmp_path),
            "SCION_HOOKS_DIR": str(tmp_path / "no-legacy-hooks"),
        }
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                RUNNER,
                str(modules_file),
                "run",
                "-t",
                str(template),
                "--",
                "true",
            ],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert [request.path for request in server.requests] == ["/register"]
    report = json.loads(modules_file.read_text())
    imported = set(report["modules"])
    assert "otel_lifecycle_hooks.supervisor.run" in imported  # the list is the run's own
    # The template's HTTP hook imports httpx and its instrumentation at the first request, and
    # the resolver loads the IDNA codec for the host name httpcore passes as text.
    with_http = _modules_of("import httpx, opentelemetry.instrumentation.httpx, encodings.idna")
    unneeded = [name for name in NOT_FOR_A_PLAIN_RUN if name in imported and name not in with_http]
    assert unneeded == []
    # The cyclic collector waited through start-up, then took over again, with what start-up
    # made frozen out of its scans.
    assert report["gc_enabled"] is True
    assert report["frozen"] > 10_000


def _modules_of(code: str) -> set[str]:
    """The modules a fresh interpreter has imported after running `code`."""
    listed = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        check=True,
        capture_output=True,
        text=True,
    )
    return set(json.loads(listed.stdout))


def test_the_agent_id_is_uuid5_of_the_slug_without_hashlib() -> None:
    for name in ("reviewer", "Code Reviewer #2", "agent-ü"):
        options = SupervisorOptions(
            command=["true"], template=Template(), environ={}, metadata={"AGENT_NAME": name}
        )
        metadata = agent_metadata(options)
        expected = uuid.uuid5(uuid.NAMESPACE_URL, "agent:" + metadata["AGENT_SLUG"])
        assert metadata["AGENT_ID"] == str(expected)


def test_the_session_made_after_the_spawn_is_the_one_the_agent_was_given(
    workspace: Workspace, target_server: TargetServer
) -> None:
    # Nothing fires before the agent's start: the session span is made after its spawn, with
    # the ids the agent was given, its start and the first phases' events at their moments.
    agent_env = workspace.root / "agent-env.json"
    template = workspace.template(recorder_hook(target_server.url("/events"), ["post-start"]))
    run = workspace.start(template, workspace.agent_command(env_file=str(agent_env), exit=0))

    assert run.wait(timeout=120) == 0, run.stderr
    agent_started = agent_env.stat().st_mtime_ns
    [trace_file] = workspace.trace_dir.glob("*.jsonl")
    [session] = [s for s in read_trace_file(trace_file) if s["name"] == "invoke_agent test-agent"]
    traceparent = json.loads(agent_env.read_text())["TRACEPARENT"]
    # Sampled, and the trace id random (W3C level 2's flag): what the SDK gives its span.
    assert traceparent == f"00-{session['trace_id']}-{session['span_id']}-03"
    before = [e["attributes"]["agent.lifecycle.event"] for e in session["events"][:3]]
    assert before == ["phase-change", "pre-start", "phase-change"]
    moments = [session["start_time_unix_nano"]] + [e["time_unix_nano"] for e in session["events"]]
    assert moments == sorted(moments)
    assert session["events"][2]["time_unix_nano"] <= agent_started
    assert {r["EVENT"] for r in recorded(target_server)} == {"post-start"}  # retried: again


def test_a_sampler_that_decides_makes_the_session_before_the_spawn_so_the_agent_gets_its_flags(
    workspace: Workspace, target_server: TargetServer
) -> None:
    # The session sampled out: its span is recorded for the hooks but not sampled, and the
    # agent's TRACEPARENT says so (flags 02: not sampled, the trace id random), as the SDK's
    # sampler decided.
    agent_env = workspace.root / "agent-env.json"
    template = workspace.template(recorder_hook(target_server.url("/events"), ["post-start"]))
    run = workspace.start(
        template,
        workspace.agent_command(env_file=str(agent_env), exit=0),
        env={"OTEL_TRACES_SAMPLER": "always_off"},
    )

    assert run.wait(timeout=120) == 0, run.stderr
    traceparent = json.loads(agent_env.read_text())["TRACEPARENT"]
    assert traceparent.startswith("00-") and traceparent.endswith("-02"), traceparent
    assert {r["EVENT"] for r in recorded(target_server)} == {"post-start"}  # retried: again
