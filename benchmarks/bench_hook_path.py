"""Harness hook path: `otel-lifecycle-hooks hook --dialect claude` as a whole process, against a
running supervisor, versus an empty interpreter.

Claude Code runs the command twice per tool call (PreToolUse, PostToolUse), so its wall time is
added to every tool call of the agent. Target: median at most 2x `python -c pass` of the same
install (the venv's python: the same site-packages and .pth files as the hook pays for).

The floor is shown beside it: `python -c "import json"`, the one module the hook cannot do
without (the payload is JSON), which brings `re`, `enum`, `functools` and `collections` with
it; and the modules the hook imports beyond an empty interpreter, from `-X importtime`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import (
    Figure,
    base_python,
    bench_arguments,
    clean_env,
    compile_package,
    console_script,
    interleave,
    paired_ratio,
    registry_server,
    report,
    running_supervisor,
    seed_template,
    time_process,
)

SCRIPT = "bench_hook_path.py"
TARGET_RATIO = 2.0
# What Claude Code sends before and after a Bash tool call (fields as its hooks documentation
# lists them), alternated so that the supervisor sees real activity changes.
TOOL_CALL_PAYLOADS = [
    {
        "session_id": "0f1d6c1e-5c7b-4b8e-9d0a-3e1f2a4b5c6d",
        "transcript_path": "/home/agent/.claude/projects/app/0f1d6c1e.jsonl",
        "cwd": "/workspace/app",
        "permission_mode": "default",
        "hook_event_name": event,
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q tests/", "description": "Run the tests"},
        **(
            {"tool_response": {"stdout": "42 passed", "stderr": "", "interrupted": False}}
            if event == "PostToolUse"
            else {}
        ),
    }
    for event in ("PreToolUse", "PostToolUse")
]


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    runs = 2 if args.quick else 60
    compile_package()
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as tmp, registry_server() as registry:
        home = Path(tmp)
        template = seed_template(home, registry.url)
        with running_supervisor(template, home) as supervisor:
            hook_log = home / "hook-command.log"
            env = clean_env(
                home,
                OTEL_LIFECYCLE_HOOKS_SOCKET=supervisor.socket_path,
                OTEL_LIFECYCLE_HOOKS_LOG=str(hook_log),
            )
            payloads = [json.dumps(p).encode() for p in TOOL_CALL_PAYLOADS]
            turn = iter(range(10**9))

            def hook(argv: list[str]) -> float:
                return time_process(argv, stdin=payloads[next(turn) % 2], env=env)

            subjects = {
                "venv python -c pass": lambda: time_process(
                    [sys.executable, "-c", "pass"], env=env
                ),
                "python3 -c pass": lambda: time_process([base_python(), "-c", "pass"], env=env),
                "import json": lambda: time_process([sys.executable, "-c", "import json"], env=env),
                "console script": lambda: hook([console_script(), "hook", "--dialect", "claude"]),
                "python -m": lambda: hook(
                    [sys.executable, "-m", "otel_lifecycle_hooks", "hook", "--dialect", "claude"]
                ),
            }
            interleave(1, subjects)  # warm the page cache
            samples = interleave(runs, subjects)
            failures = hook_log.read_text() if hook_log.exists() else ""
            if failures:
                raise SystemExit(f"the hook command reported failures:\n{failures}")
            profile = import_profile(env)
        # SIGTERM ends the session: the debounced activity PATCH must have reached the registry.
        delivered = [r for r in registry.requests if r[0] == "PATCH"]
        if not delivered:
            raise SystemExit("no activity change reached the registry: events were lost")

    baseline = samples["venv python -c pass"]
    figures = []
    for name in ("console script", "python -m"):
        measured = samples[name]
        figures.append(
            Figure(
                benchmark="hook path",
                name=f"hook --dialect claude ({name}), median",
                value=measured.median,
                unit="ms",
                baseline=baseline.median,
                baseline_name="venv python -c pass, median",
                # What harnesses run is the console script (`hook_command()` writes it);
                # `python -m` adds runpy's imports, shown for reference.
                target=TARGET_RATIO if name == "console script" else None,
                paired_ratio=paired_ratio(measured, baseline),
                detail=(
                    f"ratio: median of {len(measured.values)} interleaved pairs; "
                    f"{measured.summary()}; baseline {baseline.summary()}"
                ),
            )
        )
    floor = samples["import json"]
    figures.append(
        Figure(
            benchmark="hook path",
            name='floor: python -c "import json" (what reading the payload needs), median',
            value=floor.median,
            unit="ms",
            baseline=baseline.median,
            baseline_name="venv python -c pass, median",
            paired_ratio=paired_ratio(floor, baseline),
            detail=floor.summary(),
        )
    )
    base = samples["python3 -c pass"]
    figures.append(
        Figure(
            benchmark="hook path",
            name="python3 -c pass (base interpreter, its own site-packages)",
            value=base.median,
            unit="ms",
            baseline=baseline.median,
            baseline_name="venv python -c pass, median",
            detail=base.summary(),
        )
    )
    code = report(SCRIPT, figures, args)
    print(f"  modules the hook path imports beyond `python -c pass`: {profile}")
    return code


def import_profile(env: dict[str, str]) -> str:
    """`python -X importtime`: the modules `hook` imports that an empty interpreter does not,
    the costliest first (self time, microseconds)."""

    def imports(argv: list[str], stdin: bytes) -> dict[str, int]:
        completed = subprocess.run(
            [sys.executable, "-X", "importtime", *argv],
            input=stdin,
            capture_output=True,
            env=env,
            check=False,
        )
        found: dict[str, int] = {}
        for line in completed.stderr.decode().splitlines():
            match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s+(\S+)", line)
            if match:
                found[match.group(2)] = int(match.group(1))
        return found

    empty = imports(["-c", "pass"], b"")
    payload = json.dumps(TOOL_CALL_PAYLOADS[0]).encode()
    hook = imports([console_script(), "hook", "--dialect", "claude"], payload)
    extra = sorted(((us, name) for name, us in hook.items() if name not in empty), reverse=True)
    total = sum(us for us, _ in extra) / 1000.0
    shown = ", ".join(f"{name} {us / 1000:.1f}" for us, name in extra[:8])
    return (
        f"{len(extra)} modules, {total:.1f} ms self time under -X importtime "
        f"(costliest: {shown} ms)"
    )


if __name__ == "__main__":
    sys.exit(main())
