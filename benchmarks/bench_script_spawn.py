"""Script spawn: one blocking script hook, from `AgentSession.record` until it returns, versus a
bare `subprocess.run` of the same script with the same JSON on stdin.

The hook's cost includes everything a supervisor pays: the process group, the event as JSON on
stdin, output captured to the hook log, the hook span, the journal row. Interleaved runs.
Target: at most 1.3x the bare run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Figure, bench_arguments, interleave, report

SCRIPT = "bench_script_spawn.py"
TARGET_RATIO = 1.3
# What a notification script does: read the event, say one line.
HOOK_SCRIPT = '#!/bin/sh\nread -r event\necho "task done"\n'


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    runs = 3 if args.quick else 200
    from otel_lifecycle_hooks import AgentSession, HookEngine, load_templates

    with tempfile.TemporaryDirectory(prefix="bench-script-") as tmp:
        directory = Path(tmp)
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
        )
        session = AgentSession(engine, agent_name="bench-agent")
        payload = (json.dumps({"hook_event_name": "task-completed", "context": {}}) + "\n").encode()

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
        logged = (directory / "agent.log").read_text()
        if "task done" not in logged:
            raise SystemExit("the script's output never reached the hook log")

    figures = [
        Figure(
            benchmark="script spawn",
            name="blocking script hook, record() to return, median",
            value=samples["hook"].median,
            unit="ms",
            baseline=samples["bare"].median,
            baseline_name="bare subprocess.run, median",
            target=TARGET_RATIO,
            detail=f"hook {samples['hook'].summary()}; bare {samples['bare'].summary()}",
        )
    ]
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
