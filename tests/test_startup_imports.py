"""`run` imports no HTTP client library before its first HTTP hook: when the agent is started,
httpx, httpcore, h11, requests, urllib3 and the httpx instrumentation are not in
`sys.modules`; the post-start webhook, after it, brings httpx in. Nor the journal (SQLite and
the package's journal modules) nor crash recovery: they come right after the agent's start.
Nor the span exporters and their batch processors (the SDK's export module, the local trace
file's exporter, OTLP's exporter): they are made when the first span ends. The commands'
console module is never imported (the report escapes through terminal.py). Nor the Logs API:
the first phases' event records are emitted once the agent has started. Nor, with a metrics
exporter, the metrics SDK and OTLP's metric exporter: the meter provider is made once the
agent has started. Nor, with a template of `lifecycle_hooks:` alone, the other seeds'
executors (the-loop's) or scripts (the host protocol's). Nor, with nothing to do before the
agent's start, the OTel SDK and the engine (the session is made right after the spawn), nor
the dataclasses module. Before the spawn no cyclic collection
runs, and the event socket and the HTTP route, listening, are not read yet (their readers'
threads start after the spawn)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

from tests.support.target_server import TargetServer

HTTP_CLIENTS = ("httpx", "httpcore", "h11", "requests", "urllib3",
                "opentelemetry.instrumentation.httpx")  # fmt: skip
# Opened, and recovery done, once the agent has started (supervisor/deferred.py).
JOURNAL = ("sqlite3", "_sqlite3", "otel_lifecycle_hooks.journal",
           "otel_lifecycle_hooks.supervisor.recovery")  # fmt: skip
# Made when the first span ends (telemetry/setup.py's _ExportLater).
SPAN_EXPORT = ("opentelemetry.sdk.trace.export", "otel_lifecycle_hooks.telemetry.tracefile",
               "opentelemetry.exporter.otlp", "google.protobuf")  # fmt: skip
# The phases' event records before the agent's start are held until it has started
# (engine/session.py's hold_event_records).
# Made once the agent has started (telemetry/meter_later.py).
METRICS_EXPORT = ("opentelemetry.sdk.metrics", "opentelemetry.exporter.otlp", "google.protobuf",
                  "requests")  # fmt: skip
# The other seeds' executors and scripts, loaded only for a template that has them
# (systems/__init__.py): a template of `lifecycle_hooks:` alone pays for neither.
OTHER_SYSTEMS = (
    "otel_lifecycle_hooks.systems.the_loop",
    "otel_lifecycle_hooks.systems.host_protocol",
)
# Made at the first event that fires a hook, or right after the agent's spawn
# (supervisor/phases.py): the OTel SDK and the engine.
SESSION_PARTS = (
    "opentelemetry",
    "otel_lifecycle_hooks.engine.engine",
    "otel_lifecycle_hooks.engine.session",
    "otel_lifecycle_hooks.telemetry.setup",
)
LOGS_API = ("opentelemetry._logs", "opentelemetry.logs", "otel_lifecycle_hooks.telemetry.logs_api")

# `run` as the console script starts it, with a note of the HTTP client modules imported at
# the moment the agent is spawned (the first Popen of the agent's own command) and at exit;
# of the cyclic collections from the command's start and the threads started, before the
# spawn and in all; and of the package's dataclasses made before the spawn.
RUN_NOTING_IMPORTS = """
import atexit, gc, json, subprocess, sys, threading
clients = json.loads(sys.argv[1])
out = sys.argv[2]
seen = {"collections": 0, "threads": []}

def loaded():
    return sorted(m for m in sys.modules if m.startswith(tuple(clients)))

def own_dataclasses():
    return sorted(f"{name}.{cls}" for name, module in list(sys.modules.items())
                  if name.startswith("otel_lifecycle_hooks")
                  for cls, value in vars(module).items()
                  if isinstance(value, type) and value.__module__ == name
                  and "__dataclass_fields__" in vars(value))

def collected(phase, info):
    if phase == "start":
        seen["collections"] += 1

start_thread = threading.Thread.start

def starting(self):
    seen["threads"].append(self.name)
    start_thread(self)

threading.Thread.start = starting
spawn = subprocess.Popen.__init__

def noting(self, args, *rest, **kwargs):
    if "at-spawn" not in seen and "agent-marker" in " ".join(map(str, args)):
        seen["at-spawn"] = loaded()
        seen["collections-before-spawn"] = seen["collections"]
        seen["threads-before-spawn"] = list(seen["threads"])
        seen["dataclasses-before-spawn"] = own_dataclasses()
    spawn(self, args, *rest, **kwargs)

subprocess.Popen.__init__ = noting

def write():
    seen["at-exit"] = loaded()
    with open(out, "w") as f:
        json.dump(seen, f)

