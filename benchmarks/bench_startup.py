"""Start-up: the time from starting `otel-lifecycle-hooks run` (this install's console script)
until its agent is started, against `python -c "import opentelemetry.sdk.trace"`.

The agent is `sh -c 'printf x > FIFO'`: the moment the benchmark reads that byte is the
moment the agent ran. The run goes on (post-start, the agent's exit, session-end, the
shutdown that drains the hooks and flushes the trace) and is waited for, but not timed.

- The judged line: the seed's agent-registry hooks with the post-start registration
  non-blocking (`blocking: false`) and no `harness:` (so no Claude Code HTTP route), spans
  going to the local trace file (no OTLP endpoint).
- The seed template as it is: `harness: claude` opens the loopback HTTP route for Claude
  Code's hooks before the agent starts (its server, token and settings file); its post-start
  registration is blocking, which holds `run`'s later steps, not the agent's start (the agent
  is started before post-start fires, in both templates).
- The judged template with OTLP export on, to a loopback listener.
- The floor: `python -c "import ..."` of every module, not the package's own, that `run`
  has imported when it spawns its agent (from `-X importtime`, up to a mark written at the
  spawn, with the template's post-start hooks left out); and the launcher the
  agent is started through (so that it dies with a killed supervisor), around `true`.

Every registration must reach the loopback registry, and with OTLP on every run must export
to the listener, or the script exits 2. Target: at most 1.5x (it was 1.3x: the start-up
tricks that bought the difference, a few milliseconds, cost every reader more than they saved).
"""

from __future__ import annotations

import os
import re
import select
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import (
    Figure,
    bench_arguments,
    clean_env,
    compile_package,
    console_script,
    interleave,
    paired_ratio,
    registry_server,
    report,
    seed_template,
    time_process,
)

SCRIPT = "bench_startup.py"
TARGET_RATIO = 1.5
BASELINE = "import opentelemetry.sdk.trace"
AGENT_MARK = "agent-started"
# The package's own modules are what is measured, not the floor.
OWN = "otel_lifecycle_hooks"


def startup_templates(directory: Path, base_url: str) -> tuple[Path, Path, Path]:
    """The seed template, the judged one (post-start non-blocking, no harness) and the
    floor's (the judged one without its post-start hooks)."""
    seed = seed_template(directory, base_url)
    head, marker, tail = seed.read_text().partition("  - name: update-registry-activity")
    if "    blocking: true\n" not in head or "\nharness: claude\n" not in head:
        raise SystemExit("the seed template changed: update startup_templates")
    head = head.replace("\nharness: claude\n", "\n")
    judged = directory / "non-blocking-post-start.yaml"
    judged.write_text(head.replace("    blocking: true\n", "    blocking: false\n") + marker + tail)
    before_hooks, hooks_marker, _ = head.partition("  - name: register-with-agent-registry")
    floor = directory / "without-post-start.yaml"
    floor.write_text(before_hooks + marker + tail)
    if hooks_marker == "" or "post-start" in floor.read_text():
        raise SystemExit("the seed template's post-start hook was not found: update this")
    return seed, judged, floor


def until_agent_started(argv: list[str], env: dict[str, str], fifo: Path) -> float:
    """Milliseconds from starting `argv` (a `run ... -- sh -c 'printf x > fifo'`) until the
    agent wrote to `fifo`; the run must then exit 0."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        started = time.perf_counter()
        process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        readable, _, _ = select.select([reader], [], [], 60)
        elapsed = (time.perf_counter() - started) * 1000.0
        _, err = process.communicate(timeout=60)
        if not readable or os.read(reader, 1) != b"x":
            raise RuntimeError(f"the agent never started: {err[-500:]!r}")
    finally:
        os.close(reader)
    if process.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited {process.returncode}: {err[-500:]!r}")
    return elapsed


# `run` as its console script runs it, writing the agent's mark on stderr when it spawns the
# agent: a mark the agent wrote itself would come after whatever `run` imported meanwhile,
# after the spawn (the journal, SQLite, the Logs API), which the agent's start did not wait for.
RUN_MARKING_THE_SPAWN = """
import subprocess, sys
from otel_lifecycle_hooks.cli.main import main
spawn = subprocess.Popen.__init__

def marking(self, args, *rest, **kwargs):
    if MARK in " ".join(map(str, args)):
        print(MARK, file=sys.stderr, flush=True)
    spawn(self, args, *rest, **kwargs)

