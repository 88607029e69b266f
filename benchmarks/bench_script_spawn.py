"""Script spawn: one blocking script hook, from `AgentSession.record` until it returns, versus a
bare `subprocess.run` of the same script with the same JSON on stdin.

The hook's cost includes everything a supervisor pays, with the telemetry `run` sets up: the
process group, the event as JSON on stdin, output captured to the hook log, the hook span
(exported to the local trace file through a batch processor), the journal row. Interleaved
runs. The bare run is given the very bytes the hook gives the script (caught by one run of
the hook first): `read` in sh takes its input one byte per system call, so a shorter stand-in
would make the script itself cheaper in the bare run. After the runs, every execution must
have its journal row, its hook-log line and its hook span. No target (the former one, 1.3x,
is gone): shown so that a change in the cost of a script hook is seen.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import Figure, bench_arguments, interleave, report

SCRIPT = "bench_script_spawn.py"
HOOK_SPAN = "agent.lifecycle_hook announce-completion"  # named after its hook
# What a notification script does: read the event, say one line.
HOOK_SCRIPT = '#!/bin/sh\nread -r event\necho "task done"\n'


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    runs = 3 if args.quick else 200
    from otel_lifecycle_hooks import AgentSession, HookEngine, load_templates
    from otel_lifecycle_hooks.telemetry.setup import configure_telemetry
    from otel_lifecycle_hooks.telemetry.tracefile import spans_in_file

    with tempfile.TemporaryDirectory(prefix="bench-script-") as tmp:
        directory = Path(tmp)
        trace_file = directory / "traces.jsonl"
        telemetry = configure_telemetry(environ={"HOME": tmp}, trace_file=trace_file)
        script = directory / "on-task-completed.sh"
        script.write_text(HOOK_SCRIPT)
        script.chmod(0o755)
        template = directory / "scion-agent.yaml"
        template.write_text(
            "lifecycle_hooks:\n"
            "  - name: announce-completion\n"
            "    on: [task-completed]\n"
            "    action:\n"
            "      type: script\n"
            f'      command: ["{script}"]\n'
            "    blocking: true\n"
        )
        engine = HookEngine(
            load_templates([template]),
            journal=directory / "journal.db",
            hook_log=directory / "agent.log",
            tracer_provider=telemetry.tracer_provider,
        )
        session = AgentSession(
            engine, agent_name="bench-agent", tracer_provider=telemetry.tracer_provider
        )
        payload = hook_stdin(session, script, directory)

        def hook() -> float:
            started = time.perf_counter()
            result = session.record("task-completed", {"TASK_SUMMARY": "done"})
            elapsed = (time.perf_counter() - started) * 1000
            if not result.executions or result.executions[0].outcome != "success":
                raise SystemExit(f"the script hook did not succeed: {result.executions}")
            return elapsed

        def bare() -> float:
            started = time.perf_counter()
            subprocess.run([str(script)], input=payload, capture_output=True, check=True)
            return (time.perf_counter() - started) * 1000

        interleave(3, {"hook": hook, "bare": bare})  # warm up
        samples = interleave(runs, {"hook": hook, "bare": bare})
        session.end()
        engine.shutdown(5)
        telemetry.shutdown(10)
        executions = 1 + 3 + runs  # the run that caught the stdin, the warm-up, the measured
        check_records(directory, executions)
        spans = sum(span["name"] == HOOK_SPAN for span in spans_in_file(trace_file))
        if spans != executions:
            raise SystemExit(f"{spans} hook spans in the trace file for {executions} executions")

    figures = [
        Figure(
            benchmark="script spawn",
            name="blocking script hook, record() to return, median",
            value=samples["hook"].median,
            unit="ms",
            baseline=samples["bare"].median,
            baseline_name="bare subprocess.run, median",
            detail=f"hook {samples['hook'].summary()}; bare {samples['bare'].summary()}; "
            "spans to the local trace file, journal, hook log",
        )
    ]
    return report(SCRIPT, figures, args)


def hook_stdin(session: Any, script: Path, directory: Path) -> bytes:
    """What the hook writes to its script's stdin: one run with a script that keeps it."""
    kept = directory / "stdin.json"
    script.write_text(f'#!/bin/sh\ncat > "{kept}"\n')
    result = session.record("task-completed", {"TASK_SUMMARY": "done"})
    script.write_text(HOOK_SCRIPT)
    if not result.executions or result.executions[0].outcome != "success":
        raise SystemExit(f"the script hook did not succeed: {result.executions}")
    payload = kept.read_bytes()
    if json.loads(payload).get("hook_event_name") != "task-completed":
        raise SystemExit(f"the hook gave its script an unexpected stdin: {payload[:200]!r}")
    return payload


def check_records(directory: Path, executions: int) -> None:
    """Every execution has its journal row and its hook-log line (a fast figure must not come
    from records left unwritten), and the script's output reached the hook log."""
    from otel_lifecycle_hooks.journal import Journal

    journal = Journal(directory / "journal.db")
    rows = journal.recent(limit=executions + 1)
    journal.close()
    if len(rows) != executions or any(row.outcome != "success" for row in rows):
        raise SystemExit(f"{len(rows)} journal rows for {executions} executions")
    logged = (directory / "agent.log").read_text().splitlines()
    lines = sum(" outcome=success " in line for line in logged)
    if lines != executions:
        raise SystemExit(f"{lines} hook-log lines for {executions} executions")
    if sum(line.endswith("stdout] task done") for line in logged) != executions - 1:
        raise SystemExit("the script's output did not reach the hook log for every run")


if __name__ == "__main__":
    sys.exit(main())
