"""Start-up: `otel-lifecycle-hooks run -- true` with the seed's agent-registry template (its
URLs on a loopback stand-in registry), as a whole process, versus
`python -c "import opentelemetry.sdk.trace"`.

The run does all a session does: telemetry set-up, pre-start, the blocking post-start
registration (an HTTP POST), the child, session-end and the shutdown that drains the hooks
and flushes the trace. Interleaved runs. Target: at most 1.5x.
"""

from __future__ import annotations

import sys
import tempfile
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
# What the run needs from its dependencies before it can do anything of its own: the SDK's
# traces, YAML for the template and SQLite for the journal (the HTTP client is the package's
# own, on the standard library's sockets).
DEPENDENCY_FLOOR = "import opentelemetry.sdk.trace, yaml, sqlite3"


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    runs = 1 if args.quick else 25
    compile_package()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp, registry_server() as registry:
        home = Path(tmp)
        template = seed_template(home, registry.url)
        env = clean_env(home, OTEL_LIFECYCLE_HOOKS_LOG=str(home / "agent.log"))
        run = [console_script(), "run", "--template", str(template), "--", "true"]
        subjects = {
            "run -- true": lambda: time_process(run, env=env),
            "import opentelemetry.sdk.trace": lambda: time_process(
                [sys.executable, "-c", "import opentelemetry.sdk.trace"], env=env
            ),
            "dependency floor": lambda: time_process(
                [sys.executable, "-c", DEPENDENCY_FLOOR], env=env
            ),
        }
        if not args.quick:
            interleave(1, subjects)  # warm up
        samples = interleave(runs, subjects)
        registrations = [r for r in registry.requests if r[0] == "POST"]
        if len(registrations) < runs:
            raise SystemExit(f"{len(registrations)} registrations for {runs + 1} runs")

    measured, baseline = samples["run -- true"], samples["import opentelemetry.sdk.trace"]
    figures = [
        Figure(
            benchmark="start-up",
            name="run -- true (seed template), median",
            value=measured.median,
            unit="ms",
            baseline=baseline.median,
            baseline_name='python -c "import opentelemetry.sdk.trace", median',
            target=TARGET_RATIO,
            paired_ratio=paired_ratio(measured, baseline),
            detail=(
                f"ratio: median of {len(measured.values)} interleaved pairs (ratio of the "
                f"medians {measured.median / baseline.median:.2f}x); run {measured.summary()}; "
                f"import {baseline.summary()}"
            ),
        ),
        Figure(
            benchmark="start-up",
            name="dependency floor: importing what run needs, nothing else, median",
            value=samples["dependency floor"].median,
            unit="ms",
            baseline=baseline.median,
            baseline_name='python -c "import opentelemetry.sdk.trace", median',
            detail=f"python -c {DEPENDENCY_FLOOR!r}",
        ),
    ]
    return report(SCRIPT, figures, args)


if __name__ == "__main__":
    sys.exit(main())
