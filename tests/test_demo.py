"""`make demo` shows a failing hook on the terminal and in the summary, removes its temporary
folder, and prints the `ui` command that opens its journal, which it keeps: run as printed, its
page lists the session, and its Redeliver sends (the demo's template is named on the command)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

from otel_lifecycle_hooks.journal import Journal

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo" / "run_demo.py"
TEMPLATE = DEMO.with_name("scion-agent.yaml")


def journal_rows(journal: Path) -> list[Any]:
    records = Journal(journal)
    try:
        return records.executions(oldest_first=True)
    finally:
        records.close()


def journal_of(stdout: str) -> Path:
    """The journal a demo names on its first lines ("... its journal: PATH")."""
    line = next(line for line in stdout.splitlines() if "its journal: " in line)
    return Path(line.split("its journal: ", 1)[1].strip())


def _demo_environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))}
    env.update(HOME=str(home), TMPDIR=str(home))
    return env


def test_two_demos_of_one_user_at_once_keep_their_own_journals(tmp_path: Path) -> None:
    # The second demo starts while the first is running: each keeps its own journal, with
    # its own session, and neither removes the other's.
    env = _demo_environment(tmp_path)
    demos = []
    for _ in range(2):
        demo = subprocess.Popen(
            [sys.executable, str(DEMO)], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert demo.stdout is not None
        first_lines = [demo.stdout.readline(), demo.stdout.readline()]
        demos.append((demo, first_lines))
    outputs = []
    for demo, first_lines in demos:
        rest, _ = demo.communicate(timeout=180)  # a hang guard only
        assert demo.returncode == 0, "".join(first_lines) + rest
        outputs.append("".join(first_lines) + rest)
    first, second = (journal_of(output) for output in outputs)
    assert first != second
    for journal, output in zip((first, second), outputs, strict=True):
        assert journal.is_file(), output
        rows = journal_rows(journal)
        assert len({row.session_id for row in rows}) == 1, output  # its own session only
        assert sum(row.outcome == "failed" for row in rows) == 1, output


def test_the_demo_shows_its_failing_hook_and_removes_its_temporary_folder(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))}
    env.update(HOME=str(tmp_path), TMPDIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, str(DEMO)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "hook post-status-page (task-completed) failed" in result.stdout
    assert "no trace files" not in result.stdout  # `trace` found the session's spans
    summary = [line for line in result.stdout.splitlines() if "deliveries:" in line]
    assert summary and "1 failed: post-status-page 503" in summary[0], result.stdout
    assert not list(tmp_path.glob("otel-lifecycle-hooks-demo-*"))

    # Its last line is the command that opens the kept journal's page: run it as printed.
    command = result.stdout.splitlines()[-1].strip()
    journal = journal_of(result.stdout)
    assert journal.parent == tmp_path / ".local" / "state" / "otel-lifecycle-hooks" / "demos"
    assert command.startswith("env DEMO_RECEIVER=http://127.0.0.1:"), result.stdout
    assert command.endswith(
        f"ui --journal {shlex.quote(str(journal))} --template {shlex.quote(str(TEMPLATE))}"
    ), result.stdout
    assert journal.is_file()
    ui = subprocess.Popen(
        shlex.split(command), env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(ui.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(60)
        assert first and first[0].startswith("http://127.0.0.1:"), first
        url = first[0].strip()
        token = url.split("token=", 1)[1]
        origin = url.split("/#", 1)[0]
        headers = {"X-Lifecycle-Hooks-Token": token}
        api = urllib.request.Request(origin + "/api/sessions", headers=headers)
        with urllib.request.urlopen(api, timeout=30) as response:
            [session] = json.load(response)["sessions"]
        assert session["agent_name"] == "demo-agent"
        assert session["failed"] == 1

        # Redeliver of the failing hook renders from the named template and sends: the demo's
        # receiver is gone, so the attempt fails to connect (it is not refused unsent).
        failed = next(row for row in journal_rows(journal) if row.outcome == "failed")
        redeliver = urllib.request.Request(
            f"{origin}/api/deliveries/{failed.id}/redeliver", method="POST", headers=headers
        )
        with urllib.request.urlopen(redeliver, timeout=60) as response:
            outcome = json.load(response)["outcome"]
        assert (outcome["hook"], outcome["outcome"]) == ("post-status-page", "failed"), outcome
        assert outcome["id"] is not None  # journaled as a replay of the failed delivery
    finally:
        os.kill(ui.pid, signal.SIGTERM)
        ui.wait(timeout=120)