atexit.register(write)
sys.argv = ["otel-lifecycle-hooks", *sys.argv[3:]]
from otel_lifecycle_hooks.cli.main import main
gc.callbacks.append(collected)  # from the command's start
sys.exit(main())
"""


def noted_imports(
    tmp_path: Path,
    url: str,
    modules: tuple[str, ...],
    *run_options: str,
    template_tail: str = "",
    **environ: str,
) -> dict[str, Any]:
    """Which of `modules` `run` had imported when it spawned its agent, and at its exit, with
    a template whose post-start webhook goes to `url` (and `template_tail` after it)."""
    template = tmp_path / "agent.yaml"
    template.write_text(
        "lifecycle_hooks:\n"
        "  - name: announce\n"
        "    on: [post-start]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{url}"\n'
        '      body: \'{"agent": "${AGENT_NAME}"}\'\n'
        "    blocking: false\n" + template_tail
    )
    noted = tmp_path / "imports.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))}
    env.update(HOME=str(tmp_path), OTEL_LIFECYCLE_HOOKS_JOURNAL=str(tmp_path / "journal.db"))
    env.update(environ)
    done = subprocess.run(
        [sys.executable, "-c", RUN_NOTING_IMPORTS, json.dumps(modules), str(noted),
         "run", *run_options, "--template", str(template), "--", "sh", "-c", "echo agent-marker"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    noted_imports: dict[str, Any] = json.loads(noted.read_text())
    return noted_imports


def test_no_http_client_is_imported_before_the_first_http_hook(
    tmp_path: Path, target_server: TargetServer
) -> None:
    seen = noted_imports(tmp_path, target_server.url("/started"), HTTP_CLIENTS)
    assert seen["at-spawn"] == []
    # The check can see them: the webhook, once it ran, had imported httpx.
    [request] = target_server.wait_for(1)
    assert request.path == "/started"
    assert "httpx" in seen["at-exit"]


def test_the_journal_and_recovery_are_imported_after_the_agent_is_started(
    tmp_path: Path, target_server: TargetServer
) -> None:
    seen = noted_imports(tmp_path, target_server.url("/started"), JOURNAL)
    assert seen["at-spawn"] == []
    # The check can see them: the session's row was written, after the agent's start.
    assert {"sqlite3", "otel_lifecycle_hooks.journal.sqlite",
            "otel_lifecycle_hooks.supervisor.recovery"} <= set(seen["at-exit"])  # fmt: skip
    with closing(sqlite3.connect(tmp_path / "journal.db")) as db:
        [(agent_pid, ended_at)] = db.execute("SELECT agent_pid, ended_at FROM sessions")
    assert agent_pid and ended_at


def test_the_span_exporters_are_made_after_the_agent_is_started(
    tmp_path: Path, target_server: TargetServer
) -> None:
    seen = noted_imports(tmp_path, target_server.url("/started"), SPAN_EXPORT)
    assert seen["at-spawn"] == []
    assert "otel_lifecycle_hooks.telemetry.tracefile" in seen["at-exit"]
    [trace_file] = (tmp_path / ".local/state/otel-lifecycle-hooks/traces").glob("*.jsonl")
    assert '"invoke_agent ' in trace_file.read_text()  # the session span was exported


def test_with_otlp_traces_the_exporter_is_made_after_the_agent_is_started(
    tmp_path: Path, target_server: TargetServer
) -> None:
    seen = noted_imports(
        tmp_path, target_server.url("/started"), SPAN_EXPORT,
        OTEL_EXPORTER_OTLP_ENDPOINT=target_server.url(""), OTEL_METRICS_EXPORTER="none",
    )  # fmt: skip
    assert seen["at-spawn"] == []
    assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in seen["at-exit"]
    paths = [request.path for request in target_server.wait_for(2)]
    assert sorted(paths) == ["/started", "/v1/traces"]


def test_the_report_escapes_through_the_terminal_module_not_the_commands_console(
    tmp_path: Path, target_server: TargetServer
) -> None:
    seen = noted_imports(tmp_path, target_server.url("/started"),
                         ("otel_lifecycle_hooks.cli.console", "otel_lifecycle_hooks.terminal"),
                         "--verbose")  # fmt: skip
    # The commands' tables are never `run`'s: the supervisor does not import the cli package.
    assert "otel_lifecycle_hooks.cli.console" not in seen["at-spawn"] + seen["at-exit"]
    # The check can see the report's escaping: with --verbose the webhook's success was a
    # line, which escaped the hook's name through terminal.py.
    assert "otel_lifecycle_hooks.terminal" in seen["at-exit"]


def test_the_logs_api_is_imported_after_the_agent_is_started(
    tmp_path: Path, target_server: TargetServer
) -> None:
    seen = noted_imports(tmp_path, target_server.url("/started"), LOGS_API)
    assert seen["at-spawn"] == []
    # The check can see it: the held records were emitted once the agent had started.
    assert "otel_lifecycle_hooks.telemetry.logs_api" in seen["at-exit"]


def test_with_otlp_metrics_the_meter_provider_is_made_after_the_agent_is_started(
    tmp_path: Path, target_server: TargetServer
) -> None:
    seen = noted_imports(
        tmp_path, target_server.url("/started"), METRICS_EXPORT,
        OTEL_EXPORTER_OTLP_ENDPOINT=target_server.url(""), OTEL_TRACES_EXPORTER="none",
    )  # fmt: skip
    assert seen["at-spawn"] == []
    assert "opentelemetry.exporter.otlp.proto.http.metric_exporter" in seen["at-exit"]
    paths = [request.path for request in target_server.wait_for(2)]
    assert sorted(paths) == ["/started", "/v1/metrics"]


def test_no_cyclic_collection_runs_before_the_agent_is_spawned(
    tmp_path: Path, target_server: TargetServer
) -> None:
    # Importing run's modules and starting it make tens of thousands of long-lived objects:
    # the collector waits (cli/main.py, then cli/run.py) until the agent is running.
    seen = noted_imports(tmp_path, target_server.url("/started"), HTTP_CLIENTS)
    assert seen["collections-before-spawn"] == 0
    # The check can see collections: once post-start is done, collection resumes.
    assert seen["collections"] > 0


def test_the_event_socket_and_the_http_route_are_read_once_the_agent_is_started(
    tmp_path: Path, target_server: TargetServer
) -> None:
    # Both listen before the spawn (what the agent sends at once waits in the backlog:
    # supervisor/test_startup_order.py); their readers' threads start after it.
    seen = noted_imports(
        tmp_path, target_server.url("/started"), HTTP_CLIENTS, LIFECYCLE_HOOKS_HTTP="1"
    )
    readers = {"event-socket", "http-ingest", "http-ingest-parse", "http-ingest-deliver"}
    assert readers.isdisjoint(seen["threads-before-spawn"])
    assert readers <= set(seen["threads"])


# No class made before the spawn is a dataclass: the dataclasses module brings inspect, ast and
# dis, 8% of that start (template/problems.py).
DATACLASSES = ("dataclasses", "inspect")


def test_no_dataclass_is_made_before_the_spawn(tmp_path: Path, target_server: TargetServer) -> None:
    seen = noted_imports(tmp_path, target_server.url("/started"), DATACLASSES)
    assert (seen["at-spawn"], seen["dataclasses-before-spawn"]) == ([], [])
    # The check can see them: the engine's values, made after the spawn, are dataclasses.
    assert "dataclasses" in seen["at-exit"]


def test_a_template_with_nothing_before_the_agent_start_has_it_started_before_the_sdk(
    tmp_path: Path, target_server: TargetServer
) -> None:
    seen = noted_imports(tmp_path, target_server.url("/started"), SESSION_PARTS)
    assert seen["at-spawn"] == []
    # The check can see them: the session, made right after the spawn, sent its post-start.
    assert {"opentelemetry.sdk.trace", "otel_lifecycle_hooks.engine.engine"} <= set(seen["at-exit"])
    # (an attempt that timed out on a busy machine is retried: the same path again)
    assert {request.path for request in target_server.wait_for(1)} == {"/started"}


def test_a_pre_start_hook_has_its_session_made_before_the_agent_is_started(
    tmp_path: Path, target_server: TargetServer
) -> None:
    before = (
        "  - name: prepare\n"
        "    on: [pre-start]\n"
        "    blocking: true\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{target_server.url("/prepared")}"\n'
    )
    seen = noted_imports(
        tmp_path, target_server.url("/started"), SESSION_PARTS, template_tail=before
    )
    assert {"opentelemetry.sdk.trace", "otel_lifecycle_hooks.engine.engine"} <= set(
        seen["at-spawn"]
    )
    paths = [request.path for request in target_server.wait_for(2)]
    assert list(dict.fromkeys(paths)) == ["/prepared", "/started"]  # retries repeat a path


def test_the_other_systems_executors_and_scripts_are_loaded_only_for_a_template_with_them(
    tmp_path: Path, target_server: TargetServer
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    seen = noted_imports(plain, target_server.url("/plain"), OTHER_SYSTEMS)
    assert seen["at-spawn"] == seen["at-exit"] == []
    # The check can see them: a template with a host-protocol script loads its reader.
    scripts = tmp_path / "scripts"
    (scripts / "hooks").mkdir(parents=True)
    script = scripts / "hooks" / "noop.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    tail = "hook_scripts:\n  - hooks/noop.sh\n"
    seen = noted_imports(scripts, target_server.url("/scripts"), OTHER_SYSTEMS, template_tail=tail)
    assert seen["at-spawn"] == ["otel_lifecycle_hooks.systems.host_protocol"]