subprocess.Popen.__init__ = marking
sys.exit(main())
"""


def modules_before_agent(template: Path, env: dict[str, str]) -> list[str]:
    """The modules, not the package's own nor an empty interpreter's, that `run` imported
    before it spawned its agent (`-X importtime` lines before the spawn's mark on stderr)."""

    def imported(argv: list[str], marked: bool = True) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", *argv],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        names: list[str] = []
        for line in done.stderr.splitlines():
            if line.strip() == AGENT_MARK:
                return names
            match = re.match(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", line)
            if match:
                names.append(match.group(1))
        if not marked:
            return names
        raise SystemExit(f"no spawn mark in the -X importtime run: {done.stderr[-1000:]}")

    empty = set(imported(["-c", "pass"], marked=False))
    program = RUN_MARKING_THE_SPAWN.replace("MARK", repr(AGENT_MARK))
    child = f": {AGENT_MARK}"
    run = imported(["-c", program, "run", "--template", str(template), "--", "sh", "-c", child])
    wanted = list(dict.fromkeys(n for n in run if n not in empty and n.split(".")[0] != OWN))
    # -X importtime lists failed attempts too (another platform's modules, optional ones).
    probe = (
        "import sys\nfor name in sys.argv[1:]:\n    try:\n        __import__(name)\n"
        "    except ImportError:\n        continue\n    print(name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *wanted],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.split()


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    runs = 2 if args.quick else 20
    compile_package()
    with (
        tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp,
        registry_server() as registry,
        registry_server() as collector,
    ):
        home = Path(tmp)
        fifo = home / "agent-started"
        os.mkfifo(fifo)
        seed, non_blocking, floor_template = startup_templates(home, registry.url)
        env = clean_env(home, LIFECYCLE_HOOKS_LOG=str(home / "agent.log"))
        otlp_env = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url}
        agent = ["--", "sh", "-c", f"printf x > {shlex.quote(str(fifo))}"]

        def run(template: Path, run_env: dict[str, str]) -> Callable[[], float]:
            argv = [console_script(), "run", "--template", str(template), *agent]
            return lambda: until_agent_started(argv, run_env, fifo)

        floor_modules = modules_before_agent(floor_template, env)
        floor_code = "import " + ", ".join(floor_modules)
        # What `run` starts its agent through, so that the agent dies with a killed
        # supervisor: the package's own launcher argv, around `true`.
        from otel_lifecycle_hooks.supervisor.processes import die_with_parent

        launcher, _ = die_with_parent(["true"], env)
        subjects = {
            BASELINE: lambda: time_process([sys.executable, "-c", BASELINE], env=env),
            "non-blocking": run(non_blocking, env),
            "seed": run(seed, env),
            "otlp": run(non_blocking, otlp_env),
            "floor": lambda: time_process([sys.executable, "-c", floor_code], env=env),
            "launcher": lambda: time_process(launcher, env=env),
            "true": lambda: time_process(["true"], env=env),
        }
        registered_before = len(registry.requests)
        interleave(1, subjects)  # warm the page cache
        samples = interleave(runs, subjects)
        started_runs = 3 * (runs + 1)
        registrations = [r for r in registry.requests[registered_before:] if r[0] == "POST"]
        exports = [r for r in collector.requests if r[1].endswith("/v1/traces")]
        http_before_agent = [
            n for n in floor_modules if n.split(".")[0] in ("httpx", "httpcore", "h11", "requests")
        ]
    if len(registrations) != started_runs:
        print(f"{len(registrations)} registrations for {started_runs} runs", file=sys.stderr)
        return 2
    if len(exports) < runs + 1:
        print(f"{len(exports)} OTLP exports for {runs + 1} runs with OTLP on", file=sys.stderr)
        return 2

    baseline = samples[BASELINE]
    baseline_name = f'python -c "{BASELINE}", median'

    def figure(key: str, name: str, target: float | None, detail: str) -> Figure:
        measured = samples[key]
        return Figure(
            benchmark="start-up",
            name=name,
            value=measured.median,
            unit="ms",
            baseline=baseline.median,
            baseline_name=baseline_name,
            target=target,
            paired_ratio=paired_ratio(measured, baseline),
            detail=f"ratio: median of {runs} interleaved pairs; {measured.summary()}; {detail}",
        )

    figures = [
        figure(
            "non-blocking",
            "until the agent is started, non-blocking post-start, local trace file, median",
            TARGET_RATIO,
            f"baseline {baseline.summary()}",
        ),
        figure(
            "seed",
            "until the agent is started, seed template (Claude Code's HTTP route), median",
            None,
            "the route's server, token and settings file are made before the agent starts",
        ),
        figure(
            "otlp",
            "until the agent is started, non-blocking post-start, OTLP export on, median",
            None,
            f"{len(exports)} exports reached the loopback listener",
        ),
        figure(
            "floor",
            "floor: importing what run has imported when the agent starts, median",
            None,
            f"{len(floor_modules)} modules not the package's own; HTTP clients among them: "
            f"{', '.join(http_before_agent) or 'none'}",
        ),
    ]
    launched, bare = samples["launcher"], samples["true"]
    launcher_kind = (
        "a second interpreter (-S -I)"
        if launcher[0] == sys.executable
        else f"{os.path.basename(launcher[0])} --pdeathsig and /bin/sh (checking its parent)"
    )
    if launcher[0] != "true":
        figures.append(
            figure(
                "launcher",
                "floor: the agent's launcher alone (`true` through it), median",
                None,
                f"{launcher_kind} setting PR_SET_PDEATHSIG, then exec: "
                f"{launched.median - bare.median:.1f} ms over `true` alone "
                f"({bare.summary()})",
            )
        )
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
