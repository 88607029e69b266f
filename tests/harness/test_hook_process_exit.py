"""How a `hook` process ends: once its events are on the supervisor's socket it ends at once,
its output flushed and nothing torn down; when the hooks ran in-process, or it failed, the
interpreter exits as usual and its exit handlers run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# A hook process as the console script starts it, with one exit handler of its own: its
# line on stdout says whether the interpreter's normal exit ran.
HOOK_WITH_EXIT_HANDLER = """
import atexit, sys
atexit.register(lambda: print("exit handlers ran", flush=True))
sys.argv = ["otel-lifecycle-hooks", "hook", *sys.argv[1:]]
from otel_lifecycle_hooks.cli.main import main
sys.exit(main())
"""


def run(args: list[str], stdin: bytes, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HOOK_WITH_EXIT_HANDLER, *args],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "LIFECYCLE_HOOKS_" not in k}
    return {**env, "HOME": str(tmp_path), "LIFECYCLE_HOOKS_LOG": str(tmp_path / "hook.log")}


def test_delivered_to_the_socket_the_process_ends_at_once_with_its_answer_flushed(
    line_server: Any, tmp_path: Path
) -> None:
    env = {**environment(tmp_path), "LIFECYCLE_HOOKS_SOCKET": line_server.path}
    dialect = tmp_path / "acme.yaml"
    dialect.write_text(
        "dialect: acme\nmappings: {Begin: {event: tool-start, fields: {tool_name: .tool}}}\n"
        "responses: {Begin: {permission: allow}}\n"
    )
    stdin = json.dumps({"hook_event_name": "Begin", "tool": "shell"}).encode()
    done = run(["--dialect-file", str(dialect)], stdin, env)
    assert done.returncode == 0, done.stderr
    # The answer the harness reads is there; the interpreter's teardown is not.
    assert done.stdout == '{"permission":"allow"}\n'
    [[line]] = line_server.wait_for(1)
    assert json.loads(line)["fields"] == {"TOOL_NAME": "shell"}


def test_a_logged_failure_ends_through_the_normal_exit(tmp_path: Path) -> None:
    done = run(["--dialect", "claude"], b"{not json", environment(tmp_path))
    assert done.returncode == 0
    assert done.stdout == "exit handlers ran\n"
    assert "payload is not valid JSON" in done.stderr
    assert "payload is not valid JSON" in (tmp_path / "hook.log").read_text()


def test_with_no_supervisor_the_in_process_hooks_end_through_the_normal_exit(
    tmp_path: Path,
) -> None:
    template = tmp_path / "agent.yaml"
    script_out = tmp_path / "fired.txt"
    template.write_text(
        "lifecycle_hooks:\n"
        "  - name: note-tool\n"
        "    on: [tool-start]\n"
        "    action:\n"
        "      type: script\n"
        f"      command: [sh, -c, 'echo fired >> {script_out}']\n"
    )
    env = {
        **environment(tmp_path),
        "OTEL_LIFECYCLE_HOOKS_STATE": str(tmp_path / "state.json"),
        "OTEL_LIFECYCLE_HOOKS_TRACE_DIR": str(tmp_path / "traces"),
        "OTEL_LIFECYCLE_HOOKS_JOURNAL": str(tmp_path / "journal.db"),
        "OTEL_METRICS_EXPORTER": "none",
    }
    payload = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "session_id": "s-1"}
    done = run(["--dialect", "claude", "--template", str(template)],
               json.dumps(payload).encode(), env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "exit handlers ran\n"
    assert script_out.read_text() == "fired\n"
    assert list((tmp_path / "traces").glob("*.jsonl"))
